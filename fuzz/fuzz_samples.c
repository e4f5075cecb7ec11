/* fuzz_samples — the paper's document-sample format (fm_samples.c):
 * "Total length: N" lines and "Sample K, num_docs N: [(p, l), ...]# [f, ...]". */
#include "fuzz_util.h"
#include "fm_samples.h"

FUZZ_DEFAULT_INIT

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  fm_sample_set set;
  fm_err err;
  if (fm_samples_parse(text, "fuzz", &set, &err) == FM_OK) {
    for (int i = 0; i < set.count; i++) {
      const fm_sample *s = fm_samples_find(&set, set.items[i].total, set.items[i].index);
      if (!s || fm_samples_count(&set, s->total) < 1) abort(); /* what was parsed is found */
    }
    fm_samples_free(&set);
  }
  free(text);
  return 0;
}
