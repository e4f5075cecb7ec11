#define _GNU_SOURCE /* syscall(SYS_getdents64): listing a folder inside a signal handler */
#include "fm_fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

/* ---- the cleanup table (rule 6) -------------------------------------------- */

#define FM_CLEANUP_SLOTS 32
#define FM_CLEANUP_PATH 4200

static struct {
  volatile sig_atomic_t kind; /* 0: free, else fm_cleanup_kind */
  char path[FM_CLEANUP_PATH];
} cleanup_slots[FM_CLEANUP_SLOTS];
static volatile sig_atomic_t cleanup_installed;
/* The signals whose default action ends the process and that a user, a shell
 * or the kernel sends to a writer: interrupt, terminate, hang-up, quit (core),
 * file size limit (RLIMIT_FSIZE, core), CPU limit, a closed pipe, an alarm. */
static const int cleanup_signals[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                                      SIGXFSZ, SIGXCPU, SIGPIPE, SIGALRM};
#define FM_CLEANUP_NSIGNALS ((int)(sizeof cleanup_signals / sizeof cleanup_signals[0]))

static void remove_tree(const char *dir) {
#ifdef __linux__
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (fd >= 0) {
    char buf[4096];
    for (int round = 0; round < 64; round++) { /* unlinking while listing: list again */
      if (lseek(fd, 0, SEEK_SET) != 0) break;
      long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      int removed = 0;
      for (long off = 0; off < n;) {
        unsigned short reclen;
        memcpy(&reclen, buf + off + 16, sizeof reclen); /* d_ino, d_off, then d_reclen */
        const char *name = buf + off + 19;              /* after d_type */
        if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0 && unlinkat(fd, name, 0) == 0)
          removed++;
        off += reclen;
      }
      if (!removed) break;
    }
    close(fd);
  }
#endif
  rmdir(dir);
}

void fm_cleanup_now(void) {
  for (int kind = FM_CLEANUP_FILE; kind <= FM_CLEANUP_EMPTY_DIR; kind++)
    for (int i = 0; i < FM_CLEANUP_SLOTS; i++) {
      if (cleanup_slots[i].kind != kind) continue;
      if (kind == FM_CLEANUP_FILE) unlink(cleanup_slots[i].path);
      else if (kind == FM_CLEANUP_TREE) remove_tree(cleanup_slots[i].path);
      else rmdir(cleanup_slots[i].path);
      cleanup_slots[i].kind = 0;
    }
}

static void on_signal(int sig) {
  int saved = errno;
  fm_cleanup_now();
  errno = saved;
  /* SA_RESETHAND put the default back: die of the same signal once the
     handler returns (the exit status says which signal it was) */
  raise(sig);
}

