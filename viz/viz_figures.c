/* viz_figures.c — the figure registry (viz.h) and its figures: the gallery of
 * the twelve families (small multiples, like Figure 1a of the FlashMask
 * paper, each with its tile classes and rho), mask memory against S, and the
 * viewer's drawing of one mask or trace. `fmsim render --figure`, a
 * scenario's figures: and the size defaults come from the table at the end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_families.h"
#include "fm_linrnn_cpu.h"
#include "fm_memory.h"
#include "viz_internal.h"

/* ---- titles and legends measured in place ------------------------------------ */

/* The height a title of at most max_lines takes at font*1.15 bold (0 when
 * none), the lines into *lines (viz_internal.h). */
double viz_title_height(cairo_t *cr, const char *t, double maxw, double font, int max_lines,
                        int text, int *lines) {
  char buf[3][512];
  *lines = 0;
  if (!t || !t[0]) return 0;
  if (!text) { /* no glyphs (reference images): one line, whatever the fonts */
    *lines = 1;
    return 1.35 * 1.15 * font;
  }
  viz_set_font(cr, 1.15 * font, 1);
  *lines = viz_text_wrap(cr, t, maxw, max_lines > 3 ? 3 : max_lines, buf);
  return *lines * 1.35 * 1.15 * font;
}

void viz_title_draw(cairo_t *cr, const char *t, double x, double y, double maxw, double font,
                    int lines, int text) {
  if (!text || lines < 1) return;
  viz_set_rgb(cr, VIZ_RGB_TEXT);
  viz_set_font(cr, 1.15 * font, 1);
  viz_text_lines_draw(cr, x, y, 1.35 * 1.15 * font, t, maxw, lines, 0);
}

typedef struct legend_item {
  uint32_t fill;
  int hatch;
  const char *text, *brief;
} legend_item;

/* Lays out (draw 0) or draws a legend of n items flowing left to right in
 * rows of width w from (x, y); returns the rows. Without glyphs (text 0) the
 * widths are estimates, so that the layout does not depend on the fonts. */
static int legend_flow(cairo_t *cr, const legend_item *it, int n, double x, double y, double w,
                       double font, int text, int brief, int draw) {
  double sz = 0.95 * font, gap = 1.2 * font, cx = 0;
  int rows = n > 0;
  viz_set_font(cr, 0.9 * font, 0);
  for (int i = 0; i < n; i++) {
    const char *t = brief ? it[i].brief : it[i].text;
    double tw = text ? viz_text_width(cr, t) : viz_text_estimate(t, 0.9 * font, 0);
    double iw = fmin(2.2 * sz + tw, w);
    if (cx > 0 && cx + iw > w) {
      rows++;
      cx = 0;
    }
    if (draw) {
      double ix = x + cx, iy = y + (rows - 1) * 1.5 * font;
      viz_swatch(cr, ix, iy, sz, it[i].fill, it[i].hatch);
      if (text) {
        viz_set_rgb(cr, VIZ_RGB_TEXT);
        viz_text_fit(cr, ix + 2.2 * sz, iy + 0.82 * font, t, iw - 2.2 * sz, 0);
      }
    }
    cx += iw + gap;
  }
  return rows;
}

/* The rows of a legend in width w, with its full words when they take at
 * most two rows, else the brief ones (*brief). */
static int legend_rows(cairo_t *cr, const legend_item *it, int n, double w, double font, int text,
                       int *brief) {
  *brief = 0;
  int rows = legend_flow(cr, it, n, 0, 0, w, font, text, 0, 0);
  if (rows <= 2) return rows;
  *brief = 1;
  return legend_flow(cr, it, n, 0, 0, w, font, text, 1, 0);
}

/* ---- gallery ------------------------------------------------------------- */

/* Opens panel k of the gallery: family k of the paper's twelve, or item k. */
static fm_status gallery_panel(const viz_figure_opts *o, int k, viz_state *s, viz_scene **sc,
                               char *title, size_t cap, fm_err *err) {
  viz_scene_opts so = {.batch = 1, .heads = 1, .samples_path = o->samples_path,
                       .path = o->nitems ? o->items[k].trace : NULL};
  viz_state_init(s, 100, 100);
  fm_status st = viz_scene_create(&so, s, sc, err);
  if (st != FM_OK) return st;
  if (!o->nitems) {
    s->family = k;
    s->seqlen = o->seqlen;
    s->sample = o->sample;
    s->seed = o->seed;
    s->br = o->br;
    s->bc = o->bc;
  }
  s->layers = VIZ_LAYER_MASK | VIZ_LAYER_TILES | VIZ_LAYER_HATCH | VIZ_LAYER_GRID;
  s->text = o->text;
  st = viz_scene_sync(*sc, s, err);
  if (st != FM_OK) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
    viz_scene_destroy(*sc);
    *sc = NULL;
    return fm_fail(err, st, "gallery, %s: %s", o->nitems ? o->items[k].trace : fm_family_at(k)->name, msg);
  }
  snprintf(title, cap, "%s", o->nitems ? o->items[k].title : fm_family_at(k)->name);
  viz_view_reset(s);
  return FM_OK;
}

/* The default title: the families' (with their S, tiles and documents) or
 * the scenario's masks (with S and the tiles when every panel has the same:
 * s > 0). Shorter by level (0..2): the words around the numbers go first,
 * the numbers stay whole. */
