/* runner_ctx.c — the helpers every file of the scenario runner shares
 * (runner_ctx.h): the clock, the prefixes of messages, a case's length and
 * vector sets, the GPU step's settings as a row records them. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>

#include "runner_ctx.h"

#include "fm_families.h"
#include "fm_kernels.h"
#include "fm_npy.h"

double runner_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *runner_where(runner_ctx *rc, int line, const char *key) {
  if (rc->o->single || !rc->s->path[0]) return "";
  snprintf(rc->where, sizeof rc->where, "%s:%d: key '%s': ", rc->s->path, line, key);
  return rc->where;
}

const char *runner_case_label(runner_ctx *rc, const fm_scn_case *c) {
  if (rc->o->single) return "";
  snprintf(rc->label, sizeof rc->label, "case %.256s: ", c->id);
  return rc->label;
}

/* A file mask's header: its length and sets (0 when unreadable; the
 * pre-flight build reports that with its line). */
static void file_shape(const fm_scn_mask *m, int64_t *S, int64_t *sets) {
  fm_npy_header h;
  *S = *sets = 0;
  if (fm_npy_read_header_path(m->file, &h, NULL) != FM_OK || h.ndim < 2) return;
  int interval_file = m->is_intervals && h.ndim == 4;
  *S = interval_file ? h.shape[2] : h.shape[h.ndim - 1];
  int64_t sq = interval_file ? *S : h.shape[h.ndim - 2];
  *sets = interval_file ? h.shape[0] * h.shape[1] : h.count / (sq * *S > 0 ? sq * *S : 1);
}

int64_t runner_case_length(runner_ctx *rc, const fm_scn_case *c) {
  const fm_scn_mask *m = &rc->s->masks[c->mask_index];
  int64_t S = c->seqlen, sets;
  if (m->file[0]) file_shape(m, &S, &sets);
  return S;
}

int64_t runner_case_sets(runner_ctx *rc, const fm_scn_case *c) {
  const fm_scn_mask *m = &rc->s->masks[c->mask_index];
  if (m->file[0]) {
    int64_t S, sets;
    file_shape(m, &S, &sets);
    return sets > 0 ? sets : 1;
  }
  const fm_family_info *fam = fm_family_find(m->family);
  return fam && fam->per_head ? c->batch * c->heads : 1;
}

void runner_gpu_settings(const fm_scenario *s, char *buf, size_t cap) {
  snprintf(buf, cap, "pass %s, variant %s, warmup %lld, reps %lld, noskip %lld, instrumented %lld, "
           "counted %d, cupti %d, settle %lld ms, sustained %lld ms%s%s", fm_pass_name(s->pass),
           fm_variant_name(s->variant), (long long)s->warmup, (long long)s->reps, (long long)s->noskip_reps,
           (long long)s->instrument_reps, s->count_bytes, s->cupti, (long long)s->settle_ms,
           (long long)s->sustained_ms, s->mask_method ? ", mask method " : "",
           s->mask_method ? fm_mask_method_name(s->mask_method) : ""); /* auto: as before the key */
}
