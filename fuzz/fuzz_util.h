/* fuzz_util.h — what the harnesses share: fuzz input as a file path (the
 * parsers read files), a memory limit for the code's own checks, and the
 * entry points libFuzzer or fuzz/driver.c call. */
#ifndef FM_FUZZ_UTIL_H
#define FM_FUZZ_UTIL_H

#define _GNU_SOURCE /* memfd_create */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The code under test refuses allocations past this (fm_limits.h), well
 * inside libFuzzer's default RSS limit of 2 GiB: a refusal is a clean
 * result, an allocation past it would be an out-of-memory report. */
#define FUZZ_MEM_LIMIT "256M"

static inline void fuzz_init_env(void) { setenv("FMSIM_MEM_LIMIT", FUZZ_MEM_LIMIT, 1); }

/* The initializer of a harness that needs nothing else. */
#define FUZZ_DEFAULT_INIT                                                                         \
  int LLVMFuzzerInitialize(int *argc, char ***argv) {                                             \
    (void)argc;                                                                                   \
    (void)argv;                                                                                   \
    fuzz_init_env();                                                                              \
    return 0;                                                                                     \
  }

/* Writes the input into one in-memory file (reused across runs) and returns
 * a path that opens it: /proc/self/fd/N of a memfd, or a temporary file. */
static inline const char *fuzz_file(const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[128];
  if (fd < 0) {
#ifdef MFD_CLOEXEC
    fd = memfd_create("fmsim-fuzz", 0);
#endif
    if (fd >= 0) {
      snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    } else {
      snprintf(path, sizeof path, "/tmp/fmsim-fuzz.%d", (int)getpid());
      fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
      if (fd < 0) abort();
    }
  }
  if (ftruncate(fd, 0) != 0) abort();
  size_t done = 0;
  while (done < size) {
    ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
    if (w <= 0) abort();
    done += (size_t)w;
  }
  return path;
}

/* A NUL-terminated copy of the input (caller frees). */
static inline char *fuzz_text(const uint8_t *data, size_t size) {
  char *t = malloc(size + 1);
  if (!t) abort();
  memcpy(t, data, size);
  t[size] = 0;
  return t;
}

#endif
