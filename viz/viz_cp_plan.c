/* viz_cp_plan.c — the cp-plan figure (a row of the figure registry,
 * viz_figures.c): for each sharding of a context-parallel plan
 * (core/fm_cp_plan.h), the forward tile grid with every query row in its
 * owner's colour (lighter where fewer of a cell's tiles are visited, grey
 * where all are masked), and below it the ranks' work as bars (predicted
 * forward + backward time with a GPU profile, else visited forward tiles)
 * on one scale for every sharding, the mean dashed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_cp_plan.h"
#include "fm_families.h"
#include "fm_samples.h"
#include "viz_internal.h"

/* Okabe-Ito's colours (grey and black left out: grey is "masked"), then a
 * brown; rank r takes colour r mod 8. */
#define CP_NCOLOURS 8
static const uint32_t rank_rgb[CP_NCOLOURS] = {0x0072B2, 0xE69F00, 0x009E73, 0xCC79A7,
                                               0x56B4E9, 0xD55E00, 0xF0E442, 0x8C564B};

/* The default plan: causal_document at o->seqlen on 4 ranks, no profile. */
static fm_status default_plan(const viz_figure_opts *o, fm_cp_plan **out, fm_err *err) {
  fm_sample_set samples;
  fm_status st = o->samples_path ? fm_samples_load(o->samples_path, &samples, err)
                                 : fm_samples_builtin(&samples, err);
  if (st != FM_OK) return st;
  fm_family_request req = {.family = "causal_document", .seqlen = o->seqlen > 0 ? o->seqlen : 8192,
                           .batch = 1, .heads = 1, .seed = o->seed, .sample = o->sample,
                           .samples = &samples};
  fm_colmask *m = NULL;
  st = fm_family_build(&req, &m, NULL, err);
  fm_samples_free(&samples);
  /* chunks of 2048 rows, fewer below 8K tokens so that every rank gets one */
  int64_t quarter = req.seqlen / 4 / 128 * 128;
  fm_cp_options co = {.ranks = 4, .chunk = req.seqlen >= 8192 ? 0 : (int32_t)(quarter > 128 ? quarter : 128)};
  if (st == FM_OK) st = fm_cp_plan_create(m, &co, out, err);
  fm_colmask_destroy(m);
  return st;
}

/* The frame: font, where the columns go, the bars' scale. */
typedef struct cp_frame {
  double font, margin;
  const fm_cp_sharding_plan *sp[FM_CP_NSHARDINGS];
  int n;                 /* shardings drawn */
  int times;             /* bars are predicted times */
  double vmax;           /* the bars' scale: the largest value of any rank */
  char title[400];
  int title_lines;
  double top;            /* below the title */
  double col_w, side, head_h, bars_h, legend_y;
  int legend_rows, legend_brief; /* brief: the ranks' colours as one strip */
} cp_frame;

static double rank_value(const cp_frame *f, const fm_cp_rank *rk) {
  return f->times ? rk->compute_ms : (double)rk->work;
}

/* The legend: each rank's colour (brief: one strip of them), masked, the
 * mean, and what the bars are (words only). */
enum { LG_RANK, LG_STRIP, LG_MASKED, LG_MEAN, LG_BARS };

static int legend_items(const fm_cp_summary *s, int brief, int *kinds, int *arg) {
  int n = 0, nr = s->ranks < CP_NCOLOURS ? s->ranks : CP_NCOLOURS;
  for (int r = 0; r < (brief ? 1 : nr); r++) {
    kinds[n] = brief ? LG_STRIP : LG_RANK;
    arg[n++] = r;
  }
  kinds[n++] = LG_MASKED;
  kinds[n++] = LG_MEAN;
  kinds[n++] = LG_BARS;
  return n;
}

static void legend_text(const fm_cp_summary *s, int kind, int r, char *buf, size_t cap) {
  int nr = s->ranks < CP_NCOLOURS ? s->ranks : CP_NCOLOURS;
  switch (kind) {
  case LG_RANK:
    if (s->ranks > CP_NCOLOURS) snprintf(buf, cap, "ranks %d, %d, \xE2\x80\xA6", r, r + CP_NCOLOURS);
    else snprintf(buf, cap, "rank %d", r);
    break;
  case LG_STRIP:
    if (s->ranks > CP_NCOLOURS) snprintf(buf, cap, "rank r: colour r mod %d", CP_NCOLOURS);
    else snprintf(buf, cap, "ranks 0\xE2\x80\x93%d", nr - 1);
    break;
  case LG_MASKED: snprintf(buf, cap, "masked"); break;
  case LG_MEAN: snprintf(buf, cap, "mean"); break;
  default: snprintf(buf, cap, "bars: %s", s->have_times ? "forward + backward ms" : "visited tiles");
  }
}

