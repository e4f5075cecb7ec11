/* fm_cp_json.c — a context-parallel plan as JSON (fm_cp_plan_json,
 * fm_cp_plan.h), from the plan's public views only. */
#include "fm_cp_plan.h"
#include "fm_json.h"

static const char *const pass_key[FM_CP_NPASSES] = {"fwd", "bwd"};

static void counts_json(fm_json *j, const char *key, const fm_tile_counts *c, int32_t br, int32_t bc) {
  if (br <= 0) {
    fm_json_null(j, key);
    return;
  }
  fm_json_object(j, key);
  fm_json_int(j, "br", br);
  fm_json_int(j, "bc", bc);
  fm_json_int(j, "total", c->total);
  for (int k = 0; k < FM_TILE_NCLASSES; k++) fm_json_int(j, fm_tile_class_name(k), c->minmax[k]);
  fm_json_object(j, "exact");
  for (int k = 0; k < FM_TILE_NCLASSES; k++) fm_json_int(j, fm_tile_class_name(k), c->exact[k]);
  fm_json_end(j);
  fm_json_end(j);
}

static void cost_json(fm_json *j, const char *key, const fm_cp_cost *c, int fits) {
  fm_json_object(j, key);
  fm_json_double(j, "fwd_ms", c->ms[FM_CP_FWD]);
  fm_json_double(j, "bwd_ms", c->ms[FM_CP_BWD]);
  fm_json_double(j, "step_ms", c->step_ms);
  fm_json_double(j, "compute_fwd_ms", c->compute_ms[FM_CP_FWD]);
  fm_json_double(j, "compute_bwd_ms", c->compute_ms[FM_CP_BWD]);
  fm_json_int(j, "memory_bytes", c->mem_bytes);
  if (fits >= 0) fm_json_bool(j, "fits", fits);
  fm_json_end(j);
}

/* A rank's ring steps are written up to this many ranks (P^2 objects). */
#define FM_CP_JSON_MAX_STEP_RANKS 64

static void step_json(fm_json *j, const fm_cp_ring_step *st) {
  fm_json_object(j, NULL);
  fm_json_int(j, "source", st->source);
  fm_json_int(j, "s", st->s);
  fm_json_int(j, "kv_bytes", st->kv_bytes);
  fm_json_double(j, "fwd_ms", st->ms[FM_CP_FWD]);
  fm_json_double(j, "bwd_ms", st->ms[FM_CP_BWD]);
  fm_json_double(j, "ring_fwd_ms", st->ring_ms[FM_CP_FWD]);
  fm_json_double(j, "ring_bwd_ms", st->ring_ms[FM_CP_BWD]);
  fm_json_int(j, "fwd_items", st->items[FM_CP_FWD]);
  fm_json_int(j, "bwd_items", st->items[FM_CP_BWD]);
  fm_json_end(j);
}

static void rank_json(fm_json *j, const fm_cp_summary *s, const fm_cp_rank *rk, int32_t r) {
  fm_json_object(j, NULL);
  fm_json_int(j, "rank", r);
  fm_json_int(j, "rows", rk->rows);
  fm_json_int(j, "segments", rk->segments);
  fm_json_int(j, "work", rk->work);
  fm_json_object(j, "tiles");
  for (int k = 0; k < FM_CP_NPASSES; k++) counts_json(j, pass_key[k], &rk->tiles[k], s->br[k], s->bc[k]);
  fm_json_end(j);
  fm_json_double(j, "fwd_ms", rk->ms[FM_CP_FWD]);
  fm_json_double(j, "bwd_ms", rk->ms[FM_CP_BWD]);
  fm_json_double(j, "compute_ms", rk->compute_ms);
  fm_json_int(j, "kv_recv_rows", rk->kv_recv_rows);
  fm_json_int(j, "kv_recv_bytes", rk->kv_recv_bytes);
  fm_json_int(j, "kv_sources", rk->kv_sources);
  fm_json_object(j, "kv_messages");
  for (int x = 0; x < FM_CP_NEXCHANGES; x++) fm_json_int(j, fm_cp_exchange_name(x), rk->kv_messages[x]);
  fm_json_end(j);
  fm_json_object(j, "exchanges");
  for (int x = 0; x < FM_CP_NEXCHANGES; x++) cost_json(j, fm_cp_exchange_name(x), &rk->cost[x], -1);
  fm_json_end(j);
  if (s->ranks <= FM_CP_JSON_MAX_STEP_RANKS) {
    fm_json_array(j, "steps");
    for (int32_t i = 0; i < rk->nsteps; i++) step_json(j, &rk->steps[i]);
    fm_json_end(j);
  } else {
    fm_json_null(j, "steps");
  }
  fm_json_end(j);
}