static void cleanup_install(void) {
  if (cleanup_installed) return;
  cleanup_installed = 1;
  for (int i = 0; i < FM_CLEANUP_NSIGNALS; i++) {
    struct sigaction old, sa;
    if (sigaction(cleanup_signals[i], NULL, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue; /* ignored, or someone else's */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(cleanup_signals[i], &sa, NULL);
  }
}

int fm_cleanup_add(const char *path, fm_cleanup_kind kind) {
  if (strlen(path) >= FM_CLEANUP_PATH) return -1;
  cleanup_install();
  for (int i = 0; i < FM_CLEANUP_SLOTS; i++) {
    if (cleanup_slots[i].kind) continue;
    memcpy(cleanup_slots[i].path, path, strlen(path) + 1);
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the path is complete before the slot is live */
    cleanup_slots[i].kind = kind;
    return i;
  }
  return -1;
}

void fm_cleanup_forget(int slot) {
  if (slot >= 0 && slot < FM_CLEANUP_SLOTS) cleanup_slots[slot].kind = 0;
}

/* Runs create(tmpl) with the cleanup signals blocked and registers the
 * result, so that no signal can fall between the creation and the
 * registration. Returns create's result (an fd, or 0 for a folder; -1 on
 * failure with errno kept). */
static int create_registered(char *tmpl, fm_cleanup_kind kind, int *slot) {
  sigset_t block, old;
  sigemptyset(&block);
  for (int i = 0; i < FM_CLEANUP_NSIGNALS; i++) sigaddset(&block, cleanup_signals[i]);
  cleanup_install();
  sigprocmask(SIG_BLOCK, &block, &old);
  int r = kind == FM_CLEANUP_FILE ? mkstemp(tmpl) : mkdtemp(tmpl) ? 0 : -1;
  int saved = errno;
  *slot = r >= 0 ? fm_cleanup_add(tmpl, kind) : -1;
  sigprocmask(SIG_SETMASK, &old, NULL);
  errno = saved;
  return r;
}

char *fm_mkdtemp_registered(char *tmpl, int *slot) {
  return create_registered(tmpl, FM_CLEANUP_TREE, slot) == 0 ? tmpl : NULL;
}

/* ---- sweeping leftovers of killed runs ----------------------------------------- */

/* NAME = PREFIX<digits>.<6 chars>: the pid, or 0 when NAME is not of that form. */
static long stale_pid(const char *name, const char *prefix) {
  size_t n = strlen(prefix);
  if (strncmp(name, prefix, n) != 0) return 0;
  const char *p = name + n;
  long pid = 0;
  int digits = 0;
  while (*p >= '0' && *p <= '9' && digits < 10) {
    pid = pid * 10 + (*p++ - '0');
    digits++;
  }
  if (!digits || *p != '.' || strlen(p + 1) != 6) return 0;
  return pid;
}

int fm_sweep_stale(const char *dir, const char *prefix, int trees) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int removed = 0;
  struct dirent *e;
  char p[FM_CLEANUP_PATH];
  while ((e = readdir(d))) {
    long pid = stale_pid(e->d_name, prefix);
    if (pid <= 0 || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to know) */
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p) continue;
    struct stat sb;
    if (lstat(p, &sb) != 0 || sb.st_uid != getuid()) continue;
    if (S_ISREG(sb.st_mode) && unlink(p) == 0) removed++;
    if (S_ISDIR(sb.st_mode) && trees) {
      remove_tree(p);
      removed += access(p, F_OK) != 0;
    }
  }
  closedir(d);
  return removed;
}

/* ---- the target (rules 1 and 4) -------------------------------------------------- */

static const char *kind_name(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

/* Resolves the file to replace into `target` (cap bytes): the path itself, or
 * the file its last-component link points to. *mode: the existing file's
 * permission bits, or -1 for a new file. */
static fm_status resolve_target(const char *path, unsigned flags, char *target, size_t cap,
                                int *mode, fm_err *err) {
  struct stat sb;
  *mode = -1;
  if (!*path) return fm_fail(err, FM_EINVAL, "empty output path");
  if (strlen(path) >= cap) return fm_fail(err, FM_EINVAL, "%.200s...: output path too long", path);
  snprintf(target, cap, "%s", path);
  if (lstat(path, &sb) != 0) {
    if (errno == ENOENT) return FM_OK; /* a new file (a missing folder shows at creation) */
    return fm_fail(err, FM_EIO, "%s: cannot write: %s", path, strerror(errno));
  }
  if (S_ISLNK(sb.st_mode)) {
    if (flags & FM_OUT_NOFOLLOW)
      return fm_fail(err, FM_EINVAL, "%s: is a symbolic link; fmsim does not follow links it did "
                     "not create (remove it first)", path);
    char *real = realpath(path, NULL);
    if (!real)
      return fm_fail(err, FM_EINVAL, "%s: symbolic link to a missing or unreachable file (%s); "
                     "refusing to follow it", path, strerror(errno));
    size_t n = strlen(real);
    if (n < cap) memcpy(target, real, n + 1);
    free(real);
    if (n >= cap) return fm_fail(err, FM_EINVAL, "%s: the link's target path is too long", path);
    if (stat(target, &sb) != 0)
      return fm_fail(err, FM_EIO, "%s: cannot write: %s", target, strerror(errno));
  }
  if (!S_ISREG(sb.st_mode))
    return fm_fail(err, FM_EINVAL, "%s: is %s, not a regular file; refusing to replace it%s", path,
                   kind_name(sb.st_mode),
                   (flags & FM_OUT_STDOUT) && !S_ISDIR(sb.st_mode) ? " (-o - writes to stdout)" : "");
  *mode = (int)(sb.st_mode & 07777);
  return FM_OK;
}

fm_status fm_output_check(const char *path, unsigned flags, fm_err *err) {
  char target[4096];
  int mode;
  if ((flags & FM_OUT_STDOUT) && strcmp(path, "-") == 0) return FM_OK;
  return resolve_target(path, flags, target, sizeof target, &mode, err);
}

/* Splits "a/b/name" into the folder ("a/b", "." when none) and the name. */
static void split_path(const char *path, char *dir, size_t cap, const char **base) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, cap, ".");
    *base = path;
  } else if (slash == path) {
    snprintf(dir, cap, "/");
    *base = slash + 1;
  } else {
    snprintf(dir, cap, "%.*s", (int)(slash - path), path);
    *base = slash + 1;
  }
}

