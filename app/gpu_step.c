/* gpu_step.c — the GPU step of the scenario runner (gpu_step.h). */
#define _POSIX_C_SOURCE 200809L
#include "gpu_step.h"


#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fm_tiles.h"
#include "fm_timing.h"
#include "timing_cli.h"
#ifdef FM_HAVE_GPU_RUN
#include "fm_attn.h"
#include "fm_measure.h"
#endif

/* Requested kernels resolved for "no device" (auto: the reference GPU's),
 * distinct; the device's resolution replaces this when there is one. */
static void resolve_without_device(gpu_step *g, const fm_scenario *s) {
  g->nkernels = 0;
  for (int i = 0; i < s->nkernels; i++) {
    fm_kernel_id id = s->kernels[i];
    if (id == FM_KERNEL_AUTO && fm_kernel_auto(-1, -1, &id, NULL) != FM_OK) continue;
    int seen = 0;
    for (int k = 0; k < g->nkernels; k++) seen |= g->kernel[k] == id;
    if (!seen) g->kernel[g->nkernels++] = id;
  }
}

#ifdef FM_HAVE_GPU_RUN
/* The requested kernels as this device resolves them; what cannot run here
 * keeps its registry id and says why in kernel_status. */
static void resolve_on_device(gpu_step *g, const fm_scenario *s) {
  g->nkernels = 0;
  for (int i = 0; i < s->nkernels; i++) {
    fm_kernel_id id = s->kernels[i];
    fm_err err;
    char status[160] = "";
    if (fm_gpu_session_kernel(g->session, s->kernels[i], &id, &err) != FM_OK) {
      snprintf(status, sizeof status, "%.150s", err.msg);
      /* no kernel runs here: the model still uses the reference GPU's */
      if (id == FM_KERNEL_AUTO && fm_kernel_auto(-1, -1, &id, NULL) != FM_OK) continue;
    }
    int seen = 0;
    for (int k = 0; k < g->nkernels; k++) seen |= g->kernel[k] == id;
    if (seen) continue;
    snprintf(g->kernel_status[g->nkernels], sizeof g->kernel_status[0], "%s", status);
    g->kernel[g->nkernels++] = id;
  }
}

/* The session, sized for the largest case. */
static void open_session(gpu_step *g, runner_ctx *rc, const fm_scn_case *cases, int ncases) {
  const fm_scenario *s = rc->s;
  fm_err err;
  if (fm_attn_device_info(g->device_desc, sizeof g->device_desc, &err) != FM_OK) {
    snprintf(g->skip_reason, sizeof g->skip_reason, "no GPU (%.300s)", err.msg);
    g->device_desc[0] = 0;
    return;
  }
  int64_t tokens = 0, hidden = 0, dense = 0;
  for (int i = 0; i < ncases; i++) {
    int64_t S = runner_case_length(rc, &cases[i]);
    if (cases[i].batch * S > tokens) tokens = cases[i].batch * S;
    if (cases[i].heads * cases[i].head_dim > hidden) hidden = cases[i].heads * cases[i].head_dim;
    int64_t d = runner_case_sets(rc, &cases[i]) * S * S;
    if (s->variant == FM_VARIANT_DENSE && d > dense) dense = d;
  }
  fm_gpu_session *sess = NULL;
  if (fm_gpu_session_create(tokens, hidden, dense, s->seed, &sess, &err) != FM_OK) {
    snprintf(g->skip_reason, sizeof g->skip_reason, "GPU session failed: %.300s", err.msg);
    return;
  }
  g->session = sess;
  const fm_gpu_props *p = fm_gpu_session_props(sess);
  snprintf(g->device, sizeof g->device, "%s", p->name);
  g->clock_khz = p->clock_khz;
  resolve_on_device(g, s);
}
#endif

