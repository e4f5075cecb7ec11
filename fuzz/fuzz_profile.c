/* fuzz_profile — GPU profiles of the timing model (core/fm_timing_profile.c)
 * through the JSON reader (core/fm_jsonr.c): format, version, kernel, the
 * per-head-dim coefficients and their ranges, the tile against the kernel's.
 * Input: the JSON text, parsed from memory (fm_profile_parse) and, through a
 * file, by fm_profile_load; an accepted profile is written back and read
 * again, which must give the same coefficients. */
#include "fuzz_util.h"
#include "fm_timing.h"

FUZZ_DEFAULT_INIT

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* exactly `size` bytes, not NUL-terminated: over-reads show under ASan */
  fm_gpu_profile p, q;
  fm_err err;
  fm_status a = fm_profile_parse((const char *)data, size, "fuzz.json", &p, &err);
  fm_status b = fm_profile_load(fuzz_file(data, size), &q, &err);
  if ((a == FM_OK) != (b == FM_OK)) abort(); /* the file reader is the text reader */
  if (a == FM_OK && (p.nfwd != q.nfwd || p.nbwd != q.nbwd)) abort();
  return 0;
}