fm_status fm_atomic_open_ex(fm_atomic_file *af, const char *path, unsigned flags, fm_err *err) {
  memset(af, 0, sizeof *af);
  af->slot = -1;
  if ((flags & FM_OUT_STDOUT) && strcmp(path, "-") == 0) {
    snprintf(af->path, sizeof af->path, "-");
    af->f = stdout;
    af->to_stdout = 1;
    return FM_OK;
  }
  int mode;
  fm_status st = resolve_target(path, flags, af->path, sizeof af->path, &mode, err);
  if (st != FM_OK) return st;
  char dir[4096], prefix[300];
  const char *base;
  split_path(af->path, dir, sizeof dir, &base);
  if (strlen(base) < 250) { /* leftovers of a killed writer of this very target */
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    fm_sweep_stale(dir, prefix, 0);
  }
  snprintf(af->tmp_path, sizeof af->tmp_path, "%s.tmp.%ld.XXXXXX", af->path, (long)getpid());
  int fd = create_registered(af->tmp_path, FM_CLEANUP_FILE, &af->slot);
  if (fd < 0) {
    af->tmp_path[0] = 0;
    return fm_fail(err, FM_EIO, "%s: cannot write: %s", path, strerror(errno));
  }
  if (mode < 0) {
    mode_t mask = umask(0);
    umask(mask);
    mode = (int)(0666 & ~mask);
  }
  fchmod(fd, (mode_t)mode);
  af->f = fdopen(fd, "wb");
  if (!af->f) {
    int saved = errno;
    close(fd);
    unlink(af->tmp_path);
    fm_cleanup_forget(af->slot);
    af->slot = -1;
    af->tmp_path[0] = 0;
    return fm_fail(err, FM_EIO, "%s: cannot write: %s", path, strerror(saved));
  }
  return FM_OK;
}

fm_status fm_atomic_open(fm_atomic_file *af, const char *path, fm_err *err) {
  return fm_atomic_open_ex(af, path, 0, err);
}

fm_status fm_atomic_write(fm_atomic_file *af, const void *data, size_t n, fm_err *err) {
  if (!af->f) return fm_fail(err, FM_EIO, "%s: not open", af->path);
  if (n && fwrite(data, 1, n, af->f) != n)
    return fm_fail(err, FM_EIO, "%s: write failed: %s", af->to_stdout ? "standard output" : af->path,
                   strerror(errno));
  return FM_OK;
}

/* Flush, fsync and close, keeping the first errno; 0 on success. */
static int finish_file(FILE *f, int sync, int *saved) {
  int bad = 0;
  *saved = 0;
  if (fflush(f) != 0 || ferror(f)) {
    bad = 1;
    *saved = errno ? errno : EIO;
  }
  if (!bad && sync && fsync(fileno(f)) != 0 && errno != EINVAL) { /* EINVAL: cannot sync (pipe) */
    bad = 1;
    *saved = errno;
  }
  if (fclose(f) != 0 && !bad) {
    bad = 1;
    *saved = errno;
  }
  return bad;
}