void gpu_step_open(gpu_step *g, runner_ctx *rc, const fm_scn_case *cases, int ncases) {
  const fm_scenario *s = rc->s;
  memset(g, 0, sizeof *g);
  snprintf(g->device, sizeof g->device, "cpu-simulation");
  resolve_without_device(g, s);
  g->wanted = rc->o->single || (s->run & FM_SCN_GPU);
  if (!g->wanted) return;
  if (rc->o->no_gpu_why) {
    snprintf(g->skip_reason, sizeof g->skip_reason, "%s", rc->o->no_gpu_why);
    return;
  }
#ifdef FM_HAVE_GPU_RUN
  open_session(g, rc, cases, ncases);
#else
  (void)cases;
  (void)ncases;
  snprintf(g->skip_reason, sizeof g->skip_reason, "built without the CUDA kernels");
#endif
}

int gpu_step_usable(char *text, int cap) {
#ifdef FM_HAVE_GPU_RUN
  fm_err err;
  char desc[256];
  if (fm_attn_device_info(desc, sizeof desc, &err) == FM_OK) {
    snprintf(text, (size_t)cap, "%s", desc);
    return 1;
  }
  snprintf(text, (size_t)cap, "no usable GPU (%.200s)", err.msg);
#else
  snprintf(text, (size_t)cap, "built without the CUDA kernels: the benchmark needs a GPU build");
#endif
  return 0;
}

void gpu_step_close(gpu_step *g) {
#ifdef FM_HAVE_GPU_RUN
  fm_gpu_session_destroy(g->session);
#endif
  g->session = NULL;
  for (int k = 0; k < FM_SCN_MAX_KERNELS; k++) {
    free(g->profile[k]);
    g->profile[k] = NULL;
    g->profile_sig[k][0] = 0;
  }
}

/* ---- predictions ---------------------------------------------------------------------------- */

/* How messages name the scenario's profile: its key and line, or --gpu. */
static const char *profile_what(runner_ctx *rc, char *buf, size_t cap) {
  const fm_scenario *s = rc->s;
  if (s->profile_line > 0 && s->path[0])
    snprintf(buf, cap, "%.2000s:%d: key 'profile': %.1000s", s->path, s->profile_line, s->profile);
  else
    snprintf(buf, cap, "--gpu %.3000s", s->profile);
  return buf;
}

int gpu_step_profile_load(runner_ctx *rc) {
  char what[4200];
  rc->profile = NULL;
  if (!rc->s->profile[0]) return 0;
  rc->profile = malloc(sizeof *rc->profile);
  if (!rc->profile) {
    cli_error(rc->o->cmd, "out of memory");
    return -1;
  }
  if (timing_profile_open(rc->o->cmd, profile_what(rc, what, sizeof what), rc->s->profile, rc->profile)) {
    free(rc->profile);
    rc->profile = NULL;
    return -1;
  }
  return 0;
}

/* FNV-1a over the bytes of v, continuing h. */
static uint64_t fnv_mix(uint64_t h, double v) {
  const unsigned char *b = (const unsigned char *)&v;
  for (size_t i = 0; i < sizeof v; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* A hash of the numbers of a profile: two profiles that predict alike hash alike. */
static uint64_t profile_hash(const fm_gpu_profile *p) {
  double head[] = {p->kernel, p->sms, p->hbm_gbs, p->nfwd, p->nbwd};
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) h = fnv_mix(h, head[i]);
  for (int i = 0; i < p->nfwd + p->nbwd; i++) {
    const fm_timing_coef *c = i < p->nfwd ? &p->fwd[i] : &p->bwd[i - p->nfwd];
    double v[] = {c->head_dim, c->br, c->bc, c->ctas_per_sm, c->launch_us, c->item_us,
                  c->key_tile_us, c->unmasked_us, c->partial_us, c->partial_causal_us, c->solo,
                  c->boost_us, c->throttle};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) h = fnv_mix(h, v[k]);
  }
  return h;
}

/* Kernel k's profile: a copy of p. */
static int bind_profile(gpu_step *g, int k, const fm_gpu_profile *p, const char *cmd) {
  g->profile[k] = malloc(sizeof *g->profile[k]);
  if (!g->profile[k]) {
    cli_error(cmd, "out of memory");
    return -1;
  }
  *g->profile[k] = *p;
  snprintf(g->profile_sig[k], sizeof g->profile_sig[k], "%.120s #%08llx", p->name,
           (unsigned long long)(profile_hash(p) & 0xffffffffu));
  return 0;
}