static void gallery_title(const viz_figure_opts *o, int sample_shown, int64_t s, int32_t br,
                          int32_t bc, int level, char *buf, size_t cap) {
  if (o->title) {
    snprintf(buf, cap, "%s", o->no_title ? "" : o->title);
    return;
  }
  if (o->no_title) {
    buf[0] = 0;
    return;
  }
  const char *rule = level == 0 ? " (classes by the min/max rule)" : "";
  char at[96] = "";
  if (o->nitems && s <= 0) at[0] = 0;
  else if (level < 2)
    snprintf(at, sizeof at, " at S = %lld  \xC2\xB7  tiles Br \xC3\x97 Bc = %d \xC3\x97 %d",
             (long long)(o->nitems ? s : o->seqlen), o->nitems ? br : o->br, o->nitems ? bc : o->bc);
  else
    snprintf(at, sizeof at, "  \xC2\xB7  S = %lld  \xC2\xB7  %d \xC3\x97 %d tiles",
             (long long)(o->nitems ? s : o->seqlen), o->nitems ? br : o->br, o->nitems ? bc : o->bc);
  if (o->nitems) {
    snprintf(buf, cap, level < 2 ? "The %d mask%s of %.200s%s%s" : "%d mask%s of %.200s%s%s",
             o->nitems, o->nitems == 1 ? "" : "s", o->items_name ? o->items_name : "the scenario",
             at, rule);
    return;
  }
  char docs[64] = "";
  if (sample_shown >= 0 && level == 0)
    snprintf(docs, sizeof docs, "  \xC2\xB7  documents: sample %d of the paper", sample_shown);
  snprintf(buf, cap, "%s%s%s%s", level < 2 ? "The twelve mask families" : "12 families", at, rule,
           docs);
}

/* The gallery's title at the first level that fits two lines of maxw whole. */
static void gallery_title_fit(cairo_t *cr, const viz_figure_opts *o, int sample_shown, int64_t s,
                              int32_t br, int32_t bc, double maxw, double font, char *buf,
                              size_t cap) {
  viz_set_font(cr, 1.15 * font, 1);
  for (int level = 0; level < 3; level++) {
    gallery_title(o, sample_shown, s, br, bc, level, buf, cap);
    if (!o->text || o->title || o->no_title || viz_text_wraps_into(cr, buf, maxw, 2)) return;
  }
}

static const legend_item gallery_legend[] = {
    {VIZ_RGB_MASKED, 0, "masked tile (skipped)", "masked"},
    {VIZ_RGB_PARTIAL, 0, "partial tile: visible", "partial: visible"},
    {VIZ_RGB_PARTIAL_MASKED, 0, "partial tile: masked", "partial: masked"},
    {VIZ_RGB_VISIBLE, 0, "unmasked tile", "unmasked"},
    {VIZ_RGB_PARTIAL, 2, "min/max partial, exactly unmasked", "rule partial, exact unmasked"},
    {VIZ_RGB_PARTIAL_MASKED, 1, "min/max partial, exactly masked", "rule partial, exact masked"}};
#define GALLERY_LEGEND ((int)(sizeof gallery_legend / sizeof gallery_legend[0]))

/* Columns of n square panels in (aw x ah) that make them largest, each at
 * least min_w wide (its rho line). */
static int gallery_cols(int n, double aw, double ah, double extra_h, double pad, double min_w,
                        double *side) {
  int best = 1;
  *side = -1;
  for (int cols = 1; cols <= n; cols++) {
    int rows = (n + cols - 1) / cols;
    if (cols > 1 && aw / cols < min_w) break;
    double sd = floor(fmin(aw / cols - pad, ah / rows - extra_h));
    if (sd > *side) {
      *side = sd;
      best = cols;
    }
  }
  return best;
}

