/* fuzz_dense — the dense-mask checker (fm_dense.h): fm_dense_check_file reads
 * a bool/int/float .npy row by row and finds the smallest interval form;
 * fm_dense_result_to_colmask then converts into each form. Byte 0: bit 0 is
 * --masked-true. */
#include "fuzz_util.h"
#include "fm_dense.h"
#include "fm_forms.h"

FUZZ_DEFAULT_INIT

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  fm_dense_opts o = {.masked_true = data[0] & 1, .keep_intervals = 1};
  const char *path = fuzz_file(data + 1, size - 1);
  fm_dense_result *res = NULL;
  fm_err err;
  if (fm_dense_check_file(path, &o, &res, &err) != FM_OK) return 0;
  static const fm_form forms[] = {FM_FORM_NONE, FM_FORM_CAUSAL1, FM_FORM_CAUSAL2,
                                  FM_FORM_BIDIR2, FM_FORM_BIDIR4};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    fm_colmask *m = NULL;
    if (fm_dense_result_to_colmask(res, forms[i], &m, &err) == FM_OK) fm_colmask_destroy(m);
  }
  fm_dense_result_destroy(res);
  return 0;
}