/* The GPU's own profile of kernel k where the kernels are timed on it. */
static int device_profile(gpu_step *g, runner_ctx *rc, int k) {
  char name[128], path[4300], what[300];
  if (!g->session || !timing_default_profile(g->device, g->kernel[k], name, sizeof name, path, sizeof path))
    return 0;
  fm_gpu_profile p;
  snprintf(what, sizeof what, "the profile of %.100s for kernel %s", g->device,
           fm_kernel_get(g->kernel[k])->name);
  if (timing_profile_open(rc->o->cmd, what, path, &p)) return -1;
  snprintf(p.name, sizeof p.name, "%s", name);
  fprintf(stderr, "fmsim %s: note: predicting kernel %s with %s (the profile of %s)\n", rc->o->cmd,
          fm_kernel_get(g->kernel[k])->name, name, g->device);
  return bind_profile(g, k, &p, rc->o->cmd);
}

int gpu_step_profiles(gpu_step *g, runner_ctx *rc) {
  const fm_gpu_profile *p = rc->profile;
  char what[4200], names[80] = "";
  int bound = 0;
  for (int k = 0; k < g->nkernels; k++) {
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
             fm_kernel_get(g->kernel[k])->name);
    if (p && p->kernel == g->kernel[k]) {
      if (bind_profile(g, k, p, rc->o->cmd)) return -1;
      bound = 1;
    } else if (g->wanted && device_profile(g, rc, k)) {
      return -1;
    }
  }
  if (!p || (bound && g->wanted)) return 0;
  const char *pk = fm_kernel_get(p->kernel)->name, *opt = rc->s->profile_line ? "kernel:" : "--kernel";
  if (!g->wanted)
    cli_error(rc->o->cmd, "%s: predictions go in the GPU step's kernel records: add gpu to run:",
              profile_what(rc, what, sizeof what));
  else
    cli_error(rc->o->cmd, "%s: the profile is for kernel %s, and this run's kernels are %s (%s %s, "
              "or a profile of %s)", profile_what(rc, what, sizeof what), pk, names, opt, pk,
              names);
  return -1;
}

void gpu_step_predict(const gpu_step *g, runner_ctx *rc, const fm_scn_case *c, const fm_colmask *m,
                      int k, run_kernel_rec *rec) {
  const fm_gpu_profile *p = g->profile[k];
  snprintf(rec->profile, sizeof rec->profile, "%s", g->profile_sig[k]);
  for (int q = 0; q < RUN_NPASSES; q++) {
    run_pass_rec *x = &rec->p[q];
    x->pred_ms = NAN;
    x->pred_note[0] = 0;
    if (!p || x->br <= 0) continue;
    fm_timing_problem pb = {.batch = c->batch, .heads = c->heads, .head_dim = (int32_t)c->head_dim,
                            .pass = run_pass_of(q), .variant = rc->s->variant};
    fm_timing_result r;
    fm_err err;
    if (timing_predict(p, m, &pb, &r, &err) == FM_OK) x->pred_ms = r.time_us / 1e3;
    else snprintf(x->pred_note, sizeof x->pred_note, "%.150s", err.msg);
  }
}

void gpu_step_shutdown(void) {
#ifdef FM_HAVE_GPU_RUN
  fm_cupti_shutdown();
#endif
}

void gpu_kernel_run_free(gpu_kernel_run *r) {
  for (int q = 0; q < RUN_NPASSES; q++) {
    free(r->p[q].classes);
    free(r->p[q].tile_class);
    free(r->p[q].tile_cycles);
  }
  free(r->timeline.events);
  memset(r, 0, sizeof *r);
}

int gpu_pass_tile(fm_kernel_id id, fm_pass pass, int32_t D, int32_t *br, int32_t *bc, char *why,
                  size_t cap) {
  fm_err err;
  why[0] = 0;
  if (fm_kernel_tile_size(id, pass, D, br, bc, &err) == FM_OK) return 0;
  snprintf(why, cap, "%.150s", err.msg);
  return -1;
}