static fm_status draw_gallery(cairo_t *cr, double w, double h, void *ctx, fm_err *err) {
  const viz_figure_opts *o = ctx;
  const int n = o->nitems ? o->nitems : FM_PAPER_NFAMILIES;
  double font = fmax(8.0, fmin(22.0, 14.0 * fmin(w / 1600.0, h / 1300.0)));
  double margin = round(1.2 * font), cw = w - 2 * margin;
  char title[600];
  int sample_shown = -1, tlines, brief;
  for (int f = 0; f < n && !o->nitems; f++)
    if (fm_family_at(f)->uses_docs) sample_shown = o->sample >= 0 ? o->sample : 0;
  /* measured with S and the tiles in (the title drawn says them when the panels agree) */
  gallery_title_fit(cr, o, sample_shown, o->seqlen > 0 ? o->seqlen : 1048576, o->br, o->bc, cw, font,
                    title, sizeof title);
  double th = viz_title_height(cr, title, cw, font, 2, o->text, &tlines);
  double top = th > 0 ? round(margin + th + 0.3 * font) : margin;
  int lrows = legend_rows(cr, gallery_legend, GALLERY_LEGEND, cw, font, o->text, &brief);
  double bottom = round(lrows * 1.5 * font + 0.9 * font);
  double title_h = 1.6 * font, rho_h = 1.6 * font, side, extra = title_h + rho_h + 0.6 * font;
  viz_set_font(cr, 0.95 * font, 0);
  const char *widest = "\xCF\x81 = 0.000";
  double min_w = (o->text ? viz_text_width(cr, widest) : viz_text_estimate(widest, 0.95 * font, 0)) + font;
  int cols = gallery_cols(n, cw, h - top - bottom, extra, 1.6 * font, min_w, &side);
  int rows = (n + cols - 1) / cols;
  if (side < 8)
    return fm_fail(err, FM_EINVAL, "size %gx%g pt (%.2f x %.2f in) is too small for %d panels", w, h,
                   w / 72, h / 72, n);
  double cell_w = cw / cols, cell_h = fmin((h - top - bottom) / rows, side + extra + 0.4 * font);
  top = round(top + (h - top - bottom - rows * cell_h) / 2); /* the grid centred in its room */
  viz_set_rgb(cr, VIZ_RGB_BACKGROUND);
  cairo_paint(cr);
  char line[380], name[300];
  int64_t same_s = -1;
  int32_t same_br = 0, same_bc = 0;
  for (int k = 0; k < n; k++) {
    viz_state s;
    viz_scene *sc = NULL;
    fm_status st = gallery_panel(o, k, &s, &sc, name, sizeof name, err);
    if (st != FM_OK) return st;
    if (k == 0 || (same_s == s.facts.sk && same_br == s.br && same_bc == s.bc)) {
      same_s = s.facts.sq == s.facts.sk ? s.facts.sk : -1;
      same_br = s.br;
      same_bc = s.bc;
    } else {
      same_s = -1;
    }
    double cx = margin + (k % cols) * cell_w, cy = top + (k / cols) * cell_h;
    viz_rect rect = {floor(cx + (cell_w - side) / 2), floor(cy + title_h), side, side};
    viz_draw_mask_in(cr, &s, &rect, 8.0);
    if (o->text) {
      viz_set_rgb(cr, VIZ_RGB_TEXT);
      viz_set_font(cr, font, 1);
      viz_text_fit(cr, rect.x + side / 2, cy + 1.15 * font, name, cell_w - 0.4 * font, 0.5);
      viz_set_font(cr, 0.95 * font, 0);
      const fm_tile_counts *k2 = viz_scene_counts(sc);
      snprintf(line, sizeof line, "\xCF\x81 = %.3f", k2->sparsity);
      if (fabs(k2->sparsity - k2->sparsity_exact) > 5e-4) { /* the exact one where there is room */
        char both[380 + 32];
        snprintf(both, sizeof both, "%s  (exact %.3f)", line, k2->sparsity_exact);
        if (viz_text_width(cr, both) <= cell_w - 0.4 * font)
          snprintf(line, sizeof line, "%.*s", (int)sizeof line - 1, both);
      }
      viz_text_fit(cr, rect.x + side / 2, rect.y + side + 1.25 * font, line, cell_w - 0.4 * font, 0.5);
    }
    viz_scene_destroy(sc);
  }
  legend_flow(cr, gallery_legend, GALLERY_LEGEND, margin, h - bottom + 0.6 * font, cw, font, o->text,
              brief, 1);
  gallery_title_fit(cr, o, sample_shown, same_s, same_br, same_bc, cw, font, title, sizeof title);
  viz_title_draw(cr, title, margin, margin + 1.15 * font * 0.95, cw, font, tlines, o->text);
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

enum { MEM_NS = 11, MEM_NSERIES = 4 };

static const struct mem_series {
  const char *name, *brief;
  uint32_t rgb;
  int dashed;
} mem_series[MEM_NSERIES] = {
    {"dense bool mask (Sq \xC3\x97 Sk bytes)", "dense bool", 0xD55E00, 0},
    {"FlexAttention BlockMask (128\xC2\xB2 blocks; kv and q indices, partial and full: 4 int32 per "
     "block pair)", "BlockMask, 128\xC2\xB2", 0x0072B2, 0},
    {"FlashMask intervals, bidir-4 (4 int32 per key + tile bounds)", "FlashMask bidir-4", 0xCC79A7, 1},
    {"FlashMask intervals, causal-1 (1 int32 per key + tile bounds)", "FlashMask causal-1", 0x009E73, 0}};

/* The memory figure's frame: the font, the plot, the title's lines, the
 * log2 ranges and whether the legend takes the brief words. */
typedef struct mem_frame {
  double font, margin;
  viz_rect p;
  int title_lines, brief, legend_cols;
  char title[400];
  int e_lo, e_hi;
  double value[MEM_NSERIES][MEM_NS];
} mem_frame;

static double mem_x(const mem_frame *f, double e) {
  return f->p.x + (e - 9.75) / 10.5 * f->p.w; /* 2^10 .. 2^20 with a quarter step of room */
}
static double mem_y(const mem_frame *f, double e) {
  return f->p.y + f->p.h - (e - (f->e_lo - 0.5)) / ((f->e_hi + 0.5) - (f->e_lo - 0.5)) * f->p.h;
}

/* Width of t at size (measured with glyphs, estimated without). */
static double mem_width(cairo_t *cr, const char *t, double size, int text) {
  viz_set_font(cr, size, 0);
  return text ? viz_text_width(cr, t) : viz_text_estimate(t, size, 0);
}

static fm_status mem_layout(cairo_t *cr, const viz_figure_opts *o, double w, double h, mem_frame *f,
                            fm_err *err) {
  double lo = 1e300, hi = 0;
  for (int k = 0; k < MEM_NS; k++) {
    int64_t s = (int64_t)1 << (10 + k);
    fm_mask_bytes b4, b1;
    fm_mask_bytes_compute(s, s, 1, FM_FORM_BIDIR4, o->bc, &b4);
    fm_mask_bytes_compute(s, s, 1, FM_FORM_CAUSAL1, o->bc, &b1);
    double v[MEM_NSERIES] = {(double)b4.dense, (double)b4.block_mask, (double)b4.intervals,
                             (double)b1.intervals};
    for (int q = 0; q < MEM_NSERIES; q++) {
      f->value[q][k] = v[q];
      lo = fmin(lo, v[q]);
      hi = fmax(hi, v[q]);
    }
  }
  f->e_lo = (int)floor(log2(lo)) / 10 * 10; /* start at a labelled power of 1024 */
  f->e_hi = (int)ceil(log2(hi));
  double font = f->font = fmax(8.0, fmin(22.0, 13.0 * fmin(w / 1000.0, h / 700.0)));
  f->margin = round(1.0 * font);
  if (o->title) snprintf(f->title, sizeof f->title, "%s", o->no_title ? "" : o->title);
  else if (o->no_title) f->title[0] = 0;
  else snprintf(f->title, sizeof f->title, "Mask memory against sequence length  \xC2\xB7  tile bounds at Bc = %d", o->bc);
  double th = viz_title_height(cr, f->title, w - 2 * f->margin, font, 2, o->text, &f->title_lines);
  /* the y labels ("512 GiB") and the rotated axis title to their left */
  double ylab = mem_width(cr, "512 GiB", 0.9 * font, o->text), xlab = mem_width(cr, "1M", 0.9 * font, o->text);
  f->p.x = round(0.5 * f->margin + 1.3 * font + ylab + 0.8 * font);
  f->p.y = th > 0 ? round(f->margin + th + 0.6 * font) : round(f->margin + 0.5 * font);
  f->p.w = w - f->p.x - round(fmax(0.8 * font, xlab / 2 + 0.5 * font));
  /* the legend below the axis title, off the lines: the full words one item a
     row when they fit, else the brief ones two a row (or one a row) */
  double widest = 0, brief = 0, room = w - 2 * f->margin;
  for (int q = 0; q < MEM_NSERIES; q++) {
    widest = fmax(widest, mem_width(cr, mem_series[q].name, 0.9 * font, o->text));
    brief = fmax(brief, mem_width(cr, mem_series[q].brief, 0.9 * font, o->text));
  }
  f->brief = widest + 3.4 * font > room || MEM_NSERIES * 1.4 * font > 0.2 * h;
  f->legend_cols = f->brief && 2 * (brief + 4.0 * font) <= room ? 2 : 1;
  int rows = MEM_NSERIES / f->legend_cols + f->brief; /* brief: a line says what BlockMask counts */
  f->p.h = h - f->p.y - round(3.9 * font + rows * 1.4 * font);
  if (f->p.w < 10 * font || f->p.h < 8 * font)
    return fm_fail(err, FM_EINVAL, "size %gx%g pt (%.2f x %.2f in) is too small for the memory figure",
                   w, h, w / 72, h / 72);
  return FM_OK;
}

static void mem_grid(cairo_t *cr, const mem_frame *f, int text) {
  const viz_rect *p = &f->p;
  double font = f->font;
  char buf[64];
  /* every power of two of bytes faint, every 1024 labelled */
  cairo_set_line_width(cr, 1.0);
  for (int e = f->e_lo; e <= f->e_hi; e++) {
    double y = viz_snap_y(cr, mem_y(f, e));
    cairo_set_source_rgba(cr, 0, 0, 0, e % 5 == 0 ? 0.18 : 0.06);
    cairo_move_to(cr, p->x, y);
    cairo_line_to(cr, p->x + p->w, y);
    cairo_stroke(cr);
    if (e % 5 == 0 && text) {
      format_pow2_bytes(e, buf, sizeof buf);
      viz_set_rgb(cr, VIZ_RGB_TEXT);
      viz_set_font(cr, 0.9 * font, 0);
      viz_text_at(cr, p->x - 0.6 * font, y + 0.33 * font, buf, 1.0);
    }
  }
  for (int k = 0; k < MEM_NS; k++) {
    double x = viz_snap_x(cr, mem_x(f, 10 + k));
    cairo_set_source_rgba(cr, 0, 0, 0, 0.06);
    cairo_move_to(cr, x, p->y);
    cairo_line_to(cr, x, p->y + p->h);
    cairo_stroke(cr);
    viz_set_rgb(cr, 0x444444);
    cairo_move_to(cr, x, p->y + p->h);
    cairo_line_to(cr, x, p->y + p->h + 0.45 * font);
    cairo_stroke(cr);
    /* every other length when the labels would touch */
    if (text && (k % 2 == 0 || p->w / 10.5 > 2.6 * font)) {
      viz_format_tokens((int64_t)1 << (10 + k), 1, buf, sizeof buf);
      viz_set_font(cr, 0.9 * font, 0);
      viz_text_at(cr, x, p->y + p->h + 1.55 * font, buf, 0.5);
    }
  }
  viz_set_rgb(cr, 0x444444);
  cairo_rectangle(cr, viz_snap_x(cr, p->x), viz_snap_y(cr, p->y), round(p->w), round(p->h));
  cairo_stroke(cr);
}

static void mem_line_style(cairo_t *cr, int q, double font) {
  viz_set_rgb(cr, mem_series[q].rgb);
  cairo_set_line_width(cr, 0.2 * font);
  double d[2] = {0.7 * font, 0.45 * font};
  cairo_set_dash(cr, d, mem_series[q].dashed ? 2 : 0, 0);
}

static void mem_lines(cairo_t *cr, const mem_frame *f) {
  for (int q = 0; q < MEM_NSERIES; q++) {
    cairo_save(cr);
    cairo_rectangle(cr, f->p.x, f->p.y, f->p.w, f->p.h);
    cairo_clip(cr);
    mem_line_style(cr, q, f->font);
    for (int k = 0; k < MEM_NS; k++) {
      double x = mem_x(f, 10 + k), y = mem_y(f, log2(f->value[q][k]));
      if (k == 0) cairo_move_to(cr, x, y);
      else cairo_line_to(cr, x, y);
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    for (int k = 0; k < MEM_NS; k++) {
      marker(cr, q, mem_x(f, 10 + k), mem_y(f, log2(f->value[q][k])), 0.32 * f->font);
      cairo_fill(cr);
    }
    cairo_restore(cr);
  }
}

/* The legend below the plot and its axis title, in f->legend_cols columns. */
static void mem_legend(cairo_t *cr, const mem_frame *f, double w, int text) {
  double font = f->font, lh = 1.4 * font, top = f->p.y + f->p.h + 3.9 * font;
  double colw = (w - 2 * f->margin) / f->legend_cols;
  for (int q = 0; q < MEM_NSERIES; q++) {
    double lx = f->margin + (q % f->legend_cols) * colw, y = top + (q / f->legend_cols) * lh;
    mem_line_style(cr, q, font);
    cairo_move_to(cr, lx, y);
    cairo_line_to(cr, lx + 2.6 * font, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    marker(cr, q, lx + 1.3 * font, y, 0.32 * font);
    cairo_fill(cr);
    viz_ink_mark(cr, lx, y - 0.4 * font, 2.6 * font, 0.8 * font);
    if (text) {
      viz_set_rgb(cr, VIZ_RGB_TEXT);
      viz_set_font(cr, 0.9 * font, 0);
      viz_text_fit(cr, lx + 3.4 * font, y + 0.33 * font, f->brief ? mem_series[q].brief : mem_series[q].name,
                   colw - 3.8 * font, 0);
    }
  }
  if (text && f->brief) {
    viz_set_rgb(cr, VIZ_RGB_TEXT);
    viz_set_font(cr, 0.8 * font, 0);
    viz_text_fit(cr, f->margin, top + (MEM_NSERIES / f->legend_cols) * lh + 0.2 * font,
                 "BlockMask: 4 int32 per block pair (kv and q indices, partial and full)",
                 w - 2 * f->margin, 0);
  }
}

static fm_status draw_memory(cairo_t *cr, double w, double h, void *ctx, fm_err *err) {
  const viz_figure_opts *o = ctx;
  mem_frame f;
  fm_status st = mem_layout(cr, o, w, h, &f, err);
  if (st != FM_OK) return st;
  const viz_rect *p = &f.p;
  double font = f.font;
  viz_set_rgb(cr, VIZ_RGB_BACKGROUND);
  cairo_paint(cr);
  mem_grid(cr, &f, o->text);
  mem_lines(cr, &f);
  mem_legend(cr, &f, w, o->text);
  if (!o->text) return FM_OK;
  viz_set_rgb(cr, VIZ_RGB_TEXT);
  viz_set_font(cr, 0.95 * font, 0);
  const char *xt = "sequence length S = Sq = Sk (tokens, log scale)";
  if (viz_text_width(cr, xt) > p->w) xt = "S = Sq = Sk (tokens, log scale)";
  /* centred: as wide as the room on the nearer side allows */
  viz_text_fit(cr, p->x + p->w / 2, p->y + p->h + 2.95 * font, xt,
               p->w + 2 * fmin(p->x, w - p->x - p->w) - f.margin, 0.5);
  const char *yt = "bytes for one mask (log scale)";
  if (viz_text_width(cr, yt) > p->h) yt = "bytes (log scale)";
  cairo_save(cr);
  cairo_translate(cr, round(0.5 * f.margin + 0.95 * font), p->y + p->h / 2);
  cairo_rotate(cr, -M_PI / 2);
  viz_text_fit(cr, 0, 0, yt, p->h + 2 * fmin(p->y, h - p->y - p->h) - f.margin, 0.5);
  cairo_restore(cr);
  viz_title_draw(cr, f.title, f.margin, f.margin + 1.15 * font * 0.95, w - 2 * f.margin, font, f.title_lines, 1);
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
  st.no_title = o->no_title;
  if (o->title) snprintf(st.title, sizeof st.title, "%s", o->title);
  if (vs == FM_OK) {
    st.scene = scene;
    vs = viz_scene_sync(scene, &st, err);
  }
  if (vs == FM_OK) viz_draw(cr, &st, w, h);
  viz_scene_destroy(scene);
  return vs;
}

/* ---- one chunk of the chunkwise linear RNN (core/fm_linrnn_cpu.h) ------------------ */

/* The chunk drawn: its classes (n, n) and cycles (or NULL) of head 0, its
 * documents as the mask's LTS (document ends), the rows with a carried state
 * and the first row of a state handed on. From a linrnn trace (opts.trace)
 * or, without one, from the CPU's classes of a built-in example. */
typedef struct lr_view {
  fm_lr_trace t;
  fm_colmask *m;
  uint8_t *own_cls; /* the example's classes */
  int32_t n, carried;
  int64_t a, b, state_from;
  const uint8_t *cls;
  const int64_t *cyc;
  int64_t cyc_max;
} lr_view;

/* Documents of 40, 13, 30, 70 and 103 tokens in chunks of 128, sub-chunks of
 * 16: three boundaries inside chunk 0 and a state that crosses into chunk 1. */
static const int32_t lr_example_cu[] = {0, 40, 53, 83, 153, 256};

static fm_status lr_view_open(const viz_figure_opts *o, lr_view *v, fm_err *err) {
  memset(v, 0, sizeof *v);
  fm_status st = FM_OK;
  if (o->trace) {
    st = fm_lr_trace_load(o->trace, &v->t, err);
  } else {
    v->t = (fm_lr_trace){.device = "cpu", .variant = "skip", .tokens = 256, .chunk = 128, .sub = 16,
                         .nchunks = 2, .ndocs = 5, .record_heads = 1, .shown_chunk = 0,
                         .cu_seqlens = (int32_t *)lr_example_cu};
    snprintf(v->t.docs_source, sizeof v->t.docs_source, "documents of 40, 13, 30, 70 and 103 tokens");
  }
  if (st == FM_OK) st = fm_lr_docs_colmask(v->t.cu_seqlens, v->t.ndocs, &v->m, err);
  v->n = v->t.chunk / (v->t.sub > 0 ? v->t.sub : 1);
  if (st == FM_OK && !o->trace) {
    if (!(v->own_cls = malloc((size_t)fm_lr_class_len(v->t.tokens, v->t.chunk, v->t.sub))))
      st = fm_fail(err, FM_ENOMEM, "cannot allocate the example's classes");
    else st = fm_lr_classify(v->m, v->t.chunk, v->t.sub, v->own_cls, err);
    v->t.tile_class = v->own_cls;
  }
  if (st != FM_OK) return st;
  const int64_t per = (int64_t)v->n * v->n, k = v->t.shown_chunk;
  v->cls = v->t.tile_class + k * per;
  v->cyc = v->t.tile_cycles ? v->t.tile_cycles + k * per : NULL;
  for (int64_t i = 0; v->cyc && i < per; i++) v->cyc_max = v->cyc[i] > v->cyc_max ? v->cyc[i] : v->cyc_max;
  v->a = k * v->t.chunk;
  v->b = v->a + v->t.chunk < v->t.tokens ? v->a + v->t.chunk : v->t.tokens;
  fm_lr_chunk_rows(v->m, v->t.chunk, v->t.sub, (int32_t)k, &v->carried, &v->state_from);
  return FM_OK;
}

static void lr_view_close(lr_view *v, int from_trace) {
  fm_colmask_destroy(v->m);
  free(v->own_cls);
  if (from_trace) fm_lr_trace_free(&v->t);
}

static void lr_title(const viz_figure_opts *o, const lr_view *v, char *buf, size_t cap) {
  if (o->title || o->no_title) {
    snprintf(buf, cap, "%s", o->no_title ? "" : o->title);
    return;
  }
  snprintf(buf, cap, "Chunk %d of %lld packed tokens: %d \xC3\x97 %d sub-tiles of %d tokens%s%s%s",
           v->t.shown_chunk, (long long)v->t.tokens, v->n, v->n, v->t.sub,
           v->cyc ? ", clock64 cycles on " : " by class (", v->cyc ? v->t.device : v->t.device,
           v->cyc ? "" : ")");
}

static const legend_item lr_legend[] = {
    {VIZ_RGB_MASKED, 0, "masked sub-tile (skipped)", "masked"},
    {VIZ_RGB_PARTIAL, 0, "partial (element mask; with cycles: the corner)", "partial"},
    {VIZ_RGB_VISIBLE, 0, "unmasked", "unmasked"},
    {0x009E73, 0, "rows with the carried state (q S)", "q S live"},
    {0xCC79A7, 0, "rows of the state handed on", "state rows"}};
static const legend_item lr_legend_cycles = {0, 3, "visited tile: cycles (viridis)", "cycles"};

/* Fill of tile (bi, bj): its class, or its cycles when the record has them. */
static uint32_t lr_fill(const lr_view *v, int32_t bi, int32_t bj) {
  int cls = v->cls[bi * v->n + bj];
  if (cls == FM_TILE_MASKED) return VIZ_RGB_MASKED;
  if (v->cyc && v->cyc_max > 0) return viz_viridis((double)v->cyc[bi * v->n + bj] / (double)v->cyc_max);
  return cls == FM_TILE_PARTIAL ? VIZ_RGB_PARTIAL : VIZ_RGB_VISIBLE;
}

/* The tiles, the visible pairs (one run of keys per row), the grid, the
 * document boundaries, and the two strips left (q S) and right (state). */
static void lr_grid(cairo_t *cr, const lr_view *v, const viz_rect *p, double font) {
  const double cell = p->w / v->n, el = p->w / v->t.chunk;
  const int32_t *lts = fm_colmask_cvec(v->m, 0, FM_LTS);
  for (int32_t bi = 0; bi < v->n; bi++)
    for (int32_t bj = 0; bj < v->n; bj++) {
      viz_set_rgb(cr, lr_fill(v, bi, bj));
      cairo_rectangle(cr, p->x + bj * cell, p->y + bi * cell, cell, cell);
      cairo_fill(cr);
      if (v->cyc && v->cls[bi * v->n + bj] == FM_TILE_PARTIAL) { /* the class beside the cycles */
        viz_set_rgb(cr, VIZ_RGB_PARTIAL);
        cairo_rectangle(cr, p->x + (bj + 0.72) * cell, p->y + bi * cell, 0.28 * cell, 0.28 * cell);
        cairo_fill(cr);
      }
    }
  cairo_set_source_rgba(cr, 0, 0, 0, 0.28);
  for (int64_t t = v->a, s0 = v->a; t < v->b; t++) {
    if (t > v->a && lts[t - 1] == t) s0 = t; /* a document starts at t */
    cairo_rectangle(cr, p->x + (double)(s0 - v->a) * el, p->y + (double)(t - v->a) * el,
                    (double)(t + 1 - s0) * el, el);
  }
  cairo_fill(cr);
  cairo_set_line_width(cr, fmax(0.5, 0.06 * font));
  viz_set_rgb(cr, 0xFFFFFF);
  for (int32_t k = 1; k < v->n; k++) {
    cairo_move_to(cr, p->x + k * cell, p->y);
    cairo_line_to(cr, p->x + k * cell, p->y + p->h);
    cairo_move_to(cr, p->x, p->y + k * cell);
    cairo_line_to(cr, p->x + p->w, p->y + k * cell);
  }
  cairo_stroke(cr);
  /* each document's block: its visible pairs are the lower triangle */
  viz_set_rgb(cr, VIZ_RGB_TEXT);
  cairo_set_line_width(cr, fmax(0.6, 0.08 * font));
  for (int64_t s0 = v->a; s0 < v->b; s0 = lts[s0] < v->b ? lts[s0] : v->b) {
    int64_t e = lts[s0] < v->b ? lts[s0] : v->b, first = s0;
    while (first > v->a && lts[first - 1] == lts[s0]) first--; /* s0 is a, or a document start */
    double x0 = p->x + (double)(first - v->a) * el, x1 = p->x + (double)(e - v->a) * el;
    cairo_rectangle(cr, x0, x0 - p->x + p->y, x1 - x0, x1 - x0);
  }
  cairo_stroke(cr);
  const double sw = 0.7 * font;
  for (int32_t bi = 0; bi < v->n; bi++) {
    viz_set_rgb(cr, fm_lr_inter_live(FM_LR_SKIP, bi, v->t.sub, v->carried) ? 0x009E73 : VIZ_RGB_MASKED);
    cairo_rectangle(cr, p->x - 1.3 * sw, p->y + bi * cell + 0.5, sw, cell - 1);
    cairo_fill(cr);
  }
  if (v->state_from < v->b) {
    viz_set_rgb(cr, 0xCC79A7);
    cairo_rectangle(cr, p->x + p->w + 0.3 * sw, p->y + (double)(v->state_from - v->a) * el, sw,
                    (double)(v->b - v->state_from) * el);
    cairo_fill(cr);
  }
  viz_set_rgb(cr, 0x444444);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, p->x, p->y, p->w, p->h);
  cairo_stroke(cr);
}

/* Token labels every `step` sub-chunks along both axes, and the axis titles. */
static void lr_axes(cairo_t *cr, const lr_view *v, const viz_rect *p, double font) {
  const double cell = p->w / v->n;
  char buf[32];
  viz_set_font(cr, 0.85 * font, 0);
  snprintf(buf, sizeof buf, "%lld", (long long)v->b);
  double lw = viz_text_width(cr, buf) + 0.6 * font;
  int32_t step = 1;
  while (step < v->n && step * cell < lw) step *= 2;
  viz_set_rgb(cr, VIZ_RGB_TEXT);
  for (int32_t k = 0; k <= v->n; k += step) {
    snprintf(buf, sizeof buf, "%lld", (long long)(v->a + (int64_t)k * v->t.sub));
    viz_text_at(cr, p->x + k * cell, p->y + p->h + 1.25 * font, buf, 0.5);
    viz_text_at(cr, p->x - 1.3 * 0.7 * font - 0.4 * font, p->y + k * cell + 0.3 * font, buf, 1.0);
  }
  viz_set_font(cr, 0.9 * font, 0);
  viz_text_fit(cr, p->x + p->w / 2, p->y + p->h + 2.6 * font, "keys s (tokens)", p->w, 0.5);
  cairo_save(cr);
  cairo_translate(cr, p->x - 1.3 * 0.7 * font - 0.6 * font - lw, p->y + p->h / 2);
  cairo_rotate(cr, -M_PI / 2);
  viz_text_fit(cr, 0, 0, "rows t (tokens)", p->h, 0.5);
  cairo_restore(cr);
}

/* One line of numbers: the sub-tiles skip and causal visit, the live q S
 * blocks, the state rows handed on. */
static void lr_stats(cairo_t *cr, const lr_view *v, double x, double y, double maxw, double font) {
  int32_t real = (int32_t)((v->b - v->a + v->t.sub - 1) / v->t.sub), skip = 0, live = 0;
  for (int32_t bi = 0; bi < real; bi++) {
    live += fm_lr_inter_live(FM_LR_SKIP, bi, v->t.sub, v->carried);
    for (int32_t bj = 0; bj < real; bj++) skip += fm_lr_tile_visited(FM_LR_SKIP, v->cls[bi * v->n + bj], bi, bj);
  }
  char line[200];
  char most[48] = "";
  if (v->cyc) snprintf(most, sizeof most, "  \xC2\xB7  at most %lld cycles", (long long)v->cyc_max);
  snprintf(line, sizeof line, "skip visits %d of %d sub-tiles (causal: %d)  \xC2\xB7  q S in %d of %d row "
           "blocks  \xC2\xB7  state: %lld rows%s", skip, real * real, real * (real + 1) / 2, live, real,
           (long long)(v->b - v->state_from), most);
  viz_set_rgb(cr, VIZ_RGB_TEXT);
  viz_set_font(cr, 0.85 * font, 0);
  if (viz_text_width(cr, line) > maxw) /* the numbers whole, fewer words */
    snprintf(line, sizeof line, "skip %d/%d tiles (causal %d)  \xC2\xB7  q S %d/%d  \xC2\xB7  state %lld rows%s",
             skip, real * real, real * (real + 1) / 2, live, real, (long long)(v->b - v->state_from),
             v->cyc ? "  \xC2\xB7  cycles" : "");
  viz_text_fit(cr, x, y, line, maxw, 0);
}

static fm_status draw_linrnn_chunk(cairo_t *cr, double w, double h, void *ctx, fm_err *err) {
  const viz_figure_opts *o = ctx;
  lr_view v;
  fm_status st = lr_view_open(o, &v, err);
  if (st != FM_OK) {
    lr_view_close(&v, o->trace != NULL);
    return st;
  }
  double font = fmax(8.0, fmin(22.0, 13.0 * fmin(w / 900.0, h / 700.0))), margin = round(font);
  char title[400], label[32];
  lr_title(o, &v, title, sizeof title);
  int tlines, brief;
  double th = viz_title_height(cr, title, w - 2 * margin, font, 2, o->text, &tlines);
  legend_item items[6];
  int ni = 0;
  for (int i = 0; i < 5; i++)
    if (i != 2 || !v.cyc) items[ni++] = lr_legend[i]; /* with cycles, partial tiles get a corner mark */
  if (v.cyc) items[ni++] = lr_legend_cycles;
  int lrows = legend_rows(cr, items, ni, w - 2 * margin, font, o->text, &brief);
  double top = th > 0 ? round(margin + th + 0.5 * font) : margin, bottom = lrows * 1.5 * font + 5.3 * font;
  viz_set_font(cr, 0.85 * font, 0);
  snprintf(label, sizeof label, "%lld", (long long)v.b);
  double left = margin + 1.2 * font + (o->text ? viz_text_width(cr, label) : viz_text_estimate(label, 0.85 * font, 0)) +
                2.0 * font;
  double side = floor(fmin(w - left - margin - 1.5 * font, h - top - bottom));
  if (side < 4 * v.n) {
    lr_view_close(&v, o->trace != NULL);
    return fm_fail(err, FM_EINVAL, "size %gx%g pt (%.2f x %.2f in) is too small for a chunk of %d x %d sub-tiles",
                   w, h, w / 72, h / 72, v.n, v.n);
  }
  viz_rect p = {round(left + (w - left - margin - 1.5 * font - side) / 2), top, side, side};
  viz_set_rgb(cr, VIZ_RGB_BACKGROUND);
  cairo_paint(cr);
  lr_grid(cr, &v, &p, font);
  if (o->text) lr_axes(cr, &v, &p, font);
  if (o->text) lr_stats(cr, &v, margin, p.y + p.h + 4.0 * font, w - 2 * margin, font);
  legend_flow(cr, items, ni, margin, p.y + p.h + 4.7 * font, w - 2 * margin, font, o->text, brief, 1);
  viz_title_draw(cr, title, margin, margin + 1.15 * font * 0.95, w - 2 * margin, font, tlines, o->text);
  lr_view_close(&v, o->trace != NULL);
  return FM_OK;
}

/* ---- the registry ---------------------------------------------------------------- */

static const viz_figure figures[] = {
    {.name = "gallery",
     .summary = "masks as small multiples (tiles over the mask, rho): the twelve families, or a "
                "scenario's own masks",
     .width = 1600, .height = 1350, .width_in = 7.0, .height_in = 6.0, .draw = draw_gallery,
     .per_case = 0},
    {.name = "memory",
     .summary = "mask memory vs S, 1K..1M, log-log: dense, FlexAttention block mask, FlashMask "
                "intervals (from fm_memory.h)",
     .width = 1000, .height = 650, .width_in = 3.3, .height_in = 2.5, .draw = draw_memory,
     .per_case = 0},
    {.name = "tiles",
     .summary = "one mask or trace as the viewer draws it: the mask, its tile classes, axes, "
                "legend and numbers (also the viewer's window size)",
     .width = 1200, .height = 800, .width_in = 3.3, .height_in = 2.8, .draw = draw_tiles,
     .per_case = 1},
    {.name = "linrnn_chunk",
     .summary = "one chunk of a chunkwise linear RNN over packed documents: its sub-tiles by class "
                "(or clock64 cycles), visible pairs, boundaries, carried and handed-on states (a "
                "linrnn trace, or a built-in example)",
     .width = 700, .height = 760, .width_in = 3.3, .height_in = 3.6, .draw = draw_linrnn_chunk,
     .per_case = 0, .takes_trace = 1},
    {.name = "cp-plan",
     .summary = "a context-parallel plan (fmsim cp-plan -o): per sharding the tile grid coloured by "
                "owner and the ranks' work as bars; default causal_document on 4 ranks",
     .width = 1000, .height = 700, .width_in = 3.3, .height_in = 2.5, .draw = viz_draw_cp_plan,
     .per_case = 0},
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