static void sharding_json(fm_json *j, const fm_cp_summary *s, const fm_cp_sharding_plan *sp) {
  fm_json_object(j, NULL);
  fm_json_string(j, "name", fm_cp_sharding_name(sp->sharding));
  if (sp->sharding == FM_CP_MASK_AWARE) fm_json_string(j, "solver", sp->exact_solver ? "exact" : "greedy");
  else fm_json_null(j, "solver");
  fm_json_object(j, "imbalance");
  fm_json_double(j, "time", sp->imbalance_time);
  fm_json_double(j, "work", sp->imbalance_work);
  fm_json_end(j);
  fm_json_double(j, "step_compute_ms", sp->step_compute_ms);
  fm_json_double(j, "efficiency", sp->efficiency);
  fm_json_int(j, "kv_recv_bytes", sp->kv_recv_bytes);
  fm_json_int(j, "kv_recv_bytes_max", sp->kv_recv_bytes_max);
  fm_json_string(j, "exchange", fm_cp_exchange_name(sp->exchange));
  fm_json_double(j, "step_ms", sp->step_ms);
  fm_json_double(j, "efficiency_exchange", sp->efficiency_exchange);
  fm_json_object(j, "exchanges");
  for (int x = 0; x < FM_CP_NEXCHANGES; x++) cost_json(j, fm_cp_exchange_name(x), &sp->cost[x], sp->fits[x]);
  fm_json_end(j);
  fm_json_array(j, "segments"); /* [row0, row1, rank] */
  for (int32_t k = 0; k < sp->nsegments; k++) {
    fm_json_array(j, NULL);
    fm_json_int(j, NULL, sp->segments[k].row0);
    fm_json_int(j, NULL, sp->segments[k].row1);
    fm_json_int(j, NULL, sp->segments[k].rank);
    fm_json_end(j);
  }
  fm_json_end(j);
  fm_json_array(j, "ranks");
  for (int32_t r = 0; r < s->ranks; r++) rank_json(j, s, &sp->ranks[r], r);
  fm_json_end(j);
  fm_json_end(j);
}

void fm_cp_plan_json(const fm_cp_plan *p, struct fm_json *j) {
  const fm_cp_summary *s = fm_cp_plan_summary(p);
  fm_json_string(j, "format", "fmsim-cp-plan");
  fm_json_int(j, "version", 1);
  fm_json_int(j, "seqlen", s->seqlen);
  fm_json_int(j, "ranks", s->ranks);
  fm_json_int(j, "batch", s->batch);
  fm_json_int(j, "heads", s->heads);
  fm_json_int(j, "head_dim", s->head_dim);
  fm_json_string(j, "kernel", fm_kernel_get(s->kernel)->name);
  fm_json_int(j, "granule", s->granule);
  fm_json_int(j, "chunk", s->chunk);
  fm_json_int(j, "chunks", s->chunks);
  fm_json_int(j, "kv_row_bytes", s->kv_row_bytes);
  fm_json_object(j, "link");
  fm_json_double(j, "gbs", s->link_gbs);
  fm_json_double(j, "gpu_gbs", s->gpu_gbs);
  fm_json_double(j, "latency_us", s->link_us);
  fm_json_double(j, "comm_sm_frac", s->comm_sm_frac);
  fm_json_end(j);
  fm_json_int(j, "memory_budget_bytes", s->mem_budget);
  fm_json_object(j, "tiles");
  for (int k = 0; k < FM_CP_NPASSES; k++) counts_json(j, pass_key[k], &s->tiles[k], s->br[k], s->bc[k]);
  fm_json_end(j);
  fm_json_string(j, "clock", fm_cp_clock_name(s->clock, s->allgather_clock));
  fm_json_object(j, "clocks");
  fm_json_string(j, "compute", fm_clock_name(s->clock));
  fm_json_string(j, "allgather", fm_clock_name(s->allgather_clock));
  fm_json_end(j);
  fm_json_object(j, "window_us");
  fm_json_double(j, "fwd", FM_CP_WINDOW_US_FWD);
  fm_json_double(j, "bwd", FM_CP_WINDOW_US_BWD);
  fm_json_end(j);
  fm_json_object(j, "one_gpu");
  fm_json_double(j, "fwd_ms", s->one_gpu_ms[FM_CP_FWD]);
  fm_json_double(j, "bwd_ms", s->one_gpu_ms[FM_CP_BWD]);
  fm_json_double(j, "total_ms", s->one_gpu_total_ms);
  fm_json_end(j);
  fm_json_array(j, "shardings");
  for (int k = 0; k < FM_CP_NSHARDINGS; k++) {
    const fm_cp_sharding_plan *sp = fm_cp_plan_sharding(p, (fm_cp_sharding)k);
    if (sp) sharding_json(j, s, sp);
  }
  fm_json_end(j);
  fm_json_array(j, "skipped"); /* asked for as all, unable to cut these rows: [{name, reason}] */
  for (int k = 0; k < FM_CP_NSHARDINGS; k++) {
    const char *why = fm_cp_plan_skipped(p, (fm_cp_sharding)k);
    if (!why) continue;
    fm_json_object(j, NULL);
    fm_json_string(j, "name", fm_cp_sharding_name((fm_cp_sharding)k));
    fm_json_string(j, "reason", why);
    fm_json_end(j);
  }
  fm_json_end(j);
  const fm_cp_sharding_plan *best = fm_cp_plan_sharding(p, fm_cp_plan_best(p));
  fm_json_object(j, "best"); /* fm_cp_plan_best: what `cp-run --sharding plan` runs */
  fm_json_string(j, "sharding", fm_cp_sharding_name(best->sharding));
  fm_json_string(j, "exchange", fm_cp_exchange_name(best->exchange));
  fm_json_double(j, "step_ms", best->step_ms);
  fm_json_end(j);
}
