/* fm_input.c — see fm_input.h. */
#define _POSIX_C_SOURCE 200809L
#include "fm_input.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory, not a file";
  if (S_ISFIFO(m)) return "a FIFO or pipe, not a regular file";
  if (S_ISSOCK(m)) return "a socket, not a regular file";
  if (S_ISCHR(m)) return "a character device, not a regular file";
  if (S_ISBLK(m)) return "a block device, not a regular file";
  return "not a regular file";
}

fm_status fm_input_open(const char *path, FILE **out, fm_err *err) {
  *out = NULL;
  int fd;
  do fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int e = errno;
    fm_fail(err, FM_EIO, "%s: cannot open: %s", path, strerror(e));
    errno = e; /* for callers with their own wording */
    return FM_EIO;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return fm_fail(err, FM_EIO, "%s: cannot open: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    if (S_ISDIR(sb.st_mode))
      return fm_fail(err, FM_EUNSUPPORTED, "%s: is %s", path, kind_of(sb.st_mode));
    return fm_fail(err, FM_EUNSUPPORTED,
                   "%s: is %s; fmsim reads its inputs from regular files (save the data to a "
                   "file first)", path, kind_of(sb.st_mode));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(fd);
    return fm_fail(err, FM_EIO, "%s: cannot open: %s", path, strerror(e));
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    return fm_fail(err, FM_EIO, "%s: cannot open: %s", path, strerror(e));
  }
  *out = f;
  return FM_OK;
}
