/* viz_notes.c — what a drawing says about its mask besides the mask itself:
 * the caption (or the title given), the legend entries (the side panel's and
 * the compact legend of small figures), the strip that marks the columns no
 * interval form holds, the lines under the cursor, which the window's panel
 * shows and tests read (viz_hover_lines), and the predicted time of the mask
 * on a GPU profile (viz_prediction_lines). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fm_forms.h"
#include "fm_timing.h"
#include "viz_internal.h"

/* ---- caption ---------------------------------------------------------------- */

#define DOT "  \xC2\xB7  "
#define RHO "\xCF\x81"

/* name, at most max bytes: its start and end (the extension) around an
 * ellipsis, never splitting a UTF-8 character. */
static void short_name(const char *name, size_t max, char *out, size_t cap) {
  size_t n = strlen(name);
  if (n <= max || max < 8) {
    snprintf(out, cap, "%s", name);
    return;
  }
  size_t head = (max - 3) / 2, tail = max - 3 - head;
  while (head > 0 && ((unsigned char)name[head] & 0xC0) == 0x80) head--;
  size_t from = n - tail;
  while (from < n && ((unsigned char)name[from] & 0xC0) == 0x80) from++;
  snprintf(out, cap, "%.*s\xE2\x80\xA6%s", (int)head, name, name + from);
}

/* The rho part: over every pair (with their number), and for a mask no form
 * holds the exact figure and what FlashMask's tightest fitting sub-mask skips. */
static void caption_rho(const viz_state *s, int brief, char *buf, size_t cap) {
  const viz_scene *sc = s->scene;
  char over[64] = "";
  if (s->facts.npairs > 1)
    snprintf(over, sizeof over, brief ? " over %d pairs" : " over %d (batch, head) pairs",
             s->facts.npairs);
  if (sc->misfit)
    snprintf(buf, cap, brief ? "exact " RHO " = %.3f%s" DOT "FlashMask " RHO " = %.3f"
                             : RHO " = %.3f%s (exact classes)" DOT
                               "FlashMask with the tightest fitting sub-mask: " RHO " = %.3f",
             sc->counts.sparsity_exact, over, sc->subset_counts.sparsity);
  else if (fabs(sc->counts.sparsity - sc->counts.sparsity_exact) >= 5e-4)
    snprintf(buf, cap, RHO " = %.3f (exact %.3f)%s", sc->counts.sparsity, sc->counts.sparsity_exact,
             over);
  else
    snprintf(buf, cap, RHO " = %.3f%s", sc->counts.sparsity, over);
}

void viz_caption_at(const viz_state *s, int level, char *buf, size_t cap) {
  const viz_scene *sc = s->scene;
  buf[0] = 0;
  if (s->no_title) return;
  if (s->title[0]) {
    snprintf(buf, cap, "%s", s->title);
    return;
  }
  if (!sc || !sc->valid || !sc->classes_valid) return;
  char dims[96], tiles[96], rho[200], what[512] = "", name[260], pair[96] = "", docs[200] = "";
  int32_t sq = fm_colmask_sq(sc->mask), sk = fm_colmask_sk(sc->mask);
  if (sq == sk) snprintf(dims, sizeof dims, "S = %d", sk);
  else snprintf(dims, sizeof dims, "Sq \xC3\x97 Sk = %d \xC3\x97 %d", sq, sk);
  snprintf(tiles, sizeof tiles, level >= 2 ? "%d \xC3\x97 %d tiles" : "Br \xC3\x97 Bc = %d \xC3\x97 %d",
           sc->br, sc->bc);
  caption_rho(s, level >= 2, rho, sizeof rho);
  short_name(sc->label, level >= 3 ? 12 : level == 2 ? 20 : sizeof name, name, sizeof name);
  if (level >= 4) what[0] = 0;
  else if (level == 0 && !s->use_family && sc->file_what[0])
    snprintf(what, sizeof what, "%.255s (%.199s)" DOT, name, sc->file_what);
  else
    snprintf(what, sizeof what, "%.255s" DOT, name);
  if (level == 0 && sc->used.docs_source[0])
    snprintf(docs, sizeof docs, DOT "documents: %s", sc->used.docs_source);
  if (s->facts.npairs > 1)
    snprintf(pair, sizeof pair, DOT "%sbatch %d, head %d", level >= 2 ? "" : "drawn: ",
             (int)(s->pair / sc->heads), (int)(s->pair % sc->heads));
  snprintf(buf, cap, "%s%s" DOT "%s" DOT "%s%s%s", what, dims, tiles, rho, pair, docs);
}