/* A legend mark of one kind at (x, y), size sz x sz (1.6 sz wide; a strip is
 * as wide as its colours need). Returns its width. */
static double legend_mark(cairo_t *cr, const fm_cp_summary *s, int kind, int r, double x, double y,
                          double sz, double font, int draw) {
  int nr = s->ranks < CP_NCOLOURS ? s->ranks : CP_NCOLOURS;
  if (kind == LG_BARS) return 0;
  if (kind == LG_STRIP) {
    double cw = 0.55 * sz;
    if (draw) {
      viz_ink_mark(cr, x, y, nr * cw, sz);
      for (int q = 0; q < nr; q++) {
        viz_set_rgb(cr, rank_rgb[q]);
        cairo_rectangle(cr, x + q * cw, y, cw, sz);
        cairo_fill(cr);
      }
    }
    return nr * cw;
  }
  if (draw && kind == LG_MEAN) { /* a dashed line */
    viz_ink_mark(cr, x, y, 1.6 * sz, sz);
    double d[2] = {0.3 * font, 0.2 * font};
    cairo_set_dash(cr, d, 2, 0);
    cairo_set_line_width(cr, 0.12 * font);
    viz_set_rgb(cr, VIZ_RGB_TEXT);
    cairo_move_to(cr, x, y + sz / 2);
    cairo_line_to(cr, x + 1.6 * sz, y + sz / 2);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
  } else if (draw) {
    viz_swatch(cr, x, y, sz, kind == LG_RANK ? rank_rgb[r] : VIZ_RGB_MASKED, 0);
  }
  return 1.6 * sz;
}

/* Lays out (draw 0) or draws the legend in rows of width w from (x, y);
 * returns its rows. */
static int legend_flow(cairo_t *cr, const fm_cp_summary *s, int brief, double x, double y, double w,
                       double font, int text, int draw) {
  double sz = 0.95 * font, cx = 0;
  int rows = 1, kinds[CP_NCOLOURS + 3], arg[CP_NCOLOURS + 3];
  int n = legend_items(s, brief, kinds, arg);
  char t[64];
  for (int i = 0; i < n; i++) {
    legend_text(s, kinds[i], arg[i], t, sizeof t);
    viz_set_font(cr, 0.9 * font, 0);
    double mw = legend_mark(cr, s, kinds[i], arg[i], 0, 0, sz, font, 0), pad = mw > 0 ? mw + 0.6 * sz : 0;
    double tw = text ? viz_text_width(cr, t) : viz_text_estimate(t, 0.9 * font, 0);
    double iw = fmin(pad + tw, w);
    if (cx > 0 && cx + iw > w) {
      rows++;
      cx = 0;
    }
    if (draw) {
      double ix = x + cx, iy = y + (rows - 1) * 1.5 * font;
      legend_mark(cr, s, kinds[i], arg[i], ix, iy, sz, font, 1);
      if (text) {
        viz_set_rgb(cr, VIZ_RGB_TEXT);
        viz_set_font(cr, 0.9 * font, 0);
        viz_text_fit(cr, ix + pad, iy + 0.82 * font, t, iw - pad, 0);
      }
    }
    cx += iw + 1.2 * font;
  }
  return rows;
}

static void default_title(const viz_figure_opts *o, const fm_cp_summary *s, char *buf, size_t cap) {
  char tok[32];
  viz_format_tokens(s->seqlen, 1, tok, sizeof tok);
  if (o->cp_plan)
    snprintf(buf, cap, "Context parallelism on %d ranks  \xC2\xB7  S = %s", s->ranks, tok);
  else
    snprintf(buf, cap, "Context parallelism: causal_document on %d ranks  \xC2\xB7  S = %s", s->ranks, tok);
}

