/* viz_scene.c — the derived data behind a viz_state, rebuilt only on change:
 * family or S -> new mask; pair -> new column runs; Br/Bc -> new tile pieces
 * and counts; nothing of this on pan, zoom or hover. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_limits.h"
#include "viz_internal.h"

static const char *base_name(const char *path) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--; /* "trace/" names "trace" */
  size_t b = n;
  while (b > 0 && path[b - 1] != '/') b--;
  return path + b;
}

fm_status viz_scene_create(const viz_scene_opts *o, viz_state *s, viz_scene **out, fm_err *err) {
  *out = NULL;
  viz_scene *sc = calloc(1, sizeof *sc);
  if (!sc) return fm_fail(err, FM_ENOMEM, "out of memory");
  sc->opts = *o;
  if (sc->opts.batch < 1) sc->opts.batch = 1;
  if (sc->opts.heads < 1) sc->opts.heads = 1;
  sc->set = -1;
  fm_status st = o->samples_path ? fm_samples_load(o->samples_path, &sc->samples, err)
                                 : fm_samples_builtin(&sc->samples, err);
  if (st != FM_OK) {
    free(sc);
    return st;
  }
  sc->have_samples = 1;
  if (o->path) {
    viz_source src;
    viz_source_opts vo = {.causal = o->causal, .causal_given = o->causal_given,
                          .true_masked = o->true_masked, .strict = o->strict,
                          .reading = (fm_dense_reading)o->reading};
    st = viz_load_source(o->path, &vo, &src, err);
    if (st != FM_OK) {
      viz_source_free(&src);
      viz_scene_destroy(sc);
      return st;
    }
    sc->file_mask = src.mask; /* the scene owns what the source held */
    sc->trace = src.trace;
    sc->has_trace = src.has_trace;
    sc->file_kind = src.kind;
    sc->note = src.note;
    sc->dense = src.misfit;
    snprintf(sc->file_what, sizeof sc->file_what, "%s", src.what);
    const char *b = base_name(o->path);
    size_t n = strlen(b);
    while (n > 1 && b[n - 1] == '/') n--;
    if (sc->has_trace && sc->trace.family[0]) {
      snprintf(sc->file_label, sizeof sc->file_label, "%.100s%s%.140s", sc->trace.family,
               sc->trace.params[0] ? " " : "", sc->trace.params);
      snprintf(sc->file_what, sizeof sc->file_what, "trace %.*s/, %.60s", (int)(n > 120 ? 120 : n), b,
               sc->trace.device[0] ? sc->trace.device : "cpu");
    } else
      snprintf(sc->file_label, sizeof sc->file_label, "%.*s", (int)n, b);
    s->use_family = 0;
    if (sc->has_trace) {
      s->br = sc->trace.pass[VIZ_FWD].br;
      s->bc = sc->trace.pass[VIZ_FWD].bc;
    }
  } else {
    s->use_family = 1;
  }
  s->facts.has_file = o->path != NULL;
  s->scene = sc;
  *out = sc;
  return FM_OK;
}

const char *viz_scene_note(const viz_scene *sc) { return sc->note.text; }

void viz_scene_destroy(viz_scene *sc) {
  if (!sc) return;
  fm_colmask_destroy(sc->file_mask);
  fm_colmask_destroy(sc->family_mask);
  viz_trace_free(&sc->trace);
  fm_dense_result_destroy(sc->dense);
  if (sc->have_samples) fm_samples_free(&sc->samples);
  free(sc->runs_start);
  free(sc->runs_items);
  free(sc->bad_prefix);
  free(sc->bounds);
  viz_pieces_free(&sc->pieces);
  viz_piece_scratch_free(&sc->scratch);
  free(sc->cycles_rowsum);
  free(sc->raster);
  free(sc->agg);
  free(sc);
}

const fm_colmask *viz_scene_mask(const viz_scene *sc) { return sc->mask; }
const fm_tile_counts *viz_scene_counts(const viz_scene *sc) { return &sc->counts; }
const fm_tile_counts *viz_scene_subset_counts(const viz_scene *sc) {
  return sc->misfit ? &sc->subset_counts : NULL;
}
void viz_scene_bytes(const viz_scene *sc, int64_t *dense, int64_t *block_mask, int64_t *intervals) {
  *dense = sc->bytes.dense;
  *block_mask = sc->bytes.block_mask;
  *intervals = sc->bytes.intervals;
}
void viz_state_caption(const viz_state *s, char *buf, size_t cap) { viz_caption(s, buf, cap); }
const char *viz_scene_label(const viz_scene *sc) { return sc->label; }

