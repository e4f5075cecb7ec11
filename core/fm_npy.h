/* fm_npy.h — strict NumPy .npy reading and writing (format versions 1.0-3.0).
 *
 * Reading validates the magic, the version, the header dict (exactly the keys
 * 'descr', 'fortran_order', 'shape'), little-endian or byte-order-free dtypes,
 * C order, and that the file holds every data byte. Writing goes to a
 * temporary file in the same folder and renames it into place, so a failed
 * write leaves nothing behind.
 */
#ifndef FM_NPY_H
#define FM_NPY_H

#include <stdint.h>
#include <stdio.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FM_NPY_MAX_DIMS 8

typedef enum fm_dtype {
  FM_DT_BOOL, /* '|b1' */
  FM_DT_U8,   /* '|u1' */
  FM_DT_I8,   /* '|i1' */
  FM_DT_U16,  /* '<u2' (also bfloat16 stored as raw uint16) */
  FM_DT_F16,  /* '<f2' */
  FM_DT_I32,  /* '<i4' */
  FM_DT_F32,  /* '<f4' */
  FM_DT_I64,  /* '<i8' */
  FM_DT_U64,  /* '<u8' */
  FM_DT_F64,  /* '<f8' */
  FM_DT_COUNT
} fm_dtype;

const char *fm_dtype_descr(fm_dtype t); /* "|b1", "<i4", ... */
int fm_dtype_size(fm_dtype t);          /* bytes per element */

typedef struct fm_npy_header {
  fm_dtype dtype;
  int ndim;
  int64_t shape[FM_NPY_MAX_DIMS];
  int64_t count;       /* product of shape */
  int64_t data_offset; /* bytes from the file start to the first element */
} fm_npy_header;

/* Reads and validates the header of an open file (positioned anywhere);
 * `path` only names the file in messages. On success the stream is positioned
 * at data_offset. */
fm_status fm_npy_read_header(FILE *f, const char *path, fm_npy_header *h, fm_err *err);

/* Opens a file, reads and validates its header, closes it. */
fm_status fm_npy_read_header_path(const char *path, fm_npy_header *h, fm_err *err);

/* Opens, validates and reads a whole array into a new buffer (caller frees
 * with free()). max_bytes caps the allocation (clear FM_ENOMEM past it), and
 * so does what the machine can give (fm_mem_check). The header's shape is
 * never trusted past the file's own size (header length and data both). */
fm_status fm_npy_load(const char *path, fm_npy_header *h, void **data, int64_t max_bytes,
                      fm_err *err);

/* Writes an array atomically (temporary file + rename). */
fm_status fm_npy_save(const char *path, fm_dtype t, int ndim, const int64_t *shape,
                      const void *data, fm_err *err);

/* Streaming writer for arrays produced piece by piece: open writes the header
 * to a temporary file, write appends raw elements, close renames into place
 * (or removes the temporary when commit is 0 or an earlier step failed).
 * The target follows fm_fileio.h's rules (a new path or a regular file only);
 * path "-" streams to standard output (every write and the final flush
 * checked: `> /dev/full` fails with "No space left on device"). fm_npy_save
 * goes through this writer, so it takes "-" too: a caller whose stdout
 * carries other text refuses "-" itself. */
typedef struct fm_npy_writer fm_npy_writer;
fm_status fm_npy_writer_open(const char *path, fm_dtype t, int ndim, const int64_t *shape,
                             fm_npy_writer **out, fm_err *err);
fm_status fm_npy_writer_write(fm_npy_writer *w, const void *data, int64_t count, fm_err *err);
fm_status fm_npy_writer_close(fm_npy_writer *w, int commit, fm_err *err); /* NULL: no-op */

#ifdef __cplusplus
}
#endif
#endif