/* What the CPU knows of pass q of kernel k on the case: its tile, the
 * classes there, the cost model. A kernel without a tile for this head dim
 * or pass says so in the pass's status. */
static int pass_model(gpu_step *g, runner_ctx *rc, const fm_scn_case *c, const fm_colmask *m,
                      const fm_analysis *ca, const uint8_t *classes, int k, int q,
                      gpu_kernel_run *r) {
  const fm_scenario *s = rc->s;
  run_pass_rec *rec = &r->rec.p[q];
  gpu_pass_run *pr = &r->p[q];
  fm_err err;
  int32_t br = 0, bc = 0;
  if (gpu_pass_tile(g->kernel[k], run_pass_of(q), (int32_t)c->head_dim, &br, &bc, rec->status,
                    sizeof rec->status))
    return 0;
  rec->br = br;
  rec->bc = bc;
  fm_analysis_init(&pr->a, m, ca->family, ca->params, ca->docs_source, ca->batch, ca->heads, br, bc);
  size_t n = (size_t)fm_colmask_nsets(m) * (size_t)pr->a.tr * (size_t)pr->a.tc;
  pr->classes = malloc(n ? n : 1);
  if (!pr->classes) {
    cli_error(rc->o->cmd, "%scannot allocate %zu bytes of tile classes", runner_case_label(rc, c), n);
    return -1;
  }
  fm_status st = FM_OK;
  if (br == ca->br && bc == ca->bc) {
    memcpy(pr->classes, classes, n);
    pr->a.counts = ca->counts;
  } else {
    st = fm_classify(m, br, bc, &pr->a.counts, pr->classes, NULL, &err);
  }
  fm_cost_shape sh = {.batch = c->batch, .heads = c->heads, .head_dim = (int32_t)c->head_dim,
                      .br = br, .bc = bc, .elem_bytes = 2, .variant = s->variant,
                      .pass = run_pass_of(q)};
  if (st == FM_OK) st = fm_cost_compute(m, &sh, pr->classes, NULL, &pr->cost, &err);
  if (st != FM_OK) {
    cli_error(rc->o->cmd, "%s%s", runner_case_label(rc, c), err.msg);
    return -1;
  }
  rec->rho = pr->a.counts.sparsity;
  rec->flops = pr->cost.flops_paper;
  rec->model_read = pr->cost.bytes_read;
  rec->model_write = pr->cost.bytes_write;
  rec->unique_read = pr->cost.unique_read;
  rec->unique_write = pr->cost.unique_write;
  return 0;
}

/* The passes of the case that kernel k's GPU run can time: FM_PASS_* bits. */
static fm_pass timed_passes(const gpu_kernel_run *r, unsigned asked) {
  unsigned p = 0;
  for (int q = 0; q < RUN_NPASSES; q++)
    if ((asked & run_pass_of(q)) && r->p[q].classes && !r->rec.p[q].status[0]) p |= run_pass_of(q);
  return (fm_pass)p;
}

#ifdef FM_HAVE_GPU_RUN
/* The no-skip variant of the same arithmetic, every tile visited, with the
 * library's mask method: slices or r2p, whichever is not the default, is
 * built for the skip variant only, and words runs r2p there
 * (fm_mask_method, core/fm_kernels.h). */
static int time_noskip(gpu_step *g, runner_ctx *rc, const fm_scn_case *c, fm_gpu_case gc,
                       gpu_kernel_run *r) {
  const fm_scenario *s = rc->s;
  gc.variant = FM_VARIANT_NOSKIP;
  gc.mask_method = FM_MASK_METHOD_AUTO;
  fm_gpu_opts go = {.warmup = 1, .reps = (int32_t)s->noskip_reps, .use_cupti = s->cupti};
  fm_gpu_result res;
  fm_err err;
  if (fm_gpu_session_run(g->session, &gc, &go, &res, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%sGPU run failed (%s, noskip): %s", runner_case_label(rc, c),
              r->rec.kernel, err.msg);
    fm_gpu_result_free(&res);
    return -1;
  }
  fm_gpu_pass_result *got[RUN_NPASSES] = {&res.fwd, &res.bwd};
  for (int q = 0; q < RUN_NPASSES; q++)
    if ((gc.pass & run_pass_of(q)) && got[q]->timing.source[0]) {
      r->p[q].noskip = got[q]->timing;
      r->rec.p[q].noskip_ms = got[q]->timing.median_ms;
    }
  fm_gpu_result_free(&res);
  return 0;
}

