/* fm_fileio.h — atomic file output: write to a temporary file beside the
 * target, rename into place on commit, remove it otherwise. Used by every
 * writer in fmsim so that no failure leaves a half-written file. */
#ifndef FM_FILEIO_H
#define FM_FILEIO_H

#include <stdio.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_atomic_file {
  FILE *f;
  char path[4096];     /* final path */
  char tmp_path[4096]; /* path.tmp.XXXXXX while open */
} fm_atomic_file;

fm_status fm_atomic_open(fm_atomic_file *af, const char *path, fm_err *err);
fm_status fm_atomic_write(fm_atomic_file *af, const void *data, size_t n, fm_err *err);
/* commit = 1: flush, close and rename onto path; 0: close and remove. */
fm_status fm_atomic_close(fm_atomic_file *af, int commit, fm_err *err);

/* Writes a whole text buffer atomically. */
fm_status fm_write_file_atomic(const char *path, const char *text, size_t n, fm_err *err);

/* Creates a directory (and missing parents); an existing directory is fine. */
fm_status fm_mkdir_p(const char *path, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
