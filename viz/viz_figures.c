/* viz_figures.c — the figure registry (viz.h) and its figures: the gallery of
 * the twelve families (small multiples, like Figure 1a of the FlashMask
 * paper, each with its tile classes and rho), mask memory against S, and the
 * viewer's drawing of one mask or trace. `fmsim render --figure`, a
 * scenario's figures: and the size defaults come from the table at the end. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fm_families.h"
#include "fm_memory.h"
#include "viz_internal.h"

/* ---- gallery ------------------------------------------------------------- */

static fm_status draw_gallery(cairo_t *cr, double w, double h, void *ctx, fm_err *err) {
  const viz_figure_opts *o = ctx;
  const int cols = 4, nfam = FM_PAPER_NFAMILIES, rows = (nfam + cols - 1) / cols;
  double font = fmax(8.0, fmin(22.0, 14.0 * fmin(w / 1600.0, h / 1300.0)));
  double margin = round(1.2 * font), top = round(3.2 * font), bottom = round(3.0 * font);
  double cell_w = (w - 2 * margin) / cols, cell_h = (h - top - bottom) / rows;
  double title_h = 1.6 * font, rho_h = 1.6 * font;
  double side = floor(fmin(cell_w - 1.6 * font, cell_h - title_h - rho_h - 0.6 * font));
  if (side < 8) return fm_fail(err, FM_EINVAL, "size %gx%g is too small for twelve panels", w, h);
  viz_set_rgb(cr, VIZ_RGB_BACKGROUND);
  cairo_paint(cr);
  viz_scene_opts so;
  memset(&so, 0, sizeof so);
  so.batch = so.heads = 1;
  so.samples_path = o->samples_path;
  char line[400];
  int sample_shown = -1;
  for (int f = 0; f < nfam; f++) {
    viz_state s;
    viz_state_init(&s, 100, 100);
    viz_scene *sc = NULL;
    fm_status st = viz_scene_create(&so, &s, &sc, err);
    if (st != FM_OK) return st;
    s.family = f;
    s.seqlen = o->seqlen;
    s.sample = o->sample;
    s.seed = o->seed;
    s.br = o->br;
    s.bc = o->bc;
    s.layers = VIZ_LAYER_MASK | VIZ_LAYER_TILES | VIZ_LAYER_HATCH | VIZ_LAYER_GRID;
    s.text = o->text;
    st = viz_scene_sync(sc, &s, err);
    if (st != FM_OK) {
      char msg[sizeof err->msg];
      snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
      viz_scene_destroy(sc);
      return fm_fail(err, st, "gallery, family %s: %s", fm_family_at(f)->name, msg);
    }
    if (fm_family_at(f)->uses_docs && s.sample >= 0) sample_shown = s.sample;
    viz_view_reset(&s);
    int r = f / cols, c = f % cols;
    double cx = margin + c * cell_w, cy = top + r * cell_h;
    viz_rect rect = {floor(cx + (cell_w - side) / 2), floor(cy + title_h), side, side};
    viz_draw_mask_in(cr, &s, &rect, 8.0);
    if (o->text) {
      viz_set_rgb(cr, VIZ_RGB_TEXT);
      viz_set_font(cr, font, 1);
      viz_text_fit(cr, rect.x + side / 2, cy + 1.15 * font, fm_family_at(f)->name, cell_w - 0.4 * font, 0.5);
      viz_set_font(cr, 0.95 * font, 0);
      const fm_tile_counts *k = viz_scene_counts(sc);
      if (fabs(k->sparsity - k->sparsity_exact) > 5e-4)
        snprintf(line, sizeof line, "\xCF\x81 = %.3f  (exact %.3f)", k->sparsity, k->sparsity_exact);
      else
        snprintf(line, sizeof line, "\xCF\x81 = %.3f", k->sparsity);
      viz_text_fit(cr, rect.x + side / 2, rect.y + side + 1.25 * font, line, cell_w - 0.4 * font, 0.5);
    }
    viz_scene_destroy(sc);
  }
  /* legend row */
  double ly = h - bottom + 0.9 * font, sz = 0.95 * font, lx = margin;
  static const struct {
    uint32_t fill;
    int hatch;
    const char *text;
  } items[] = {{VIZ_RGB_MASKED, 0, "masked tile (skipped)"},
               {VIZ_RGB_PARTIAL, 0, "partial tile: visible"},
               {VIZ_RGB_PARTIAL_MASKED, 0, "partial tile: masked"},
               {VIZ_RGB_VISIBLE, 0, "unmasked tile"},
               {VIZ_RGB_PARTIAL, 2, "min/max partial, exactly unmasked"},
               {VIZ_RGB_PARTIAL_MASKED, 1, "min/max partial, exactly masked"}};
  viz_set_font(cr, 0.9 * font, 0);
  for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
    viz_swatch(cr, lx, ly, sz, items[i].fill, items[i].hatch);
    lx += 2.2 * sz;
    if (o->text) {
      viz_set_rgb(cr, VIZ_RGB_TEXT);
      viz_text_at(cr, lx, ly + 0.82 * font, items[i].text, 0);
      lx += viz_text_width(cr, items[i].text) + 1.6 * font;
    } else {
      lx += 8 * font;
    }
  }
  if (o->text) {
    char docs[64] = "";
    if (sample_shown >= 0) snprintf(docs, sizeof docs, ", documents: sample %d of the paper", sample_shown);
    snprintf(line, sizeof line,
             "The twelve mask families at S = %lld, tiles Br \xC3\x97 Bc = %d \xC3\x97 %d (classes by the "
             "min/max rule)%s", (long long)o->seqlen, o->br, o->bc, docs);
    viz_set_rgb(cr, VIZ_RGB_TEXT);
    viz_set_font(cr, 1.15 * font, 1);
    viz_text_fit(cr, margin, 1.9 * font, line, w - 2 * margin, 0);
  }
  return FM_OK;
}