void viz_caption(const viz_state *s, char *buf, size_t cap) { viz_caption_at(s, 0, buf, cap); }

/* The caption at the first level (viz_caption_at) that fits its lines whole. */
void viz_draw_caption(cairo_t *cr, const viz_state *s, const viz_layout *l, double w) {
  char text[1024];
  viz_caption(s, text, sizeof text);
  if (!text[0] || l->caption_lines < 1) return;
  viz_set_rgb(cr, VIZ_RGB_TEXT);
  viz_set_font(cr, 1.1 * l->font, 1);
  double x = l->caption_x, maxw = w - x - round(1.2 * l->font);
  for (int level = 1; level < VIZ_CAPTION_LEVELS && !s->title[0] &&
                      !viz_text_wraps_into(cr, text, maxw, l->caption_lines);
       level++)
    viz_caption_at(s, level, text, sizeof text);
  viz_text_lines_draw(cr, x, l->caption_y, l->caption_line_h, text, maxw, l->caption_lines, 0);
}

/* ---- legend ----------------------------------------------------------------- */

int viz_legend_entries(const viz_state *s, viz_legend_entry *out) {
  const viz_scene *sc = s->scene;
  int n = 0, tiles = (s->layers & VIZ_LAYER_TILES) != 0, mask = (s->layers & VIZ_LAYER_MASK) != 0;
  int hatch = (s->layers & VIZ_LAYER_HATCH) != 0;
#define ENTRY(f_, h_, t_, b_) (out[n++] = (viz_legend_entry){(f_), (h_), (t_), (b_)})
  if (s->overlay != VIZ_OVERLAY_NONE) {
    ENTRY(VIZ_RGB_MASKED, 0, "skipped tile (masked by the min/max rule)", "skipped tile");
    ENTRY(0, 3, s->overlay == VIZ_OVERLAY_CYCLES ? "GPU cycles per tile" : "modelled bytes per tile",
          s->overlay == VIZ_OVERLAY_CYCLES ? "cycles per tile" : "bytes per tile");
  } else if (tiles) {
    ENTRY(VIZ_RGB_MASKED, 0, "masked tile: skipped", "masked tile");
    ENTRY(VIZ_RGB_PARTIAL, 0, mask ? "partial tile: visible element" : "partial tile",
          mask ? "partial: visible" : "partial tile");
    if (mask) ENTRY(VIZ_RGB_PARTIAL_MASKED, 0, "partial tile: masked element", "partial: masked");
    ENTRY(VIZ_RGB_VISIBLE, 0, "unmasked tile", "unmasked tile");
    /* hatching is explained where it occurs */
    if (hatch && sc && sc->counts.partial_but_masked > 0)
      ENTRY(mask ? VIZ_RGB_PARTIAL_MASKED : VIZ_RGB_PARTIAL, 1, "min/max partial, exactly masked",
            "rule: partial, exact: masked");
    if (hatch && sc && sc->counts.partial_but_unmasked > 0)
      ENTRY(VIZ_RGB_PARTIAL, 2, "min/max partial, exactly unmasked", "rule: partial, exact: unmasked");
  } else if (mask) {
    ENTRY(VIZ_RGB_MASKED, 0, "masked: query i may not attend key j", "masked");
    ENTRY(VIZ_RGB_VISIBLE, 0, "visible: query i attends key j", "visible");
  }
  if (s->facts.misfit)
    ENTRY(VIZ_RGB_MISFIT, 0, "column no interval form holds (above the plot)", "no interval form");
#undef ENTRY
  return n;
}