static fm_status cp_layout(cairo_t *cr, const viz_figure_opts *o, const fm_cp_plan *plan, double w,
                           double h, cp_frame *f, fm_err *err) {
  const fm_cp_summary *s = fm_cp_plan_summary(plan);
  memset(f, 0, sizeof *f);
  f->font = fmax(8.0, fmin(22.0, 13.0 * fmin(w / 1000.0, h / 700.0)));
  f->margin = round(f->font);
  f->times = s->have_times;
  for (int k = 0; k < FM_CP_NSHARDINGS; k++) {
    const fm_cp_sharding_plan *sp = fm_cp_plan_sharding(plan, (fm_cp_sharding)k);
    if (!sp) continue;
    f->sp[f->n++] = sp;
    for (int32_t r = 0; r < s->ranks; r++) f->vmax = fmax(f->vmax, rank_value(f, &sp->ranks[r]));
  }
  if (o->title) snprintf(f->title, sizeof f->title, "%s", o->no_title ? "" : o->title);
  else if (o->no_title) f->title[0] = 0;
  else default_title(o, s, f->title, sizeof f->title);
  double cw = w - 2 * f->margin, font = f->font;
  double th = viz_title_height(cr, f->title, cw, font, 2, o->text, &f->title_lines);
  f->top = th > 0 ? round(f->margin + th + 0.4 * font) : f->margin;
  f->legend_rows = legend_flow(cr, s, 0, 0, 0, cw, font, o->text, 0);
  if (f->legend_rows > 2) {
    f->legend_brief = 1;
    f->legend_rows = legend_flow(cr, s, 1, 0, 0, cw, font, o->text, 0);
  }
  f->legend_y = h - f->margin - f->legend_rows * 1.5 * font + 0.4 * font;
  f->col_w = f->n ? cw / f->n : cw;
  f->head_h = 2.6 * font;
  double room = f->legend_y - 0.6 * font - f->top - f->head_h - 1.6 * font; /* 1.6: the line under the bars */
  f->side = floor(fmin(f->col_w - font, 0.62 * room));
  f->bars_h = room - f->side - 0.6 * font;
  if (f->n == 0 || f->side < 12 || f->bars_h < 2 * font)
    return fm_fail(err, FM_EINVAL, "size %gx%g pt (%.2f x %.2f in) is too small for the cp-plan figure",
                   w, h, w / 72, h / 72);
  return FM_OK;
}

/* The tile grid of one sharding: each pixel row in its owner's colour,
 * lighter where the work map has fewer visited tiles, grey where none. */
static void draw_grid(cairo_t *cr, const fm_cp_plan *plan, const fm_cp_sharding_plan *sp,
                      const viz_rect *r) {
  const fm_cp_summary *s = fm_cp_plan_summary(plan);
  const float *map = fm_cp_plan_work_map(plan);
  double dx = 1, dy = 0;
  cairo_user_to_device_distance(cr, &dx, &dy);
  double scale = cairo_surface_get_type(cairo_get_target(cr)) == CAIRO_SURFACE_TYPE_IMAGE ? hypot(dx, dy) : 4;
  int n = (int)fmin(2048, fmax(8, round(r->w * scale)));
  cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, n, n);
  unsigned char *px = cairo_image_surface_get_data(img);
  if (!px) {
    cairo_surface_destroy(img);
    return;
  }
  int stride = cairo_image_surface_get_stride(img);
  int32_t tr = (s->seqlen + s->br[0] - 1) / s->br[0], tc = (s->seqlen + s->bc[0] - 1) / s->bc[0];
  for (int y = 0; y < n; y++) {
    int32_t i = (int32_t)(((int64_t)y * 2 + 1) * s->seqlen / (2 * (int64_t)n));
    uint32_t c = rank_rgb[fm_cp_owner(sp, i) % CP_NCOLOURS];
    int32_t cr_ = (int32_t)((int64_t)(i / s->br[0]) * s->map_rows / tr);
    uint32_t *row = (uint32_t *)(px + (size_t)y * stride);
    for (int x = 0; x < n; x++) {
      int32_t j = (int32_t)(((int64_t)x * 2 + 1) * s->seqlen / (2 * (int64_t)n));
      int32_t cc = (int32_t)((int64_t)(j / s->bc[0]) * s->map_cols / tc);
      double a = map[(int64_t)cr_ * s->map_cols + cc];
      if (a <= 0) {
        row[x] = VIZ_RGB_MASKED;
        continue;
      }
      a = 0.3 + 0.7 * a;
      uint32_t out = 0;
      for (int sh = 0; sh <= 16; sh += 8)
        out |= (uint32_t)lround(255 * (1 - a) + ((c >> sh) & 255) * a) << sh;
      row[x] = out;
    }
  }
  cairo_surface_mark_dirty(img);
  cairo_save(cr);
  cairo_rectangle(cr, r->x, r->y, r->w, r->h);
  cairo_clip(cr);
  cairo_translate(cr, r->x, r->y);
  cairo_scale(cr, r->w / n, r->h / n);
  cairo_set_source_surface(cr, img, 0, 0);
  cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
  cairo_paint(cr);
  cairo_restore(cr);
  cairo_surface_destroy(img);
  cairo_set_line_width(cr, 1.0 / hypot(dx, dy));
  viz_set_rgb(cr, 0x444444);
  cairo_rectangle(cr, viz_snap_x(cr, r->x), viz_snap_y(cr, r->y), round(r->w), round(r->h));
  cairo_stroke(cr);
}

