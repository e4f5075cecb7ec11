/* fuzz_params — family parameter strings (fm_families.c): `--param k=v`
 * values such as docs=3145,2203 (with prefix: and question+answer parts),
 * spans=start:len,..., w=, and the document-list parser fm_docs_parse.
 * Byte 0 picks the family, bytes 1-2 the sequence length (1..4096), byte 3
 * batch and heads (1..4 each); the rest are parameter lines, "\n"-separated. */
#include "fuzz_util.h"
#include "fm_colmask.h"
#include "fm_families.h"
#include "fm_samples.h"

static fm_sample_set samples;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_env();
  if (fm_samples_builtin(&samples, NULL) != FM_OK) abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4) return 0;
  const fm_family_info *fam = fm_family_at(data[0] % fm_family_count());
  int64_t seqlen = 1 + ((data[1] | data[2] << 8) % 4096);
  int64_t batch = 1 + (data[3] & 3), heads = 1 + ((data[3] >> 2) & 3);
  char *text = fuzz_text(data + 4, size - 4);
  const char *params[16];
  int n = 0;
  for (char *p = text; p && *p && n < 16;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    params[n++] = p;
    fm_docs docs;
    if (fm_docs_parse(p, &docs, NULL) == FM_OK) fm_docs_free(&docs);
    p = nl ? nl + 1 : NULL;
  }
  fm_family_request req = {fam->name, seqlen, batch, heads, data[3] >> 4, (data[3] >> 4) & 1 ? 0 : -1,
                           &samples, n, params};
  fm_colmask *m = NULL;
  fm_family_used used;
  fm_err err;
  if (fm_family_build(&req, &m, &used, &err) == FM_OK) fm_colmask_destroy(m);
  free(text);
  return 0;
}