void viz_scene_tile_class(const viz_scene *sc, int32_t rt, int32_t ct, int *minmax, int *exact) {
  *minmax = *exact = -1;
  if (!sc->classes_valid || ct < 0 || ct >= sc->tc || rt < 0 || rt >= sc->tr) return;
  int64_t lo = sc->pieces.start[ct], hi = sc->pieces.start[ct + 1] - 1;
  while (lo < hi) { /* the piece holding rt */
    int64_t mid = (lo + hi + 1) / 2;
    if (sc->pieces.items[mid].rt0 <= rt) lo = mid;
    else hi = mid - 1;
  }
  *minmax = sc->pieces.items[lo].minmax;
  *exact = sc->pieces.items[lo].exact;
}

/* The family mask for the state's fields; params of the command line apply to
 * their own family only. */
static fm_status build_family(viz_scene *sc, const viz_state *s, fm_colmask **m,
                              fm_family_used *used, int *params_dropped, fm_err *err) {
  const fm_family_info *fam = fm_family_at(s->family);
  int with_params = sc->opts.param_family && sc->opts.nparams > 0 &&
                    strcmp(sc->opts.param_family, fam->name) == 0;
  fm_family_request req = {fam->name, s->seqlen, sc->opts.batch, sc->opts.heads, s->seed,
                           fam->uses_docs ? s->sample : -1,
                           &sc->samples, with_params ? sc->opts.nparams : 0,
                           with_params ? sc->opts.params : NULL};
  *params_dropped = 0;
  fm_status st = fm_family_build(&req, m, used, err);
  /* the first build is what the command line asked for: its errors stand */
  if (st != FM_OK && with_params && sc->valid) {
    req.nparams = 0;
    req.params = NULL;
    if (fm_family_build(&req, m, used, NULL) == FM_OK) {
      *params_dropped = 1;
      st = FM_OK;
    }
  }
  return st;
}

/* Bytes the scene takes per key column: the run index (int64) and up to 3
 * runs of 2 int32 (a dense mask that fits no interval form keeps its runs in
 * its fm_dense_result, checked when it was read). */
#define VIZ_RUN_BYTES ((int64_t)sizeof(int64_t) + (int64_t)sizeof(int32_t[3][2]))

/* Before a family mask is built: its 4 int32 vectors per set and key column,
 * the column runs, and 2 bytes per column for the tile bounds and pieces (the
 * peak measured at S = 2^24 with one set is 43 bytes per column), against what
 * the machine can give (fm_limits.h). */
static fm_status check_family_memory(const viz_scene *sc, const viz_state *s, fm_err *err) {
  const fm_family_info *fam = fm_family_at(s->family);
  int64_t sets = fam->per_head ? fm_mem_mul(sc->opts.batch, sc->opts.heads) : 1;
  int64_t bytes = fm_mem_add(fm_mem_mul(fm_mem_mul(sets, s->seqlen), 16),
                             fm_mem_mul(s->seqlen, VIZ_RUN_BYTES + 2));
  char what[160];
  snprintf(what, sizeof what, "the %s mask and its column runs at S = %lld", fam->name,
           (long long)s->seqlen);
  return fm_mem_check(bytes, what, err);
}

/* The runs of pair `pair` of a dense mask that fits no interval form. */
static viz_colruns dense_runs(const viz_scene *sc, int64_t pair) {
  const fm_dense_report *rep = fm_dense_result_report(sc->dense);
  const int32_t *items = NULL;
  const int64_t *start = fm_dense_result_all_runs(sc->dense, &items);
  viz_colruns r = {.sq = (int32_t)rep->sq, .sk = (int32_t)rep->sk, .start = start + pair * rep->sk,
                   .items = (const int32_t(*)[2])items};
  return r;
}

/* 1 when no interval form holds column j of r. */
static int column_misfits(const viz_colruns *r, int32_t j) {
  int64_t a = r->start[j], n = r->start[j + 1] - a;
  return fm_runs_fit(r->items + a, n > 3 ? 4 : (int)n, fm_causal_limit(j, r->sq, r->sk), r->sq) == 0;
}

