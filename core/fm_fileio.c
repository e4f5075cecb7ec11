#define _POSIX_C_SOURCE 200809L
#include "fm_fileio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

fm_status fm_atomic_open(fm_atomic_file *af, const char *path, fm_err *err) {
  memset(af, 0, sizeof *af);
  if (strlen(path) + 16 >= sizeof af->path)
    return fm_fail(err, FM_EINVAL, "%s: path too long", path);
  snprintf(af->path, sizeof af->path, "%s", path);
  snprintf(af->tmp_path, sizeof af->tmp_path, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(af->tmp_path);
  if (fd < 0) {
    af->tmp_path[0] = 0;
    return fm_fail(err, FM_EIO, "%s: cannot write: %s", path, strerror(errno));
  }
  fchmod(fd, 0644);
  af->f = fdopen(fd, "wb");
  if (!af->f) {
    close(fd);
    unlink(af->tmp_path);
    af->tmp_path[0] = 0;
    return fm_fail(err, FM_EIO, "%s: cannot write: %s", path, strerror(errno));
  }
  return FM_OK;
}

fm_status fm_atomic_write(fm_atomic_file *af, const void *data, size_t n, fm_err *err) {
  if (!af->f) return fm_fail(err, FM_EIO, "%s: not open", af->path);
  if (n && fwrite(data, 1, n, af->f) != n)
    return fm_fail(err, FM_EIO, "%s: write failed: %s", af->path, strerror(errno));
  return FM_OK;
}

fm_status fm_atomic_close(fm_atomic_file *af, int commit, fm_err *err) {
  if (!af->f) return FM_OK;
  int bad = fflush(af->f) != 0 || ferror(af->f);
  int saved = errno;
  bad |= fclose(af->f) != 0;
  af->f = NULL;
  if (commit && !bad && rename(af->tmp_path, af->path) == 0) {
    af->tmp_path[0] = 0;
    return FM_OK;
  }
  if (commit && !bad) saved = errno;
  unlink(af->tmp_path);
  af->tmp_path[0] = 0;
  if (!commit) return FM_OK;
  return fm_fail(err, FM_EIO, "%s: cannot write: %s", af->path, strerror(saved));
}

fm_status fm_write_file_atomic(const char *path, const char *text, size_t n, fm_err *err) {
  fm_atomic_file af;
  fm_status st = fm_atomic_open(&af, path, err);
  if (st != FM_OK) return st;
  st = fm_atomic_write(&af, text, n, err);
  fm_status cs = fm_atomic_close(&af, st == FM_OK, st == FM_OK ? err : NULL);
  return st != FM_OK ? st : cs;
}

fm_status fm_mkdir_p(const char *path, fm_err *err) {
  char buf[4096];
  if (strlen(path) >= sizeof buf) return fm_fail(err, FM_EINVAL, "%s: path too long", path);
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return fm_fail(err, FM_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST)
    return fm_fail(err, FM_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
  struct stat sb;
  if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return fm_fail(err, FM_EIO, "%s: exists and is not a directory", buf);
  return FM_OK;
}