void viz_draw_compact_legend(cairo_t *cr, const viz_state *s, const viz_layout *l) {
  viz_legend_entry e[VIZ_LEGEND_MAX];
  int n = viz_legend_entries(s, e), cols = l->legend_cols > 0 ? l->legend_cols : 1;
  double font = 0.85 * l->font, line = 1.4 * font, sz = 0.95 * font;
  double cell = l->legend.w / cols;
  viz_set_font(cr, font, 0);
  for (int i = 0; i < n; i++) {
    double x = l->legend.x + (i % cols) * cell, y = l->legend.y + (i / cols) * line;
    if (y + line > l->legend.y + l->legend.h + 0.5) break;
    viz_swatch(cr, x, y + 0.15 * font, sz, e[i].fill, e[i].hatch);
    if (!s->text) continue;
    viz_set_rgb(cr, VIZ_RGB_TEXT);
    viz_text_fit(cr, x + 2.2 * sz, y + 0.97 * font, e[i].brief, cell - 2.2 * sz - 0.6 * font, 0);
  }
}

/* ---- the columns no interval form holds -------------------------------------- */

/* Columns of the shown pair no form holds in keys [a, b) (clamped to the mask). */
static int32_t misfits_in(const viz_scene *sc, double a, double b) {
  int32_t sk = sc->runs.sk;
  int32_t j0 = a < 0 ? 0 : a >= sk ? sk : (int32_t)floor(a);
  int32_t j1 = b <= 0 ? 0 : b >= sk ? sk : (int32_t)ceil(b);
  return j1 > j0 ? sc->bad_prefix[j1] - sc->bad_prefix[j0] : 0;
}