/* The columns no form holds: prefix counts of the shown pair, total of all. */
static fm_status compute_misfits(viz_scene *sc, fm_err *err) {
  int32_t sk = sc->runs.sk;
  free(sc->bad_prefix);
  sc->bad_prefix = malloc(sizeof(int32_t) * ((size_t)sk + 1));
  if (!sc->bad_prefix) return fm_fail(err, FM_ENOMEM, "cannot allocate column flags for Sk=%d", sk);
  sc->bad_prefix[0] = 0;
  for (int32_t j = 0; j < sk; j++) sc->bad_prefix[j + 1] = sc->bad_prefix[j] + column_misfits(&sc->runs, j);
  sc->bad_total = 0;
  const fm_dense_report *rep = fm_dense_result_report(sc->dense);
  for (int64_t p = 0; p < rep->nsets; p++) {
    viz_colruns r = dense_runs(sc, p);
    for (int32_t j = 0; j < sk; j++) sc->bad_total += column_misfits(&r, j);
  }
  return FM_OK;
}

static fm_status compute_runs(viz_scene *sc, fm_err *err) {
  int32_t sq = fm_colmask_sq(sc->mask), sk = fm_colmask_sk(sc->mask);
  if (sc->misfit) {
    sc->runs = dense_runs(sc, sc->pair);
    fm_status st = compute_misfits(sc, err);
    if (st == FM_OK) sc->runs_valid = 1;
    return st;
  }
  free(sc->runs_start);
  free(sc->runs_items);
  sc->runs_start = NULL;
  sc->runs_items = NULL;
  char what[96];
  snprintf(what, sizeof what, "the column runs of Sk = %d", sk);
  fm_status st = fm_mem_check(fm_mem_mul(sk, VIZ_RUN_BYTES), what, err);
  if (st != FM_OK) return st;
  sc->runs_start = malloc(sizeof *sc->runs_start * ((size_t)sk + 1));
  sc->runs_items = malloc(sizeof *sc->runs_items * 3 * (size_t)sk);
  if (!sc->runs_start || !sc->runs_items)
    return fm_fail(err, FM_ENOMEM, "cannot allocate column runs for Sk=%d", sk);
  int64_t at = 0;
  for (int32_t j = 0; j < sk; j++) {
    sc->runs_start[j] = at;
    at += fm_colmask_column_runs(sc->mask, sc->set, j, sc->runs_items + at);
  }
  sc->runs_start[sk] = at;
  sc->runs = (viz_colruns){.sq = sq, .sk = sk, .start = sc->runs_start,
                           .items = (const int32_t(*)[2])sc->runs_items};
  sc->runs_valid = 1;
  return FM_OK;
}

/* A mask that fits no interval form: the exact classes of the shown pair from
 * its runs, counts over every pair (when counts is not NULL), and what the
 * tightest fitting sub-mask would let FlashMask skip (the min/max rule over
 * its every set). */
static fm_status classify_misfit(viz_scene *sc, fm_tile_counts *counts, fm_err *err) {
  fm_status st = viz_pieces_build_runs(&sc->runs, sc->br, sc->bc, &sc->pieces, counts,
                                       &sc->scratch, err);
  if (st != FM_OK || !counts) return st;
  viz_pieces other;
  memset(&other, 0, sizeof other);
  int64_t pairs = fm_dense_result_report(sc->dense)->nsets;
  for (int64_t p = 0; p < pairs && st == FM_OK; p++)
    if (p != sc->pair) {
      viz_colruns r = dense_runs(sc, p);
      st = viz_pieces_build_runs(&r, sc->br, sc->bc, &other, counts, &sc->scratch, err);
    }
  fm_tile_counts sub;
  memset(&sub, 0, sizeof sub);
  for (int32_t set = 0; set < fm_colmask_nsets(sc->mask) && st == FM_OK; set++)
    st = viz_pieces_build(sc->mask, set, sc->br, sc->bc, &other, NULL, &sub, &sc->scratch, err);
  viz_pieces_free(&other);
  viz_counts_finish(&sub);
  sc->subset_counts = sub;
  return st;
}

