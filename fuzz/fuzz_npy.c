/* fuzz_npy — the .npy reader (fm_npy.c): preamble, header length, the header
 * dict (descr, fortran_order, shape), and the data size against the file. */
#include "fuzz_util.h"
#include "fm_npy.h"

FUZZ_DEFAULT_INIT

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size);
  fm_npy_header h;
  fm_err err;
  void *buf = NULL;
  if (fm_npy_load(path, &h, &buf, 64 << 20, &err) == FM_OK) {
    /* the whole data must be readable: touch its last byte */
    int64_t bytes = h.count * fm_dtype_size(h.dtype);
    volatile uint8_t sink = bytes > 0 ? ((uint8_t *)buf)[bytes - 1] : 0;
    (void)sink;
    free(buf);
  }
  return 0;
}