/* The first such column at or after j (sk when none). */
static int32_t next_misfit(const viz_scene *sc, int32_t j) {
  int32_t lo = j, hi = sc->runs.sk; /* smallest k >= j with bad_prefix[k + 1] > bad_prefix[j] */
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (sc->bad_prefix[mid + 1] > sc->bad_prefix[j]) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

void viz_draw_misfit_strip(cairo_t *cr, const viz_state *s, const viz_layout *l) {
  const viz_scene *sc = s->scene;
  const viz_rect *r = &l->strip;
  if (!sc->misfit || r->h <= 0) return;
  const viz_view *v = &s->view;
  double tok = (v->x1 - v->x0) / r->w; /* keys per layout unit */
  cairo_save(cr);
  viz_set_rgb(cr, 0xF2F2F2);
  cairo_rectangle(cr, r->x, r->y, r->w, r->h);
  cairo_fill(cr);
  viz_set_rgb(cr, VIZ_RGB_MISFIT);
  /* one unit at a time (a device pixel at most), merged into spans */
  int n = (int)ceil(r->w), open = -1;
  for (int u = 0; u <= n; u++) {
    int bad = u < n && misfits_in(sc, v->x0 + u * tok, v->x0 + (u + 1) * tok) > 0;
    if (bad && open < 0) open = u;
    if (!bad && open >= 0) {
      cairo_rectangle(cr, r->x + open, r->y, fmin(u, r->w) - open, r->h);
      open = -1;
    }
  }
  cairo_fill(cr);
  cairo_restore(cr);
}

/* ---- under the cursor -------------------------------------------------------- */

viz_hover viz_hover_of(const viz_state *s, const viz_layout *l) {
  viz_hover h = {0, 0, 0, 0, 0, 0};
  const viz_scene *sc = s->scene;
  if (!s->mouse_in || !sc || !sc->classes_valid) return h;
  const viz_rect *p = &l->plot;
  if (s->mouse_x < p->x || s->mouse_x >= p->x + p->w || s->mouse_y < p->y || s->mouse_y >= p->y + p->h)
    return h;
  double kx, ky, kx1, ky1;
  viz_point_to_tokens(s, l, s->mouse_x + 0.5, s->mouse_y + 0.5, &kx, &ky);
  int32_t sq = fm_colmask_sq(sc->mask), sk = fm_colmask_sk(sc->mask);
  if (kx < 0 || ky < 0 || kx >= sk || ky >= sq) return h;
  h.valid = 1;
  h.j = (int32_t)kx;
  h.i = (int32_t)ky;
  if (sc->misfit) {
    /* a pixel over many keys: the first column of them no form holds, so that
     * a marked column can be pointed at without zooming in */
    double kx0;
    viz_point_to_tokens(s, l, s->mouse_x, s->mouse_y, &kx0, &ky1);
    viz_point_to_tokens(s, l, s->mouse_x + 1, s->mouse_y, &kx1, &ky1);
    if (misfits_in(sc, kx0, kx1) > 0) {
      int32_t j = next_misfit(sc, kx0 < 0 ? 0 : (int32_t)floor(kx0));
      if (j < sk) h.j = j;
    }
    h.misfit = sc->bad_prefix[h.j + 1] > sc->bad_prefix[h.j];
  }
  h.rt = h.i / sc->br;
  h.ct = h.j / sc->bc;
  return h;
}

static const char *class_name(int c) {
  return c == FM_TILE_MASKED ? "masked" : c == FM_TILE_PARTIAL ? "partial" : c == FM_TILE_UNMASKED ? "unmasked" : "?";
}

/* "[a, b) [c, d) ..." of runs [k0, k1) of column j, into buf. */
static void format_runs(const viz_colruns *r, int32_t j, int64_t k0, int64_t k1, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  int64_t a = r->start[j];
  for (int64_t k = k0; k < k1 && a + k < r->start[j + 1] && n < cap; k++)
    n += (size_t)snprintf(buf + n, cap - n, "%s[%d, %d)", k > k0 ? " " : "", r->items[a + k][0],
                          r->items[a + k][1]);
}

/* 1 when row i is in one of the runs of column j. */
static int in_runs(const viz_colruns *r, int32_t j, int32_t i) {
  int64_t lo = r->start[j], hi = r->start[j + 1];
  while (lo < hi) { /* the first run ending after i */
    int64_t mid = lo + (hi - lo) / 2;
    if (r->items[mid][1] <= i) lo = mid + 1;
    else hi = mid;
  }
  return lo < r->start[j + 1] && r->items[lo][0] <= i;
}

#define RUNS_PER_LINE 4
#define RUN_LINES 3

/* The column's runs, a few per line, for a mask that fits no interval form. */
static int column_lines(const viz_scene *sc, int32_t j, int misfit, char (*lines)[160], int max) {
  const viz_colruns *r = &sc->runs;
  int64_t nr = r->start[j + 1] - r->start[j];
  int n = 0;
  unsigned fit = fm_runs_fit(r->items + r->start[j], nr > 3 ? 4 : (int)nr,
                             fm_causal_limit(j, r->sq, r->sk), r->sq);
  if (n < max)
    snprintf(lines[n++], 160, "column %d: %lld masked run%s, %s%s", j, (long long)nr, nr == 1 ? "" : "s",
             misfit ? "no interval form holds it" : "fits ", misfit ? "" : fm_form_name(fm_form_smallest(fit)));
  for (int64_t k = 0; k < nr && n < max; k += RUNS_PER_LINE) {
    if (k / RUNS_PER_LINE == RUN_LINES) {
      snprintf(lines[n++], 160, "\xE2\x80\xA6 and %lld more run%s", (long long)(nr - k), nr - k == 1 ? "" : "s");
      break;
    }
    format_runs(r, j, k, k + RUNS_PER_LINE, lines[n++], 160);
  }
  return n;
}

/* The lines of a mask with intervals: tile bounds and the column's intervals. */
static int bounds_lines(const viz_state *s, viz_hover h, int cm, int32_t r1, int32_t k1,
                        char (*lines)[160], int max) {
  const viz_scene *sc = s->scene;
  const fm_colmask *m = sc->mask;
  int n = 0;
  const fm_tile_bounds *tb = &sc->bounds[h.ct];
  char a[48];
#define LINE(...) (n < max ? snprintf(lines[n++], 160, __VA_ARGS__) : 0)
  LINE("LTS %d..%d   LTE %d..%d", tb->lts_min, tb->lts_max, tb->lte_min, tb->lte_max);
  LINE("UTS %d..%d   UTE %d..%d%s", tb->uts_min, tb->uts_max, tb->ute_min, tb->ute_max,
       fm_colmask_causal(m) ? " (with causal)" : "");
  LINE("column %d: LT [%d, %d)  UT [%d, %d)", h.j, fm_colmask_cvec(m, sc->set, FM_LTS)[h.j],
       fm_colmask_cvec(m, sc->set, FM_LTE)[h.j], fm_colmask_cvec(m, sc->set, FM_UTS)[h.j],
       fm_colmask_cvec(m, sc->set, FM_UTE)[h.j]);
  if (fm_colmask_causal(m))
    LINE("causal: rows [0, %d) masked", fm_causal_limit(h.j, fm_colmask_sq(m), fm_colmask_sk(m)));
  if (sc->cycles_valid) {
    viz_format_count(sc->trace.pass[sc->pass].cycles[((int64_t)s->pair * sc->tr + h.rt) * sc->tc + h.ct],
                     a, sizeof a);
    LINE("GPU cycles: %s", a);
  }
  viz_format_bytes((double)viz_tile_model_bytes(cm, r1 - h.rt * sc->br, k1 - h.ct * sc->bc, sc->head_dim,
                                                sc->pass == VIZ_BWD ? FM_PASS_BWD : FM_PASS_FWD),
                   a, sizeof a);
  LINE("modelled bytes: %s", a);
#undef LINE
  return n;
}

int viz_hover_lines_at(const viz_state *s, const viz_layout *l, char (*lines)[160], int max) {
  viz_hover h = viz_hover_of(s, l);
  if (!h.valid || max < 1) return 0;
  const viz_scene *sc = s->scene;
  int32_t sq = fm_colmask_sq(sc->mask), sk = fm_colmask_sk(sc->mask);
  int32_t r1 = (h.rt + 1) * sc->br < sq ? (h.rt + 1) * sc->br : sq;
  int32_t k1 = (h.ct + 1) * sc->bc < sk ? (h.ct + 1) * sc->bc : sk;
  int cm, ce, n = 0;
  viz_scene_tile_class(sc, h.rt, h.ct, &cm, &ce);
  int masked = sc->misfit ? in_runs(&sc->runs, h.j, h.i) : fm_colmask_masked(sc->mask, sc->set, h.i, h.j);
#define LINE(...) (n < max ? snprintf(lines[n++], 160, __VA_ARGS__) : 0)
  LINE("query i = %d, key j = %d: %s", h.i, h.j, masked ? "masked" : "visible");
  LINE("tile row %d, column %d", h.rt, h.ct);
  LINE("rows [%d, %d) \xC3\x97 keys [%d, %d)", h.rt * sc->br, r1, h.ct * sc->bc, k1);
  if (sc->misfit) {
    LINE("class: %s (exact; the mask has no intervals)", class_name(ce));
    n += column_lines(sc, h.j, h.misfit, lines + n, max - n);
  } else {
    LINE("class: %s (min/max), %s (exact)", class_name(cm), class_name(ce));
    n += bounds_lines(s, h, cm, r1, k1, lines + n, max - n);
  }
#undef LINE
  return n;
}

int viz_hover_lines(const viz_state *s, double w, double h, char (*lines)[160], int max) {
  viz_layout l;
  viz_layout_compute(s, w, h, &l);
  return viz_hover_lines_at(s, &l, lines, max);
}

/* ---- the panel's list of columns no form holds -------------------------------- */

int viz_misfit_lines(const viz_state *s, char (*lines)[160], int max) {
  const viz_scene *sc = s->scene;
  if (!sc || !sc->misfit || max < 1) return 0;
  int32_t sk = sc->runs.sk, shown = 0, total = sc->bad_prefix[sk];
  int n = 0;
  char runs[160];
  for (int32_t j = next_misfit(sc, 0); j < sk && n < max - 1; j = next_misfit(sc, j + 1)) {
    int64_t nr = sc->runs.start[j + 1] - sc->runs.start[j];
    format_runs(&sc->runs, j, 0, 3, runs, sizeof runs);
    snprintf(lines[n++], 160, "j = %d: %lld runs %s%s", j, (long long)nr, runs, nr > 3 ? " \xE2\x80\xA6" : "");
    shown++;
  }
  if (shown < total && n < max)
    snprintf(lines[n++], 160, "\xE2\x80\xA6 %d more (fmsim check lists them)", total - shown);
  return n;
}

/* ---- the predicted time ---------------------------------------------------------- */

int32_t viz_scene_head_dim(const viz_scene *sc) { return sc->head_dim > 0 ? sc->head_dim : 128; }

/* 1 when sc->pred is of the mask shown (pass q of it when q >= 0). */
static int pred_current(const viz_scene *sc, int q) {
  int same = sc->pred.use_family == sc->use_family &&
             (!sc->use_family || (sc->pred.family == sc->family && sc->pred.seqlen == sc->seqlen &&
                                  sc->pred.sample == sc->sample && sc->pred.seed == sc->seed));
  return same && (q < 0 ? sc->pred.valid != 0 : (sc->pred.valid >> q) & 1);
}

/* Pass q (VIZ_FWD, VIZ_BWD) of every pair of the mask shown, through the
 * timing model at the profile's tile for the pass, into sc->pred. */
static void predict_pass(viz_scene *sc, int q) {
  const fm_gpu_profile *p = sc->opts.profile;
  const fm_pass pass = q == VIZ_BWD ? FM_PASS_BWD : FM_PASS_FWD;
  const int32_t D = viz_scene_head_dim(sc);
  const fm_timing_coef *c = fm_profile_coef(p, pass, D);
  char *note = sc->pred.note[q];
  if (!pred_current(sc, -1)) { /* another mask: what was kept is of the old one */
    sc->pred.valid = 0;
    sc->pred.use_family = sc->use_family;
    sc->pred.family = sc->family;
    sc->pred.seqlen = sc->seqlen;
    sc->pred.sample = sc->sample;
    sc->pred.seed = sc->seed;
  }
  sc->pred.valid |= 1 << q;
  sc->pred.ms[q] = NAN;
  sc->pred.br[q] = c ? c->br : 0;
  sc->pred.bc[q] = c ? c->bc : 0;
  note[0] = 0;
  if (sc->misfit) {
    snprintf(note, 160, "none: no interval form holds this mask, no kernel runs it");
    return;
  }
  if (!c) {
    if (pass == FM_PASS_BWD && p->nbwd == 0) snprintf(note, 160, "%.100s has no backward fit", p->name);
    else snprintf(note, 160, "%.100s has no %s fit for head dim %d", p->name, fm_pass_name(pass), D);
    return;
  }
  fm_timing_problem pb = {.batch = sc->batch, .heads = sc->heads, .head_dim = D, .pass = pass,
                          .variant = FM_VARIANT_SKIP};
  fm_timing_work w;
  fm_timing_result r;
  fm_err err;
  fm_status st = fm_timing_work_init(&w, sc->mask, c->br, c->bc, &err);
  if (st == FM_OK) st = fm_timing_predict(p, &w, &pb, &r, &err);
  fm_timing_work_free(&w);
  if (st == FM_OK) sc->pred.ms[q] = r.time_us / 1e3;
  else snprintf(note, 160, "%.150s", err.msg);
}

/* "12.3", "0.0506": three significant digits, never an exponent. */
static void format_ms(double ms, char *buf, size_t cap) {
  if (ms >= 100) snprintf(buf, cap, "%.0f", ms);
  else if (ms >= 10) snprintf(buf, cap, "%.1f", ms);
  else if (ms >= 1) snprintf(buf, cap, "%.2f", ms);
  else snprintf(buf, cap, "%.3g", ms);
}

int viz_prediction_lines(const viz_state *s, char (*lines)[160], int max) {
  viz_scene *sc = s->scene;
  if (!sc || !sc->valid || !sc->opts.profile || max < 1) return 0;
  const fm_gpu_profile *p = sc->opts.profile;
  int n = 0, bwd = (s->layers & VIZ_LAYER_BACKWARD) != 0;
  for (int q = VIZ_FWD; q <= (bwd ? VIZ_BWD : VIZ_FWD) && n < max; q++) {
    if (!pred_current(sc, q)) predict_pass(sc, q);
    const char *pass = q == VIZ_BWD ? "bwd" : "fwd";
    char ms[32];
    if (isfinite(sc->pred.ms[q])) {
      format_ms(sc->pred.ms[q], ms, sizeof ms);
      snprintf(lines[n++], 160, "predicted %s ms %s on %.60s (%s, %dx%d)", ms, pass, p->name,
               fm_kernel_get(p->kernel)->name, sc->pred.br[q], sc->pred.bc[q]);
    } else {
      snprintf(lines[n++], 160, "predicted %s: %.140s", pass, sc->pred.note[q]);
    }
  }
  return n;
}