/* tt: the trace's arrays of the shown pass at this tile, NULL: classify the mask here. */
static fm_status classify(viz_scene *sc, const viz_trace_tiles *tt, int counts_needed, fm_err *err) {
  const fm_colmask *m = sc->mask;
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), nsets = fm_colmask_nsets(m);
  sc->tr = (int32_t)(((int64_t)sq + sc->br - 1) / sc->br);
  sc->tc = (int32_t)(((int64_t)sk + sc->bc - 1) / sc->bc);
  free(sc->bounds);
  sc->bounds = malloc(sizeof *sc->bounds * (size_t)sc->tc);
  if (!sc->bounds) return fm_fail(err, FM_ENOMEM, "cannot allocate bounds for %d key tiles", sc->tc);
  fm_status st;
  fm_tile_counts counts;
  memset(&counts, 0, sizeof counts);
  if (tt) {
    const viz_trace *t = &sc->trace;
    int64_t per_set = (int64_t)tt->tr * tt->tc;
    int64_t slice = tt->tiles_by_pair ? sc->pair : sc->set;
    int64_t slices = tt->tiles_by_pair ? t->batch * t->heads : t->sets;
    fm_tile_bounds_compute(m, sc->set, sc->bc, sc->bounds);
    st = viz_pieces_from_arrays(tt->tiles + per_set * slice, tt->tiles_exact + per_set * slice,
                                tt->tr, tt->tc, &sc->pieces, err);
    if (st == FM_OK && counts_needed) {
      for (int64_t i = 0; i < per_set * slices; i++) {
        int cm = tt->tiles[i], ce = tt->tiles_exact[i];
        counts.minmax[cm]++;
        counts.exact[ce]++;
        counts.partial_but_masked += cm == FM_TILE_PARTIAL && ce == FM_TILE_MASKED;
        counts.partial_but_unmasked += cm == FM_TILE_PARTIAL && ce == FM_TILE_UNMASKED;
      }
      counts.total = per_set * slices;
    }
  } else if (sc->misfit) {
    fm_tile_bounds_compute(m, sc->set, sc->bc, sc->bounds); /* the sub-mask's; shown nowhere */
    st = classify_misfit(sc, counts_needed ? &counts : NULL, err);
  } else {
    st = viz_pieces_build(m, sc->set, sc->br, sc->bc, &sc->pieces, sc->bounds,
                          counts_needed ? &counts : NULL, &sc->scratch, err);
    if (st == FM_OK && counts_needed && nsets > 1) {
      /* the other sets count too (rho over every batch and head, as fmsim analyze) */
      viz_pieces other;
      memset(&other, 0, sizeof other);
      for (int32_t set = 0; set < nsets && st == FM_OK; set++)
        if (set != sc->set)
          st = viz_pieces_build(m, set, sc->br, sc->bc, &other, NULL, &counts, &sc->scratch, err);
      viz_pieces_free(&other);
    }
  }
  if (st != FM_OK) return st;
  if (counts_needed) {
    viz_counts_finish(&counts);
    sc->counts = counts;
  }
  fm_mask_bytes_compute(sq, sk, nsets, sc->form, sc->bc, &sc->bytes);
  sc->bytes_max = (double)viz_tile_model_bytes(FM_TILE_PARTIAL, sc->br < sq ? sc->br : sq,
                                               sc->bc < sk ? sc->bc : sk, sc->head_dim,
                                               sc->pass == VIZ_BWD ? FM_PASS_BWD : FM_PASS_FWD);
  sc->classes_valid = 1;
  sc->classes_from_trace = tt != NULL;
  return FM_OK;
}

/* Row prefix sums of cycles x tile width over key tiles, skipped tiles 0, of
 * the shown pass. */
static fm_status build_cycles(viz_scene *sc, int32_t pair, fm_err *err) {
  const viz_trace_tiles *t = &sc->trace.pass[sc->pass];
  int64_t n = (int64_t)t->tr * (t->tc + 1);
  free(sc->cycles_rowsum);
  sc->cycles_rowsum = malloc(sizeof(double) * (size_t)n);
  if (!sc->cycles_rowsum) return fm_fail(err, FM_ENOMEM, "cannot allocate the cycles overlay");
  const int64_t *cyc = t->cycles + (int64_t)pair * t->tr * t->tc;
  const uint8_t *cls = t->tiles + (int64_t)(t->tiles_by_pair ? pair : sc->set) * t->tr * t->tc;
  int32_t sk = (int32_t)sc->trace.seqlen_k;
  sc->cycles_max = 0;
  for (int32_t rt = 0; rt < t->tr; rt++) {
    double *row = sc->cycles_rowsum + (int64_t)rt * (t->tc + 1);
    row[0] = 0;
    for (int32_t ct = 0; ct < t->tc; ct++) {
      int64_t i = (int64_t)rt * t->tc + ct;
      double v = cls[i] == FM_TILE_MASKED ? 0.0 : (double)cyc[i];
      int32_t w = (ct + 1) * t->bc < sk ? t->bc : sk - ct * t->bc;
      row[ct + 1] = row[ct] + v * w;
      if (v > sc->cycles_max) sc->cycles_max = v;
    }
  }
  sc->cycles_valid = 1;
  return FM_OK;
}

