/* fuzz_scenario — scenario YAML (fm_scenario.c over libyaml) and its
 * expansion into cases. */
#include "fuzz_util.h"
#include "fm_scenario.h"

FUZZ_DEFAULT_INIT

static int64_t list_n(const fm_int_list *own, const fm_int_list *dflt) {
  return own->n ? own->n : dflt->n;
}

/* Cases the scenario asks for (the expansion's loops, multiplied; saturating). */
static int64_t case_count(const fm_scenario *s) {
  int64_t total = 0;
  for (int i = 0; i < s->nmasks; i++) {
    const fm_scn_mask *m = &s->masks[i];
    int64_t c = m->file[0] ? 1 : list_n(&m->seqlen, &s->seqlen);
    c *= s->head_dim.n * list_n(&m->br, &s->br) * list_n(&m->bc, &s->bc);
    c *= list_n(&m->samples, &s->samples) ? list_n(&m->samples, &s->samples) : 1;
    int64_t draws = m->draws ? m->draws : s->draws;
    if (draws > 0 && c > INT64_MAX / 2 / draws) return INT64_MAX;
    total += c * (draws > 0 ? draws : 0);
    if (total > ((int64_t)1 << 40)) return INT64_MAX;
  }
  return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fm_scenario s; /* large (paths, 64 masks): not on the stack */
  const char *path = fuzz_file(data, size);
  fm_err err;
  if (fm_scenario_load(path, &s, &err) != FM_OK) return 0;
  fm_scn_report_name(s.report);
  /* a huge case list is the scenario runner's to refuse (issue 11, R2's cap);
     here only lists a run could hold are expanded */
  if (case_count(&s) > 100000) return 0;
  fm_scn_case *cases = NULL;
  int n = 0;
  if (fm_scenario_cases(&s, &cases, &n, &err) == FM_OK) free(cases);
  return 0;
}
