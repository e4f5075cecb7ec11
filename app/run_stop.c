/* run_stop.c — Ctrl-C and SIGTERM during a run (run_stop.h). */
#define _GNU_SOURCE
#include "run_stop.h"

#include "fm_fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int requested, ended, printed;
static pthread_t watcher_thread, runner_thread;
static int running;
static sigset_t old_mask;
static struct sigaction old_freeze;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char case_dir[4600];
static int case_unfinished;
static char message[1024];

/* ---- sweeping, without stdio or malloc (the watcher runs it while the runner is frozen) -- */

struct linux_dirent64 {
  unsigned long long d_ino;
  long long d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

/* Calls fn(dirfd, name, arg) for every entry of the folder at fd but . and ..;
 * entries are re-read after each pass so that removals do not skip any. */
static void each_entry(int fd, void (*fn)(int, const char *, void *), void *arg) {
  char buf[8192];
  for (int pass = 0; pass < 64; pass++) {
    lseek(fd, 0, SEEK_SET);
    long n, seen = 0;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
      for (long off = 0; off < n;) {
        struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
        off += d->d_reclen;
        if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, "..")) continue;
        seen++;
        fn(fd, d->d_name, arg);
      }
    if (seen == 0 || !arg) return;
    if (*(int *)arg == 0) return; /* nothing removed this pass */
    *(int *)arg = 0;
  }
}

static void remove_file(int dirfd, const char *name, void *removed) {
  if (unlinkat(dirfd, name, 0) == 0 && removed) *(int *)removed = 1;
}

/* Removes folder name (files only inside) below dirfd. */
static void remove_flat_dir(int dirfd, const char *name) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    int removed = 0;
    each_entry(fd, remove_file, &removed);
    close(fd);
  }
  unlinkat(dirfd, name, AT_REMOVEDIR);
}

typedef struct sweep_arg {
  int removed; /* first: each_entry's "anything removed" flag */
  int unfinished;
} sweep_arg;

static void sweep_entry(int dirfd, const char *name, void *arg) {
  sweep_arg *a = arg;
  if (!strncmp(name, ".staging.", 9)) {
    remove_flat_dir(dirfd, name);
    a->removed = 1;
  } else if (strstr(name, ".tmp.") || a->unfinished) {
    if (unlinkat(dirfd, name, 0) == 0) a->removed = 1;
  }
}

void run_stop_sweep(const char *dir, int unfinished) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  sweep_arg a = {.removed = 0, .unfinished = unfinished};
  each_entry(fd, sweep_entry, &a);
  close(fd);
  if (unfinished) rmdir(dir);
}

/* ---- the watcher -------------------------------------------------------------------------- */

static void freeze(int sig) {
  (void)sig;
  for (;;) pause();
}

static void say(void) {
  if (atomic_exchange(&printed, 1)) return;
  ssize_t n = write(2, message, strlen(message));
  (void)n;
}

static void *watch(void *unused) {
  (void)unused;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR2);
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0 || atomic_load(&ended)) return NULL;
    if (sig == SIGUSR2) continue;
    atomic_store(&requested, sig);
    /* the runner stops by itself between steps: give it the grace period */
    for (int t = 0; t < RUN_STOP_GRACE_MS / 10; t++) {
      struct timespec ts = {.tv_sec = 0, .tv_nsec = 10 * 1000000L};
      nanosleep(&ts, NULL);
      if (atomic_load(&ended)) return NULL;
    }
    /* a long step: cut it */
    pthread_kill(runner_thread, SIGUSR1);
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 20 * 1000000L};
    nanosleep(&ts, NULL);
    if (case_dir[0]) run_stop_sweep(case_dir, case_unfinished);
    fm_cleanup_now(); /* registered temporaries and the output folder's lock file */
    say();
    _exit(128 + sig);
  }
}

int run_stop_begin(void) {
  atomic_store(&requested, 0);
  atomic_store(&ended, 0);
  atomic_store(&printed, 0);
  case_dir[0] = 0;
  message[0] = 0;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR2);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = freeze;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &old_freeze);
  pthread_sigmask(SIG_BLOCK, &set, &old_mask);
  runner_thread = pthread_self();
  if (pthread_create(&watcher_thread, NULL, watch, NULL) != 0) {
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    sigaction(SIGUSR1, &old_freeze, NULL);
    return -1;
  }
  running = 1;
  return 0;
}

void run_stop_end(void) {
  if (!running) return;
  running = 0;
  atomic_store(&ended, 1);
  pthread_kill(watcher_thread, SIGUSR2);
  pthread_join(watcher_thread, NULL);
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  sigaction(SIGUSR1, &old_freeze, NULL);
}

int run_stop_requested(void) { return atomic_load(&requested); }

void run_stop_case(const char *dir, int unfinished) {
  pthread_mutex_lock(&lock);
  snprintf(case_dir, sizeof case_dir, "%s", dir ? dir : "");
  case_unfinished = unfinished;
  pthread_mutex_unlock(&lock);
}

void run_stop_message(const char *fmt, ...) {
  char buf[sizeof message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  size_t n = strlen(buf);
  buf[n] = '\n';
  buf[n + 1] = 0;
  pthread_mutex_lock(&lock);
  memcpy(message, buf, n + 2);
  pthread_mutex_unlock(&lock);
}

/* The runner prints the same line itself when it stops between steps. */
void run_stop_say(void) { say(); }