/* D of the modelled bytes: the option's, else the trace's, else 128. */
static int32_t scene_head_dim(const viz_scene *sc) {
  if (sc->opts.head_dim > 0) return sc->opts.head_dim;
  return sc->has_trace && sc->trace.head_dim > 0 ? sc->trace.head_dim : 128;
}

/* The backward's tile into s->facts: a trace's own when it has the backward's
 * arrays, else the tile of the kernel a run without a GPU uses (the registry,
 * docs/DESIGN.md "Kernels") at the scene's head dim, its classes from the CPU. */
static void backward_tile(const viz_scene *sc, viz_state *s) {
  const viz_trace_tiles *b = sc->has_trace && !s->use_family ? &sc->trace.pass[VIZ_BWD] : NULL;
  s->facts.bwd_from_trace = b && b->tiles;
  if (s->facts.bwd_from_trace) {
    s->facts.bwd_br = b->br;
    s->facts.bwd_bc = b->bc;
    return;
  }
  fm_kernel_id id;
  const fm_kernel_desc *d = fm_kernel_auto(-1, -1, &id, NULL) == FM_OK ? fm_kernel_get(id) : NULL;
  int32_t D = scene_head_dim(sc);
  s->facts.bwd_br = s->facts.bwd_bc = 0;
  for (int t = 0; d && t < d->ntiles; t++)
    if (d->tiles[t].head_dim == D) {
      s->facts.bwd_br = d->tiles[t].bwd_br;
      s->facts.bwd_bc = d->tiles[t].bwd_bc;
    }
}