/* The ranks' bars of one sharding in r, the mean dashed across. */
static void draw_bars(cairo_t *cr, const cp_frame *f, const fm_cp_sharding_plan *sp, int32_t ranks,
                      const viz_rect *r) {
  double bw = r->w / ranks, gap = bw > 6 ? 0.15 * bw : 0, sum = 0;
  for (int32_t q = 0; q < ranks; q++) {
    double v = rank_value(f, &sp->ranks[q]), bh = f->vmax > 0 ? r->h * v / f->vmax : 0;
    sum += v;
    viz_set_rgb(cr, rank_rgb[q % CP_NCOLOURS]);
    cairo_rectangle(cr, r->x + q * bw + gap / 2, r->y + r->h - bh, bw - gap, bh);
    cairo_fill(cr);
  }
  viz_set_rgb(cr, 0x444444);
  cairo_set_line_width(cr, 0.08 * f->font);
  cairo_move_to(cr, r->x, r->y + r->h);
  cairo_line_to(cr, r->x + r->w, r->y + r->h);
  cairo_stroke(cr);
  if (f->vmax > 0) {
    double y = r->y + r->h - r->h * (sum / ranks) / f->vmax, d[2] = {0.3 * f->font, 0.2 * f->font};
    viz_set_rgb(cr, VIZ_RGB_TEXT);
    cairo_set_dash(cr, d, 2, 0);
    cairo_set_line_width(cr, 0.12 * f->font);
    cairo_move_to(cr, r->x, y);
    cairo_line_to(cr, r->x + r->w, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
  }
}

/* The column of one sharding: its name and imbalance, the grid, the bars
 * and the slowest rank's value under them. */
static void draw_column(cairo_t *cr, const viz_figure_opts *o, const fm_cp_plan *plan, const cp_frame *f,
                        int k) {
  const fm_cp_sharding_plan *sp = f->sp[k];
  const fm_cp_summary *s = fm_cp_plan_summary(plan);
  double font = f->font, x0 = f->margin + k * f->col_w, cx = x0 + f->col_w / 2, maxw = f->col_w - font;
  viz_rect grid = {round(cx - f->side / 2), round(f->top + f->head_h), f->side, f->side};
  draw_grid(cr, plan, sp, &grid);
  viz_rect bars = {grid.x, grid.y + grid.h + 0.6 * font, grid.w, f->bars_h};
  draw_bars(cr, f, sp, s->ranks, &bars);
  if (!o->text) return;
  char line[160];
  viz_set_rgb(cr, VIZ_RGB_TEXT);
  viz_set_font(cr, font, 1);
  viz_text_fit(cr, cx, f->top + 1.0 * font, fm_cp_sharding_name(sp->sharding), maxw, 0.5);
  viz_set_font(cr, 0.9 * font, 0);
  snprintf(line, sizeof line, "max/mean %.2f", f->times ? sp->imbalance_time : sp->imbalance_work);
  viz_text_fit(cr, cx, f->top + 2.15 * font, line, maxw, 0.5);
  double most = 0;
  for (int32_t r = 0; r < s->ranks; r++) most = fmax(most, rank_value(f, &sp->ranks[r]));
  if (f->times) {
    snprintf(line, sizeof line, "step %.4g ms", most);
  } else {
    char n[32];
    viz_format_count((int64_t)most, n, sizeof n);
    snprintf(line, sizeof line, "most %s tiles", n);
  }
  viz_text_fit(cr, cx, bars.y + bars.h + 1.15 * font, line, maxw, 0.5);
}

fm_status viz_draw_cp_plan(cairo_t *cr, double w, double h, void *ctx, fm_err *err) {
  const viz_figure_opts *o = ctx;
  fm_cp_plan *own = NULL;
  const fm_cp_plan *plan = o->cp_plan;
  if (!plan) {
    fm_status st = default_plan(o, &own, err);
    if (st != FM_OK) return st;
    plan = own;
  }
  cp_frame f;
  fm_status st = cp_layout(cr, o, plan, w, h, &f, err);
  if (st == FM_OK) {
    viz_set_rgb(cr, VIZ_RGB_BACKGROUND);
    cairo_paint(cr);
    for (int k = 0; k < f.n; k++) draw_column(cr, o, plan, &f, k);
    legend_flow(cr, fm_cp_plan_summary(plan), f.legend_brief, f.margin, f.legend_y, w - 2 * f.margin,
                f.font, o->text, 1);
    viz_title_draw(cr, f.title, f.margin, f.margin + 1.15 * f.font * 0.95, w - 2 * f.margin, f.font,
                   f.title_lines, o->text);
  }
  fm_cp_plan_destroy(own);
  return st;
}