fm_status fm_atomic_close(fm_atomic_file *af, int commit, fm_err *err) {
  if (!af->f) return FM_OK;
  int saved;
  if (af->to_stdout) {
    errno = 0;
    int bad = fflush(stdout) != 0 || ferror(stdout);
    saved = errno ? errno : EIO;
    af->f = NULL;
    if (bad && commit)
      return fm_fail(err, FM_EIO, "cannot write to standard output: %s", strerror(saved));
    return FM_OK;
  }
  errno = 0;
  const char *sync = getenv("FMSIM_FSYNC");
  int bad = finish_file(af->f, commit && sync && *sync == '1', &saved);
  af->f = NULL;
  if (commit && !bad && rename(af->tmp_path, af->path) != 0) {
    bad = 1;
    saved = errno;
  } else if (commit && !bad) {
    fm_cleanup_forget(af->slot);
    af->slot = -1;
    af->tmp_path[0] = 0;
    return FM_OK;
  }
  unlink(af->tmp_path);
  fm_cleanup_forget(af->slot);
  af->slot = -1;
  af->tmp_path[0] = 0;
  if (!commit) return FM_OK;
  return fm_fail(err, FM_EIO, "%s: cannot write: %s", af->path, strerror(saved));
}

fm_status fm_write_file_atomic_ex(const char *path, const char *text, size_t n, unsigned flags,
                                  fm_err *err) {
  fm_atomic_file af;
  fm_status st = fm_atomic_open_ex(&af, path, flags, err);
  if (st != FM_OK) return st;
  st = fm_atomic_write(&af, text, n, err);
  fm_status cs = fm_atomic_close(&af, st == FM_OK, st == FM_OK ? err : NULL);
  return st != FM_OK ? st : cs;
}

fm_status fm_write_file_atomic(const char *path, const char *text, size_t n, fm_err *err) {
  return fm_write_file_atomic_ex(path, text, n, 0, err);
}

fm_status fm_mkdir_p(const char *path, fm_err *err) {
  char buf[4096];
  if (strlen(path) >= sizeof buf) return fm_fail(err, FM_EINVAL, "%.200s...: path too long", path);
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return fm_fail(err, FM_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0 && errno != EEXIST)
    return fm_fail(err, FM_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
  struct stat sb;
  if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return fm_fail(err, FM_EINVAL, "%s: exists and is not a directory", buf);
  return FM_OK;
}

/* ---- output folders (rule 7) ------------------------------------------------------ */

/* The first symbolic link among dir's entries, `depth` levels deep (staging
 * folders included: they are fmsim's own). FM_EINVAL naming it. */
static fm_status no_links(const char *dir, int depth, fm_err *err) {
  DIR *d = opendir(dir);
  if (!d) return FM_OK; /* a folder that cannot be listed shows when it is written */
  fm_status st = FM_OK;
  struct dirent *e;
  char p[4600];
  while (st == FM_OK && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p) continue;
    struct stat sb;
    if (lstat(p, &sb) != 0) continue;
    if (S_ISLNK(sb.st_mode))
      st = fm_fail(err, FM_EINVAL, "%s: is a symbolic link in the output folder; fmsim does not "
                   "write through links it did not create (remove it, or choose another folder)", p);
    else if (S_ISDIR(sb.st_mode) && depth > 1)
      st = no_links(p, depth - 1, err);
  }
  closedir(d);
  return st;
}

/* Opens and flocks l->path; 0, 1 when another process holds it, -1 on error
 * (errno). Retries when the file was replaced between open and flock. */