fm_status viz_scene_sync(viz_scene *sc, viz_state *s, fm_err *err) {
  fm_err local;
  if (!err) err = &local;
  fm_status st = FM_OK;
  if (!s->use_family && !sc->file_mask) s->use_family = 1;
  if (s->family < 0 || s->family >= fm_family_count()) s->family = 0;
  int32_t old_sq = sc->valid ? fm_colmask_sq(sc->mask) : -1;
  int32_t old_sk = sc->valid ? fm_colmask_sk(sc->mask) : -1;

  /* documents: a sample index only where S has samples */
  if (s->use_family) {
    int n = fm_samples_count(&sc->samples, s->seqlen);
    if (s->sample >= n) s->sample = n > 0 ? 0 : -1;
    if (s->sample < 0 && n > 0) s->sample = 0;
  }

  int mask_needed = !sc->valid || s->use_family != sc->use_family ||
                    (s->use_family && (s->family != sc->family || s->seqlen != sc->seqlen ||
                                       s->sample != sc->sample || s->seed != sc->seed));
  if (mask_needed) {
    if (s->use_family) {
      fm_colmask *m = NULL;
      fm_family_used used;
      int dropped = 0;
      st = check_family_memory(sc, s, err);
      if (st == FM_OK) st = build_family(sc, s, &m, &used, &dropped, err);
      if (st != FM_OK) {
        snprintf(s->status, sizeof s->status, "%s", err->msg);
        if (sc->valid) { /* back to what is shown */
          s->use_family = sc->use_family;
          s->family = sc->family;
          s->seqlen = sc->seqlen;
          s->sample = sc->sample;
          s->seed = sc->seed;
        }
        return st;
      }
      fm_colmask_destroy(sc->family_mask);
      sc->family_mask = m;
      sc->mask = m;
      sc->used = used;
      snprintf(sc->label, sizeof sc->label, "%s", fm_family_at(s->family)->name);
      sc->batch = sc->opts.batch;
      sc->heads = sc->opts.heads;
      if (dropped)
        snprintf(s->status, sizeof s->status, "--param values do not fit S = %lld; family defaults used",
                 (long long)s->seqlen);
    } else {
      sc->mask = sc->file_mask;
      memset(&sc->used, 0, sizeof sc->used);
      snprintf(sc->label, sizeof sc->label, "%s", sc->file_label);
      sc->batch = sc->has_trace ? sc->trace.batch
                  : sc->dense ? fm_dense_result_report(sc->dense)->batch : fm_colmask_nb(sc->file_mask);
      sc->heads = sc->has_trace ? sc->trace.heads
                  : sc->dense ? fm_dense_result_report(sc->dense)->heads : fm_colmask_nh(sc->file_mask);
    }
    sc->valid = 1;
    sc->use_family = s->use_family;
    sc->family = s->family;
    sc->seqlen = s->seqlen;
    sc->sample = s->sample;
    sc->seed = s->seed;
    sc->misfit = !s->use_family && sc->dense != NULL;
    sc->form = sc->misfit ? FM_FORM_NONE : fm_colmask_smallest_form(sc->mask);
    sc->runs_valid = sc->classes_valid = sc->cycles_valid = 0;
    sc->counts.total = 0;
    sc->version++;
  }
  const fm_colmask *m = sc->mask;
  s->facts.sq = fm_colmask_sq(m);
  s->facts.sk = fm_colmask_sk(m);
  s->facts.has_file = sc->file_mask != NULL;
  s->facts.nsamples = s->use_family && fm_family_at(s->family)->uses_docs
                         ? fm_samples_count(&sc->samples, s->seqlen) : 0;
  s->facts.npairs = (int32_t)(sc->batch * sc->heads);
  const int bwd = (s->layers & VIZ_LAYER_BACKWARD) != 0;
  const viz_trace_tiles *tt = sc->has_trace && !s->use_family ? &sc->trace.pass[bwd] : NULL;
  if (tt && !tt->tiles) tt = NULL; /* the trace has no backward */
  s->facts.file_br = tt ? tt->br : 0;
  s->facts.file_bc = tt ? tt->bc : 0;
  backward_tile(sc, s);
  if (s->facts.sq != old_sq || s->facts.sk != old_sk) viz_view_reset(s);

  /* the pair shown and its vector set */
  if (s->pair < 0 || s->pair >= s->facts.npairs) s->pair = 0;
  int32_t set = fm_colmask_set_index(m, (int32_t)(s->pair / sc->heads), (int32_t)(s->pair % sc->heads));
  if (set != sc->set) {
    sc->set = set;
    sc->runs_valid = sc->classes_valid = 0;
  }
  if (s->pair != sc->pair) {
    sc->pair = s->pair;
    if (tt && tt->tiles_by_pair) sc->classes_valid = 0; /* classes per pair */
    if (sc->misfit) sc->runs_valid = sc->classes_valid = 0; /* runs per pair */
    sc->cycles_valid = 0;
    sc->version++;
  }
  if (!sc->runs_valid) {
    st = compute_runs(sc, err);
    if (st != FM_OK) return st;
    sc->version++;
  }
  s->facts.misfit = sc->misfit;
  s->facts.misfit_columns = sc->misfit ? sc->bad_prefix[s->facts.sk] : 0;

  /* tile classes */
  if (fm_tile_size_check(s->br, s->bc, err) != FM_OK) {
    snprintf(s->status, sizeof s->status, "%s", err->msg);
    s->br = sc->br > 0 ? sc->br : 128;
    s->bc = sc->bc > 0 ? sc->bc : 128;
  }
  int counts_needed = sc->counts.total == 0 || s->br != sc->br || s->bc != sc->bc || bwd != sc->pass;
  if (!sc->classes_valid || s->br != sc->br || s->bc != sc->bc || bwd != sc->pass) {
    int from_trace = tt && s->br == tt->br && s->bc == tt->bc;
    sc->br = s->br;
    sc->bc = s->bc;
    sc->pass = bwd;
    sc->head_dim = scene_head_dim(sc);
    st = classify(sc, from_trace ? tt : NULL, counts_needed, err);
    if (st != FM_OK) {
      snprintf(s->status, sizeof s->status, "%s", err->msg);
      return st;
    }
    sc->cycles_valid = 0;
    sc->version++;
  }

  /* overlays */
  s->facts.has_cycles = sc->classes_from_trace && tt && tt->cycles != NULL;
  if (s->facts.has_cycles && !sc->cycles_valid) {
    st = build_cycles(sc, s->pair, err);
    if (st != FM_OK) return st;
    sc->version++;
  }
  if (s->overlay == VIZ_OVERLAY_CYCLES && !s->facts.has_cycles) {
    s->overlay = VIZ_OVERLAY_NONE;
    if (tt && tt->cycles)
      snprintf(s->status, sizeof s->status,
               "the trace's %scycles are for its own tile size, Br x Bc = %d x %d",
               bwd ? "backward " : "", tt->br, tt->bc);
    else if (bwd)
      snprintf(s->status, sizeof s->status, "%s",
               "no tile_cycles_bwd.npy: the backward's cycles need the trace of an instrumented "
               "GPU run with --pass bwd or both");
    else
      snprintf(s->status, sizeof s->status, "%s",
               "no tile_cycles.npy: the cycles overlay needs the trace of a GPU run");
  }
  return FM_OK;
}