/* ---- memory figure ------------------------------------------------------- */

static void format_pow2_bytes(int e, char *buf, int cap) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = e / 10;
  snprintf(buf, (size_t)cap, "%d %s", 1 << (e - 10 * u), units[u > 5 ? 5 : u]);
}

static void marker(cairo_t *cr, int kind, double x, double y, double r) {
  switch (kind) {
  case 0: cairo_arc(cr, x, y, r, 0, 2 * M_PI); break;
  case 1: cairo_rectangle(cr, x - r, y - r, 2 * r, 2 * r); break;
  case 2:
    cairo_move_to(cr, x, y - 1.2 * r);
    cairo_line_to(cr, x + 1.1 * r, y + 0.8 * r);
    cairo_line_to(cr, x - 1.1 * r, y + 0.8 * r);
    cairo_close_path(cr);
    break;
  default:
    cairo_move_to(cr, x, y - 1.3 * r);
    cairo_line_to(cr, x + 1.1 * r, y);
    cairo_line_to(cr, x, y + 1.3 * r);
    cairo_line_to(cr, x - 1.1 * r, y);
    cairo_close_path(cr);
  }
}

static fm_status draw_memory(cairo_t *cr, double w, double h, void *ctx, fm_err *err) {
  const viz_figure_opts *o = ctx;
  double font = fmax(8.0, fmin(22.0, 13.0 * fmin(w / 1000.0, h / 700.0)));
  viz_rect p = {round(6.5 * font), round(3.4 * font), 0, 0};
  p.w = w - p.x - round(1.6 * font);
  p.h = h - p.y - round(4.0 * font);
  if (p.w < 10 * font || p.h < 8 * font)
    return fm_fail(err, FM_EINVAL, "size %gx%g is too small for the memory figure", w, h);
  enum { NS = 11, NSERIES = 4 };
  static const struct {
    const char *name;
    uint32_t rgb;
    int dashed;
  } series[NSERIES] = {{"dense bool mask (Sq \xC3\x97 Sk bytes)", 0xD55E00, 0},
                       {"FlexAttention block mask (128 \xC3\x97 128 blocks)", 0x0072B2, 0},
                       {"FlashMask intervals, bidir-4 (4 int32 per key + tile bounds)", 0xCC79A7, 1},
                       {"FlashMask intervals, causal-1 (1 int32 per key + tile bounds)", 0x009E73, 0}};
  double value[NSERIES][NS];
  double lo = 1e300, hi = 0;
  for (int k = 0; k < NS; k++) {
    int64_t s = (int64_t)1 << (10 + k);
    fm_mask_bytes b4, b1;
    fm_mask_bytes_compute(s, s, 1, FM_FORM_BIDIR4, o->bc, &b4);
    fm_mask_bytes_compute(s, s, 1, FM_FORM_CAUSAL1, o->bc, &b1);
    value[0][k] = (double)b4.dense;
    value[1][k] = (double)b4.block_mask;
    value[2][k] = (double)b4.intervals;
    value[3][k] = (double)b1.intervals;
    for (int q = 0; q < NSERIES; q++) {
      lo = fmin(lo, value[q][k]);
      hi = fmax(hi, value[q][k]);
    }
  }
  int e_lo = (int)floor(log2(lo)), e_hi = (int)ceil(log2(hi));
  e_lo = e_lo / 10 * 10; /* start at a labelled power of 1024 */
  double x_lo = 10, x_hi = 20;
  double pad = 0.25;
#define MX(e) (p.x + ((e) - (x_lo - pad)) / ((x_hi + pad) - (x_lo - pad)) * p.w)
#define MY(e) (p.y + p.h - ((e) - (e_lo - 0.5)) / ((e_hi + 0.5) - (e_lo - 0.5)) * p.h)
  viz_set_rgb(cr, VIZ_RGB_BACKGROUND);
  cairo_paint(cr);
  char buf[64];
  /* grid and ticks: every power of two of bytes faint, every 1024 labelled */
  cairo_set_line_width(cr, 1.0);
  for (int e = e_lo; e <= e_hi; e++) {
    double y = viz_snap_y(cr, MY(e));
    cairo_set_source_rgba(cr, 0, 0, 0, e % 5 == 0 ? 0.18 : 0.06);
    cairo_move_to(cr, p.x, y);
    cairo_line_to(cr, p.x + p.w, y);
    cairo_stroke(cr);
    if (e % 5 == 0 && o->text) {
      format_pow2_bytes(e, buf, sizeof buf);
      viz_set_rgb(cr, VIZ_RGB_TEXT);
      viz_set_font(cr, 0.9 * font, 0);
      viz_text_at(cr, p.x - 0.6 * font, y + 0.33 * font, buf, 1.0);
    }
  }
  for (int k = 0; k < NS; k++) {
    double x = viz_snap_x(cr, MX(10 + k));
    cairo_set_source_rgba(cr, 0, 0, 0, 0.06);
    cairo_move_to(cr, x, p.y);
    cairo_line_to(cr, x, p.y + p.h);
    cairo_stroke(cr);
    viz_set_rgb(cr, 0x444444);
    cairo_move_to(cr, x, p.y + p.h);
    cairo_line_to(cr, x, p.y + p.h + 0.45 * font);
    cairo_stroke(cr);
    if (o->text) {
      viz_format_tokens((int64_t)1 << (10 + k), 1, buf, sizeof buf);
      viz_set_font(cr, 0.9 * font, 0);
      viz_text_at(cr, x, p.y + p.h + 1.55 * font, buf, 0.5);
    }
  }
  viz_set_rgb(cr, 0x444444);
  cairo_rectangle(cr, viz_snap_x(cr, p.x), viz_snap_y(cr, p.y), round(p.w), round(p.h));
  cairo_stroke(cr);
  /* series */
  for (int q = 0; q < NSERIES; q++) {
    cairo_save(cr);
    cairo_rectangle(cr, p.x, p.y, p.w, p.h);
    cairo_clip(cr);
    viz_set_rgb(cr, series[q].rgb);
    cairo_set_line_width(cr, 0.2 * font);
    if (series[q].dashed) {
      double d[2] = {0.7 * font, 0.45 * font};
      cairo_set_dash(cr, d, 2, 0);
    }
    for (int k = 0; k < NS; k++) {
      double x = MX(10 + k), y = MY(log2(value[q][k]));
      if (k == 0) cairo_move_to(cr, x, y);
      else cairo_line_to(cr, x, y);
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    for (int k = 0; k < NS; k++) {
      marker(cr, q, MX(10 + k), MY(log2(value[q][k])), 0.32 * font);
      cairo_fill(cr);
    }
    cairo_restore(cr);
  }
  /* legend in the upper left, inside the plot */
  double lx = p.x + 1.0 * font, ly = p.y + 1.0 * font, lh = 1.5 * font;
  if (o->text) {
    viz_set_font(cr, 0.9 * font, 0);
    double lw = 0;
    for (int q = 0; q < NSERIES; q++) lw = fmax(lw, viz_text_width(cr, series[q].name));
    cairo_set_source_rgba(cr, 1, 1, 1, 0.92);
    cairo_rectangle(cr, lx - 0.5 * font, ly - 0.5 * font, lw + 4.4 * font, NSERIES * lh + 0.4 * font);
    cairo_fill(cr);
  }
  for (int q = 0; q < NSERIES; q++) {
    double y = ly + q * lh + 0.5 * font;
    viz_set_rgb(cr, series[q].rgb);
    cairo_set_line_width(cr, 0.2 * font);
    if (series[q].dashed) {
      double d[2] = {0.7 * font, 0.45 * font};
      cairo_set_dash(cr, d, 2, 0);
    }
    cairo_move_to(cr, lx, y);
    cairo_line_to(cr, lx + 2.6 * font, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    marker(cr, q, lx + 1.3 * font, y, 0.32 * font);
    cairo_fill(cr);
    if (o->text) {
      viz_set_rgb(cr, VIZ_RGB_TEXT);
      viz_text_at(cr, lx + 3.4 * font, y + 0.33 * font, series[q].name, 0);
    }
  }
  if (o->text) {
    viz_set_rgb(cr, VIZ_RGB_TEXT);
    viz_set_font(cr, 0.95 * font, 0);
    viz_text_at(cr, p.x + p.w / 2, p.y + p.h + 2.95 * font, "sequence length S = Sq = Sk (tokens, log scale)", 0.5);
    cairo_save(cr);
    cairo_translate(cr, p.x - 5.3 * font, p.y + p.h / 2);
    cairo_rotate(cr, -M_PI / 2);
    viz_text_at(cr, 0, 0, "bytes for one mask (log scale)", 0.5);
    cairo_restore(cr);
    viz_set_font(cr, 1.1 * font, 1);
    snprintf(buf, sizeof buf, "%d", o->bc);
    char title[256];
    snprintf(title, sizeof title, "Mask memory against sequence length (tile bounds at Bc = %s)", buf);
    viz_text_fit(cr, p.x, 2.0 * font, title, w - p.x - font, 0);
  }
#undef MX
#undef MY
  return FM_OK;
}

/* ---- one mask or trace, as the viewer draws it ---------------------------------- */

static fm_status draw_tiles(cairo_t *cr, double w, double h, void *ctx, fm_err *err) {
  const viz_figure_opts *o = ctx;
  viz_state st;
  viz_state_init(&st, (int)w, (int)h);
  viz_scene *scene = NULL;
  viz_scene_opts so = {.path = o->trace, .batch = 1, .heads = 1, .samples_path = o->samples_path,
                       .head_dim = o->head_dim};
  fm_status vs = viz_scene_create(&so, &st, &scene, err);
  if (vs == FM_OK && !o->trace) {
    st.seqlen = o->seqlen;
    st.br = o->br;
    st.bc = o->bc;
    st.sample = o->sample;
    st.seed = o->seed;
  }
  st.text = o->text;
  if (vs == FM_OK) {
    st.scene = scene;
    vs = viz_scene_sync(scene, &st, err);
  }
  if (vs == FM_OK) viz_draw(cr, &st, w, h);
  viz_scene_destroy(scene);
  return vs;
}

/* ---- the registry ---------------------------------------------------------------- */

static const viz_figure figures[] = {
    {.name = "gallery",
     .summary = "the twelve families as small multiples (tiles over the mask, rho)",
     .width = 1600, .height = 1350, .draw = draw_gallery, .per_case = 0},
    {.name = "memory",
     .summary = "mask memory vs S, 1K..1M, log-log: dense, FlexAttention block mask, FlashMask "
                "intervals (from fm_memory.h)",
     .width = 1000, .height = 650, .draw = draw_memory, .per_case = 0},
    {.name = "tiles",
     .summary = "one mask or trace as the viewer draws it: the mask, its tile classes, axes, "
                "legend and numbers",
     .width = 1200, .height = 800, .draw = draw_tiles, .per_case = 1},
};
#define NFIGURES ((int)(sizeof figures / sizeof figures[0]))

int viz_figure_count(void) { return NFIGURES; }

const viz_figure *viz_figure_at(int i) { return i >= 0 && i < NFIGURES ? &figures[i] : NULL; }

const viz_figure *viz_figure_find(const char *name) {
  for (int i = 0; name && i < NFIGURES; i++)
    if (!strcmp(figures[i].name, name)) return &figures[i];
  return NULL;
}

const char *viz_figure_names(char *buf, int cap) {
  int len = 0;
  buf[0] = 0;
  for (int i = 0; i < NFIGURES && len < cap; i++)
    len += snprintf(buf + len, (size_t)(cap - len), "%s%s", i == 0 ? "" : i == NFIGURES - 1 ? " or " : ", ",
                    figures[i].name);
  return buf;
}