static int lock_file(fm_outdir_lock *l) {
  for (int round = 0; round < 16; round++) {
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < FM_CLEANUP_NSIGNALS; i++) sigaddset(&block, cleanup_signals[i]);
    cleanup_install();
    sigprocmask(SIG_BLOCK, &block, &old); /* no signal between creating and registering */
    int fd = open(l->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    int saved = errno;
    l->slot = fd >= 0 ? fm_cleanup_add(l->path, FM_CLEANUP_FILE) : -1;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (fd < 0) {
      errno = saved;
      return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      saved = errno;
      fm_cleanup_forget(l->slot); /* the file is the holder's: never remove it */
      l->slot = -1;
      close(fd);
      if (saved == EWOULDBLOCK) return 1;
      errno = saved;
      return -1;
    }
    struct stat held, now;
    if (fstat(fd, &held) == 0 && lstat(l->path, &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino) {
      l->fd = fd;
      return 0;
    }
    fm_cleanup_forget(l->slot); /* a released lock's file, unlinked by its holder: again */
    l->slot = -1;
    close(fd);
  }
  errno = EAGAIN;
  return -1;
}

fm_status fm_outdir_lock_take(fm_outdir_lock *l, const char *dir, int depth, fm_err *err) {
  memset(l, 0, sizeof *l);
  l->fd = l->slot = l->dir_slot = -1;
  if (!*dir) return fm_fail(err, FM_EINVAL, "empty output folder name");
  if (strlen(dir) >= sizeof l->dir - 16) return fm_fail(err, FM_EINVAL, "%.200s...: path too long", dir);
  snprintf(l->dir, sizeof l->dir, "%s", dir);
  snprintf(l->path, sizeof l->path, "%s/.fmsim.lock", dir);
  struct stat sb;
  l->created_dir = stat(dir, &sb) != 0 && errno == ENOENT;
  if (!l->created_dir && !S_ISDIR(sb.st_mode))
    return fm_fail(err, FM_EINVAL, "%s: exists and is not a directory", dir);
  for (size_t n = 1; l->created_dir && !l->top[0]; n++) { /* the first missing component */
    if (dir[n] != '/' && dir[n] != 0) continue;
    snprintf(l->top, sizeof l->top, "%.*s", (int)n, dir);
    if (stat(l->top, &sb) == 0) l->top[0] = 0;
    if (!dir[n]) break;
  }
  fm_status st = fm_mkdir_p(dir, err);
  if (st != FM_OK) return st;
  if (l->created_dir) l->dir_slot = fm_cleanup_add(dir, FM_CLEANUP_EMPTY_DIR);
  l->held = 1; /* from here on release undoes what take did */
  int r = lock_file(l);
  if (r != 0) {
    int saved = errno;
    fm_outdir_lock_release(l);
    if (r == 1)
      return fm_fail(err, FM_EINVAL, "%s: another fmsim run is writing this folder (%s/.fmsim.lock "
                     "is locked); wait for it or choose another folder", dir, dir);
    if (saved == ELOOP)
      return fm_fail(err, FM_EINVAL, "%s/.fmsim.lock: is a symbolic link; fmsim does not follow "
                     "links it did not create (remove it first)", dir);
    return fm_fail(err, FM_EIO, "%s: cannot write into the folder: %s", dir, strerror(saved));
  }
  st = no_links(dir, depth, err);
  if (st != FM_OK) fm_outdir_lock_release(l);
  return st;
}

void fm_outdir_lock_release(fm_outdir_lock *l) {
  if (!l->held) return;
  l->held = 0;
  if (l->fd >= 0) {
    unlink(l->path); /* while still held: a waiter that locked it sees it gone and retries */
    close(l->fd);
    l->fd = -1;
  }
  fm_cleanup_forget(l->slot);
  l->slot = -1;
  if (l->created_dir && l->top[0]) { /* only where empty: a refusal leaves nothing behind */
    char p[4096];
    snprintf(p, sizeof p, "%s", l->dir);
    for (;;) {
      while (strlen(p) > 1 && p[strlen(p) - 1] == '/') p[strlen(p) - 1] = 0;
      if (rmdir(p) != 0 || strlen(p) <= strlen(l->top)) break;
      char *slash = strrchr(p, '/');
      if (!slash) break;
      *slash = 0;
    }
  }
  fm_cleanup_forget(l->dir_slot);
  l->dir_slot = -1;
}