/* Pass q's measurements out of the session's result (the per-tile record
 * changes hands) into r and its record. */
static void take_pass(const fm_scenario *s, const fm_scn_case *c, const fm_colmask *m,
                      fm_gpu_pass_result *got, int q, gpu_kernel_run *r) {
  gpu_pass_run *pr = &r->p[q];
  run_pass_rec *rec = &r->rec.p[q];
  pr->ran = 1;
  pr->timing = got->timing;
  pr->timing_inst = got->timing_instrumented;
  pr->measured = got->measured;
  if (!(s->count_bytes && s->cupti))
    snprintf(pr->measured.note, sizeof pr->measured.note, "%s",
             !s->cupti ? "--no-cupti: no counters" : "--no-bytes: not counted");
  pr->tile_class = got->tile_class;
  pr->tile_cycles = got->tile_cycles;
  got->tile_class = NULL;
  got->tile_cycles = NULL;
  snprintf(rec->source, sizeof rec->source, "%s", pr->timing.source);
  rec->ms = pr->timing.median_ms;
  rec->tflops = fm_cost_tflops(pr->cost.flops_paper, rec->ms);
  if (pr->timing_inst.source[0]) rec->inst_ms = pr->timing_inst.median_ms;
  rec->inst_overhead = got->instr_overhead;
  if (pr->measured.source[0]) {
    rec->dram_read = pr->measured.dram_read;
    rec->dram_write = pr->measured.dram_write;
    rec->l2_read = 32.0 * pr->measured.l2_read_sectors;
  }
  if (pr->tile_class && s->variant == FM_VARIANT_SKIP)
    rec->class_mismatches = fm_class_mismatches(m, pr->classes, pr->tile_class, c->batch, c->heads,
                                                (int64_t)pr->a.tr * pr->a.tc);
}

/* Kernel k timed on the case: the scenario's variant on the passes it can
 * run, counted and instrumented as the scenario says, then the no-skip
 * variant. */
static int time_kernel(gpu_step *g, runner_ctx *rc, const fm_scn_case *c, const fm_colmask *m,
                       int k, gpu_kernel_run *r) {
  const fm_scenario *s = rc->s;
  int inst = s->instrument_reps > 0;
  fm_gpu_case gc = {.mask = m, .batch = (int32_t)c->batch, .heads = (int32_t)c->heads,
                    .head_dim = (int32_t)c->head_dim, .variant = s->variant, .kernel = g->kernel[k],
                    .pass = timed_passes(r, s->pass), .mask_method = (int32_t)s->mask_method};
  if (!gc.pass) return 0;
  fm_gpu_opts go = {.warmup = (int32_t)s->warmup, .reps = (int32_t)s->reps, .instrument = inst,
                    .instrument_reps = (int32_t)s->instrument_reps,
                    .count_bytes = s->count_bytes && s->cupti, .use_cupti = s->cupti,
                    .want_tiles = inst, .want_timeline = rc->o->single,
                    .settle_ms = (int32_t)s->settle_ms, .sustain_ms = (int32_t)s->sustained_ms};
  fm_gpu_result res;
  fm_err err;
  if (fm_gpu_session_run(g->session, &gc, &go, &res, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%sGPU run failed (%s): %s", runner_case_label(rc, c), r->rec.kernel,
              err.msg);
    fm_gpu_result_free(&res);
    return -1;
  }
  r->ran = 1;
  fm_gpu_pass_result *got[RUN_NPASSES] = {&res.fwd, &res.bwd};
  for (int q = 0; q < RUN_NPASSES; q++) {
    if (!(gc.pass & run_pass_of(q))) continue;
    if (got[q]->timing.source[0]) take_pass(s, c, m, got[q], q, r);
    else /* a harness that does not time this pass yet */
      snprintf(r->rec.p[q].status, sizeof r->rec.p[q].status, "not run: the measurement gave no "
               "%s timing", q == RUN_BWD ? "backward" : "forward");
  }
  r->timeline = res.timeline;
  res.timeline = (fm_timeline){0};
  fm_gpu_result_free(&res);
  const gpu_pass_run *f = &r->p[RUN_FWD];
  if (f->tile_class && f->tile_cycles && rc->o->single) {
    if (fm_timeline_add_tiles(&r->timeline, f->tile_class, f->tile_cycles, f->a.tr, f->a.tc,
                              g->clock_khz, 1, 50000, &err) != FM_OK) {
      cli_error(rc->o->cmd, "%s", err.msg);
      return -1;
    }
    r->timeline.process_names[1] =
        "instrumented forward tiles of (b=0, h=0): one row per row tile, visited tiles end to "
        "end in key-tile order (cycles at the SM clock)";
  }
  r->timeline.process_names[0] = "GPU kernels of the timed launches (L2 flush between)";
  if (s->noskip_reps > 0 && s->variant == FM_VARIANT_SKIP) return time_noskip(g, rc, c, gc, r);
  return 0;
}
#endif

