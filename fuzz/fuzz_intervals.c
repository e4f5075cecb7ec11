/* fuzz_intervals — interval files (Paddle startend_row_indices, int32/int64
 * [B, H, Sk, k]) through the one reader, fm_intervals_load (fm_intervals_io.c),
 * strict and with Paddle's reading. Byte 0 picks the causal flag and Sq (0:
 * Sq = Sk); the rest is the file. */
#include "fuzz_util.h"
#include "fm_colmask.h"
#include "fm_intervals_io.h"

FUZZ_DEFAULT_INIT

static void use(fm_colmask *m) {
  int32_t runs[3][2];
  fm_colmask_smallest_form(m);
  for (int32_t j = 0; j < fm_colmask_sk(m) && j < 4096; j++)
    fm_colmask_column_runs(m, fm_colmask_nsets(m) - 1, j, runs);
  fm_colmask_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const int64_t sqs[8] = {0, 1, 2, 7, 64, 100, 1000, 65536};
  int causal = data[0] & 1;
  int64_t sq = sqs[(data[0] >> 1) & 7];
  const char *path = fuzz_file(data + 1, size - 1);
  fm_colmask *m = NULL;
  fm_err err;
  if (fm_colmask_load_npy(path, causal, sq, &m, &err) == FM_OK) use(m);
  m = NULL;
  fm_intervals_opts o = {.causal = causal, .sq = sq, .strict = 0, .causal_from_k = (data[0] >> 4) & 1};
  fm_intervals_note note;
  if (fm_intervals_load(path, &o, &m, &note, &err) == FM_OK) use(m);
  return 0;
}