int gpu_step_case(gpu_step *g, runner_ctx *rc, const fm_scn_case *c, const fm_colmask *m,
                  const fm_analysis *case_a, const uint8_t *classes, gpu_kernel_run *runs) {
  for (int k = 0; k < g->nkernels; k++) {
    gpu_kernel_run *r = &runs[k];
    memset(r, 0, sizeof *r);
    run_kernel_rec *rec = &r->rec;
    snprintf(rec->kernel, sizeof rec->kernel, "%s", fm_kernel_get(g->kernel[k])->name);
    snprintf(rec->status, sizeof rec->status, "%s", g->kernel_status[k]);
    for (int q = 0; q < RUN_NPASSES; q++) {
      run_pass_rec_clear(&rec->p[q]);
      if ((rc->s->pass & run_pass_of(q)) && pass_model(g, rc, c, m, case_a, classes, k, q, r))
        return -1;
    }
    gpu_step_predict(g, rc, c, m, k, rec);
    for (int q = 0; q < RUN_NPASSES && !rec->status[0] && !timed_passes(r, rc->s->pass); q++)
      snprintf(rec->status, sizeof rec->status, "%s", rec->p[q].status); /* nothing to time */
    if (rec->status[0]) continue;
    if (g->skip_reason[0]) { /* the reason is the run's (run.json, the report's summary) */
      snprintf(rec->status, sizeof rec->status, "not run: GPU step skipped");
      continue;
    }
    if (rc->o->deadline > 0 && runner_now() > rc->o->deadline) {
      snprintf(rec->status, sizeof rec->status, "not run: time budget spent");
      continue;
    }
#ifdef FM_HAVE_GPU_RUN
    if (time_kernel(g, rc, c, m, k, r)) return RUNNER_GPU_FAILED;
#endif
  }
  return 0;
}

void gpu_run_info(const gpu_step *g, const gpu_kernel_run *r, int pass, const fm_scenario *s,
                  int head_dim, fm_run_info *info) {
  const gpu_pass_run *p = &r->p[pass];
  memset(info, 0, sizeof *info);
  info->analysis = &p->a;
  info->device = g->device;
  info->device_note = "";
  info->head_dim = head_dim;
  info->variant = s->variant;
  info->mask_method = s->mask_method;
  info->instrumented = p->timing_inst.source[0] != 0;
  info->cost = &p->cost;
  info->timing = p->ran ? &p->timing : NULL;
  info->timing_instrumented = p->timing_inst.source[0] ? &p->timing_inst : NULL;
  info->instr_overhead = r->rec.p[pass].inst_overhead;
  info->measured = p->ran ? &p->measured : NULL;
  info->gpu_classes = p->tile_class;
  info->gpu_cycles = p->tile_cycles;
  info->class_mismatches = r->rec.p[pass].class_mismatches;
  info->clock_khz = g->clock_khz;
  info->timeline = r->ran ? &r->timeline : NULL;
}
