/* viz_draw.c — one draw call for the window, PNG, SVG and PDF: the mask
 * raster (viz_raster.c), axes in tokens, tile grid, caption, legend, colour
 * bar, live numbers and hover details. Text uses cairo's toy API with
 * DejaVu Sans; s->text = 0 leaves every glyph out (reference images). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_dense.h"
#include "fm_forms.h"
#include "viz_internal.h"

/* ---- formatting ---------------------------------------------------------- */

void viz_format_tokens(int64_t v, int k_suffix, char *buf, int cap) {
  if (k_suffix && v != 0 && v % (1 << 20) == 0) snprintf(buf, (size_t)cap, "%lldM", (long long)(v >> 20));
  else if (k_suffix && v != 0 && v % 1024 == 0) snprintf(buf, (size_t)cap, "%lldK", (long long)(v >> 10));
  else snprintf(buf, (size_t)cap, "%lld", (long long)v);
}

void viz_format_bytes(double bytes, char *buf, int cap) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) {
    bytes /= 1024;
    u++;
  }
  if (u == 0) snprintf(buf, (size_t)cap, "%.0f B", bytes);
  else snprintf(buf, (size_t)cap, bytes < 10 ? "%.2f %s" : bytes < 100 ? "%.1f %s" : "%.0f %s", bytes,
                units[u]);
}

void viz_format_count(int64_t v, char *buf, int cap) {
  char digits[32];
  snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? -v : v));
  int n = (int)strlen(digits), o = 0;
  if (v < 0 && o < cap - 1) buf[o++] = '-';
  for (int i = 0; i < n && o < cap - 2; i++) {
    if (i > 0 && (n - i) % 3 == 0) {
      /* U+2009 THIN SPACE */
      if (o < cap - 4) {
        buf[o++] = (char)0xE2;
        buf[o++] = (char)0x80;
        buf[o++] = (char)0x89;
      }
    }
    buf[o++] = digits[i];
  }
  buf[o] = 0;
}

/* ---- small cairo helpers (viz_text.c) ------------------------------------ */

static void set_rgb(cairo_t *cr, uint32_t c) { viz_set_rgb(cr, c); }
static void set_font(cairo_t *cr, double size, int bold) { viz_set_font(cr, size, bold); }
static double text_width(cairo_t *cr, const char *t) { return viz_text_width(cr, t); }
/* Text with its baseline at y; align 0 left, 0.5 centre, 1 right. */
static void text_at(cairo_t *cr, double x, double y, const char *t, double align) {
  viz_text_at(cr, x, y, t, align);
}
/* Fits t into maxw: shrunk, then cut with an ellipsis. */
static void text_fit(cairo_t *cr, double x, double y, const char *t, double maxw, double align) {
  viz_text_fit(cr, x, y, t, maxw, align);
}

/* A user-space coordinate on one axis (0: x, 1: y) snapped to the centre of
 * a device pixel, so that one-pixel lines stay crisp on raster targets. */
static double snap(cairo_t *cr, double v, int axis) {
  double p[2] = {0, 0};
  p[axis] = v;
  cairo_user_to_device(cr, &p[0], &p[1]);
  p[axis] = floor(p[axis]) + 0.5;
  cairo_device_to_user(cr, &p[0], &p[1]);
  return p[axis];
}
static double snap_x(cairo_t *cr, double x) { return snap(cr, x, 0); }
static double snap_y(cairo_t *cr, double y) { return snap(cr, y, 1); }

static double device_scale(cairo_t *cr) {
  double dx = 1, dy = 0;
  cairo_user_to_device_distance(cr, &dx, &dy);
  return hypot(dx, dy);
}

/* The frame of a plot: one device pixel of dark grey on pixel centres; the
 * line width and colour stay set for what the caller draws next. */
static void stroke_frame(cairo_t *cr, const viz_rect *r) {
  cairo_set_line_width(cr, 1.0 / device_scale(cr));
  set_rgb(cr, 0x444444);
  double x0 = snap_x(cr, r->x), y0 = snap_y(cr, r->y);
  cairo_rectangle(cr, x0, y0, snap_x(cr, r->x + r->w) - x0, snap_y(cr, r->y + r->h) - y0);
  cairo_stroke(cr);
}

/* ---- axes ---------------------------------------------------------------- */

/* Power-of-two tick step for the span [lo, hi] over `pixels` so that labels
 * of width label_w keep a gap. */
static int64_t tick_step(double lo, double hi, double pixels, double label_w, double font) {
  double span = hi - lo;
  double min_gap = fmax(label_w + 1.5 * font, 4.0 * font);
  int64_t step = 1;
  while (step < ((int64_t)1 << 40) && (double)step / span * pixels < min_gap) step *= 2;
  return step;
}

static void draw_axes(cairo_t *cr, const viz_state *s, const viz_layout *l) {
  const viz_rect *p = &l->plot;
  const viz_view *v = &s->view;
  double font = l->font, tick = 0.45 * font;
  char buf[64];
  stroke_frame(cr, p);
  set_font(cr, 0.9 * font, 0);
  /* label width of the widest label decides the step */
  for (int axis = 0; axis < 2; axis++) {
    double lo = axis == 0 ? v->x0 : v->y0, hi = axis == 0 ? v->x1 : v->y1;
    double pixels = axis == 0 ? p->w : p->h;
    viz_format_tokens((int64_t)ceil(hi), 1, buf, sizeof buf);
    double lw = s->text ? text_width(cr, buf) + text_width(cr, "0") : 3 * font;
    if (axis == 1) lw = 1.6 * font; /* vertical: label height decides */
    int64_t step = tick_step(lo, hi, pixels, lw, font);
    int k_suffix = step % 1024 == 0;
    int64_t first = (int64_t)ceil(lo / (double)step) * step;
    for (int64_t t = first; (double)t <= hi + 1e-9; t += step) {
      double f = ((double)t - lo) / (hi - lo);
      viz_format_tokens(t, k_suffix, buf, sizeof buf);
      if (axis == 0) {
        double x = snap_x(cr, p->x + f * p->w);
        cairo_move_to(cr, x, p->y + p->h);
        cairo_line_to(cr, x, p->y + p->h + tick);
        cairo_stroke(cr);
        if (s->text) text_at(cr, x, p->y + p->h + tick + 1.05 * font, buf, 0.5);
      } else {
        double y = snap_y(cr, p->y + f * p->h);
        cairo_move_to(cr, p->x - tick, y);
        cairo_line_to(cr, p->x, y);
        cairo_stroke(cr);
        if (s->text) text_at(cr, p->x - tick - 0.35 * font, y + 0.33 * font, buf, 1.0);
      }
    }
  }
  if (!s->text) return;
  set_rgb(cr, VIZ_RGB_TEXT);
  set_font(cr, 0.95 * font, 0);
  /* a small plot takes the short titles, fitted to its side and a bit */
  const char *xt = text_width(cr, "key column j (tokens)") <= p->w + 2 * font ? "key column j (tokens)" : "key j";
  const char *yt = text_width(cr, "query row i (tokens)") <= p->h + 2 * font ? "query row i (tokens)" : "query i";
  text_fit(cr, p->x + p->w / 2, p->y + p->h + tick + 2.55 * font, xt, p->w + 4 * font, 0.5);
  cairo_save(cr);
  cairo_translate(cr, p->x - 4.35 * font, p->y + p->h / 2);
  cairo_rotate(cr, -M_PI / 2);
  text_fit(cr, 0, 0, yt, p->h + 2 * font, 0.5);
  cairo_restore(cr);
}

/* Tile boundaries (and token boundaries when tokens are large) as thin lines. */
static void draw_grid(cairo_t *cr, const viz_state *s, const viz_rect *p, double min_px) {
  const viz_scene *sc = s->scene;
  const viz_view *v = &s->view;
  double ppx = p->w / (v->x1 - v->x0), ppy = p->h / (v->y1 - v->y0); /* layout units per token */
  double unit = 1.0 / device_scale(cr);
  cairo_save(cr);
  cairo_rectangle(cr, p->x, p->y, p->w, p->h);
  cairo_clip(cr);
  for (int pass = 0; pass < 2; pass++) {
    double gx = pass == 0 ? 1 : sc->bc, gy = pass == 0 ? 1 : sc->br;
    double need = pass == 0 ? 2 * min_px : min_px;
    if (gx * ppx < need || gy * ppy < need) continue;
    cairo_set_source_rgba(cr, 1, 1, 1, pass == 0 ? 0.35 : 0.85);
    cairo_set_line_width(cr, pass == 0 ? 0.5 * unit : unit);
    for (double t = ceil(v->x0 / gx) * gx; t <= v->x1; t += gx) {
      double x = snap_x(cr, p->x + (t - v->x0) * ppx);
      cairo_move_to(cr, x, p->y);
      cairo_line_to(cr, x, p->y + p->h);
    }
    for (double t = ceil(v->y0 / gy) * gy; t <= v->y1; t += gy) {
      double y = snap_y(cr, p->y + (t - v->y0) * ppy);
      cairo_move_to(cr, p->x, y);
      cairo_line_to(cr, p->x + p->w, y);
    }
    cairo_stroke(cr);
  }
  cairo_restore(cr);
}

/* ---- the mask raster ----------------------------------------------------- */

static void draw_raster(cairo_t *cr, const viz_state *s, const viz_rect *p) {
  double scale = s->raster_scale > 0 ? s->raster_scale : device_scale(cr);
  const double *vector_scale = cairo_surface_get_user_data(cairo_get_target(cr), &viz_raster_scale_key);
  if (s->raster_scale <= 0 && vector_scale && *vector_scale > 0) scale = *vector_scale;
  int rw = (int)lround(p->w * scale), rh = (int)lround(p->h * scale);
  if (rw < 1) rw = 1;
  if (rh < 1) rh = 1;
  if (rw > 16384) rw = 16384;
  if (rh > 16384) rh = 16384;
  const uint32_t *raster = viz_raster_render(s->scene, s, rw, rh, 7.0 * scale);
  if (!raster) return;
  cairo_surface_t *img;
  int stride = cairo_format_stride_for_width(CAIRO_FORMAT_ARGB32, rw);
  if (cairo_surface_get_type(cairo_get_target(cr)) == CAIRO_SURFACE_TYPE_IMAGE && stride == rw * 4) {
    img = cairo_image_surface_create_for_data((unsigned char *)raster, CAIRO_FORMAT_ARGB32, rw, rh,
                                              stride);
  } else {
    /* vector targets keep the image until the page is finished: give them a copy */
    img = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, rw, rh);
    unsigned char *dst = cairo_image_surface_get_data(img); /* NULL when creation failed */
    if (!dst) {
      cairo_surface_destroy(img);
      return;
    }
    int ds = cairo_image_surface_get_stride(img);
    for (int y = 0; y < rh; y++) memcpy(dst + (size_t)y * ds, raster + (size_t)y * rw, (size_t)rw * 4);
    cairo_surface_mark_dirty(img);
  }
  cairo_save(cr);
  cairo_rectangle(cr, p->x, p->y, p->w, p->h);
  cairo_clip(cr);
  cairo_translate(cr, p->x, p->y);
  cairo_scale(cr, p->w / rw, p->h / rh);
  cairo_set_source_surface(cr, img, 0, 0);
  cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
  cairo_paint(cr);
  cairo_restore(cr);
  cairo_surface_destroy(img);
}

/* ---- hover --------------------------------------------------------------- */

static void draw_hover_marks(cairo_t *cr, const viz_state *s, const viz_layout *l, viz_hover h) {
  const viz_scene *sc = s->scene;
  const viz_rect *p = &l->plot;
  const viz_view *v = &s->view;
  double ppx = p->w / (v->x1 - v->x0), ppy = p->h / (v->y1 - v->y0);
  cairo_save(cr);
  cairo_rectangle(cr, p->x, p->y, p->w, p->h);
  cairo_clip(cr);
  int32_t sq = fm_colmask_sq(sc->mask), sk = fm_colmask_sk(sc->mask);
  double tx0 = (double)h.ct * sc->bc, tx1 = fmin(tx0 + sc->bc, sk);
  double ty0 = (double)h.rt * sc->br, ty1 = fmin(ty0 + sc->br, sq);
  if ((tx1 - tx0) * ppx >= 3 && (ty1 - ty0) * ppy >= 3) {
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 2.0);
    cairo_rectangle(cr, p->x + (tx0 - v->x0) * ppx, p->y + (ty0 - v->y0) * ppy, (tx1 - tx0) * ppx,
                    (ty1 - ty0) * ppy);
    cairo_stroke(cr);
  }
  if (h.misfit) { /* the column no form holds, top to bottom */
    viz_set_rgb(cr, VIZ_RGB_MISFIT);
    cairo_set_line_width(cr, 1.5);
    double x0 = p->x + (h.j - v->x0) * ppx, cw = fmax(ppx, 1.0);
    cairo_rectangle(cr, x0 - 1, p->y, cw + 2, p->h);
    cairo_stroke(cr);
  }
  if (ppx >= 4 && ppy >= 4) {
    cairo_set_source_rgb(cr, 0.8, 0, 0.3);
    cairo_set_line_width(cr, 1.5);
    cairo_rectangle(cr, p->x + (h.j - v->x0) * ppx, p->y + (h.i - v->y0) * ppy, ppx, ppy);
    cairo_stroke(cr);
  }
  cairo_restore(cr);
}

/* ---- side panel ---------------------------------------------------------- */

typedef struct panel_pen {
  cairo_t *cr;
  double x, y, w, font, line;
  double bottom; /* nothing is drawn below: what does not fit is left out */
} panel_pen;

/* 1 when `lines` more lines fit above the panel's bottom. */
static int pen_room(const panel_pen *pp, double lines) { return pp->y + (lines - 0.7) * pp->line <= pp->bottom; }

static void pen_header(panel_pen *pp, const char *t) {
  if (!pen_room(pp, 2)) {
    pp->y = pp->bottom + pp->line; /* full: the rest is left out */
    return;
  }
  pp->y += 0.5 * pp->line;
  set_font(pp->cr, pp->font, 1);
  set_rgb(pp->cr, VIZ_RGB_TEXT);
  text_fit(pp->cr, pp->x, pp->y, t, pp->w, 0);
  pp->y += pp->line;
  set_font(pp->cr, 0.92 * pp->font, 0);
}

static void pen_line(panel_pen *pp, const char *t) {
  if (!pen_room(pp, 1)) return;
  set_rgb(pp->cr, VIZ_RGB_TEXT);
  text_fit(pp->cr, pp->x, pp->y, t, pp->w, 0);
  pp->y += pp->line;
}

/* A legend swatch of height `size` with its top-left corner at (x, y);
 * hatch 1: "/" stripes, 2: "\\" stripes (as the raster draws them). */
void viz_swatch(cairo_t *cr, double x, double y, double size, uint32_t fill, int hatch) {
  cairo_save(cr);
  viz_ink_mark(cr, x, y, 1.6 * size, size);
  set_rgb(cr, fill);
  if (hatch == 3) { /* viridis, low to high */
    cairo_pattern_t *g = cairo_pattern_create_linear(x, 0, x + 1.6 * size, 0);
    for (int i = 0; i <= 4; i++) {
      uint32_t c = viz_viridis(i / 4.0);
      cairo_pattern_add_color_stop_rgb(g, i / 4.0, ((c >> 16) & 255) / 255.0, ((c >> 8) & 255) / 255.0,
                                       (c & 255) / 255.0);
    }
    cairo_set_source(cr, g);
    cairo_pattern_destroy(g);
    hatch = 0;
  }
  cairo_rectangle(cr, x, y, 1.6 * size, size);
  cairo_fill_preserve(cr);
  if (hatch) {
    cairo_save(cr);
    cairo_clip_preserve(cr);
    set_rgb(cr, VIZ_RGB_HATCH);
    cairo_set_line_width(cr, 0.2 * size);
    cairo_new_path(cr);
    for (double d = -size; d < 2.6 * size; d += 0.45 * size) {
      if (hatch == 1) {
        cairo_move_to(cr, x + d, y + size);
        cairo_line_to(cr, x + d + size, y);
      } else {
        cairo_move_to(cr, x + d, y);
        cairo_line_to(cr, x + d + size, y + size);
      }
    }
    cairo_stroke(cr);
    cairo_restore(cr);
    cairo_rectangle(cr, x, y, 1.6 * size, size);
  }
  cairo_set_line_width(cr, 0.06 * size);
  set_rgb(cr, 0x888888);
  cairo_stroke(cr);
  cairo_restore(cr);
}

static void pen_swatch(panel_pen *pp, uint32_t fill, int hatch, const char *t) {
  if (!pen_room(pp, 1)) return;
  double sz = 0.95 * pp->font;
  viz_swatch(pp->cr, pp->x, pp->y - 0.82 * pp->font, sz, fill, hatch);
  set_rgb(pp->cr, VIZ_RGB_TEXT);
  text_fit(pp->cr, pp->x + 2.2 * sz, pp->y, t, pp->w - 2.2 * sz, 0);
  pp->y += pp->line;
}

/* Nice linear ticks (1, 2, 5 x 10^k) over [0, vmax]. */
static double nice_step(double vmax, int target) {
  double raw = vmax / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void format_si(double v, char *buf, int cap) {
  if (v >= 1e9) snprintf(buf, (size_t)cap, "%gG", v / 1e9);
  else if (v >= 1e6) snprintf(buf, (size_t)cap, "%gM", v / 1e6);
  else if (v >= 1e3) snprintf(buf, (size_t)cap, "%gk", v / 1e3);
  else snprintf(buf, (size_t)cap, "%g", v);
}

static void format_bytes_tick(double v, double unit, char *buf, int cap) {
  static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  for (double x = unit; x >= 1024 && u < 4; x /= 1024) u++;
  snprintf(buf, (size_t)cap, "%g %s", v / unit, v == 0 ? "" : names[u]);
}

static void pen_colorbar(panel_pen *pp, double vmax, int bytes, const char *title) {
  if (!pen_room(pp, 2.5)) return;
  cairo_t *cr = pp->cr;
  double bw = fmin(pp->w - pp->font, 18 * pp->font), bh = 0.9 * pp->font;
  double x = pp->x + 0.3 * pp->font, y = pp->y - 0.6 * pp->font;
  cairo_pattern_t *g = cairo_pattern_create_linear(x, 0, x + bw, 0);
  for (int i = 0; i <= 20; i++) {
    uint32_t c = viz_viridis(i / 20.0);
    cairo_pattern_add_color_stop_rgb(g, i / 20.0, ((c >> 16) & 255) / 255.0, ((c >> 8) & 255) / 255.0,
                                     (c & 255) / 255.0);
  }
  cairo_rectangle(cr, x, y, bw, bh);
  cairo_set_source(cr, g);
  cairo_fill(cr);
  cairo_pattern_destroy(g);
  set_rgb(cr, 0x444444);
  cairo_set_line_width(cr, 0.6);
  cairo_rectangle(cr, x, y, bw, bh);
  cairo_stroke(cr);
  set_font(cr, 0.8 * pp->font, 0);
  if (vmax > 0) {
    /* bytes step in whole KiB / MiB / ...: 10 KiB, not 9.77 KiB */
    double unit = 1;
    while (bytes && unit * 1024 <= vmax) unit *= 1024;
    double step = bytes ? nice_step(vmax / unit, 4) * unit : nice_step(vmax, 4);
    for (double t = 0; t <= vmax * 1.0001; t += step) {
      double tx = x + bw * t / vmax;
      cairo_move_to(cr, tx, y + bh);
      cairo_line_to(cr, tx, y + bh + 0.3 * pp->font);
      cairo_stroke(cr);
      char buf[32];
      if (bytes) format_bytes_tick(t, unit, buf, sizeof buf);
      else format_si(t, buf, sizeof buf);
      if (t + step > vmax * 1.0001 && bw * (vmax - t) / vmax < 2 * pp->font) {
        /* the last tick may sit at the end; keep its label inside */
        text_at(cr, tx, y + bh + 1.2 * pp->font, buf, 1.0);
      } else {
        text_at(cr, tx, y + bh + 1.2 * pp->font, buf, t == 0 ? 0 : 0.5);
      }
    }
  }
  pp->y += bh + 1.5 * pp->font;
  set_font(cr, 0.92 * pp->font, 0);
  pen_line(pp, title);
}

/* A table: column 0 left-aligned names, the others right-aligned numbers,
 * each column as wide as its widest cell; the font shrinks so that the
 * table fits the panel. Row 0 is a header when its first cell is empty. */
static void pen_table(panel_pen *pp, char (*cells)[3][64], int rows, int cols) {
  cairo_t *cr = pp->cr;
  double size = 0.92 * pp->font, gap = 1.2 * pp->font, width[3] = {0, 0, 0};
  int header = cells[0][0][0] == 0;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      set_font(cr, r == 0 && header ? 0.85 * pp->font : size, r == 0 && header);
      width[c] = fmax(width[c], text_width(cr, cells[r][c]));
    }
  double total = width[0];
  for (int c = 1; c < cols; c++) total += gap + width[c];
  double shrink = total > pp->w ? pp->w / total : 1;
  double right[3];
  right[0] = pp->x + width[0] * shrink;
  for (int c = 1; c < cols; c++) right[c] = right[c - 1] + (gap + width[c]) * shrink;
  set_rgb(cr, VIZ_RGB_TEXT);
  for (int r = 0; r < rows && pen_room(pp, 1); r++) {
    int bold = r == 0 && header;
    set_font(cr, (bold ? 0.85 * pp->font : size) * shrink, bold);
    text_at(cr, pp->x, pp->y, cells[r][0], 0);
    for (int c = 1; c < cols; c++) text_at(cr, right[c], pp->y, cells[r][c], 1);
    pp->y += pp->line * (shrink < 0.9 ? 0.9 : 1);
  }
  set_font(cr, 0.92 * pp->font, 0);
}

static const char *class_name(int c) {
  return c == FM_TILE_MASKED ? "masked" : c == FM_TILE_PARTIAL ? "partial" : c == FM_TILE_UNMASKED ? "unmasked" : "?";
}

static void panel_legend(panel_pen *pp, const viz_state *s) {
  const viz_scene *sc = s->scene;
  viz_legend_entry e[VIZ_LEGEND_MAX];
  int n = viz_legend_entries(s, e);
  char line[320];
  pen_header(pp, "Legend");
  for (int i = 0; i < n; i++) {
    const char *pass = sc->pass == VIZ_BWD ? "backward " : "";
    if (e[i].hatch != 3) {
      pen_swatch(pp, e[i].fill, e[i].hatch, e[i].text);
    } else if (s->overlay == VIZ_OVERLAY_CYCLES) {
      snprintf(line, sizeof line, "GPU cycles per %stile (clock64, trace)", pass);
      pen_colorbar(pp, sc->cycles_max, 0, line);
    } else {
      snprintf(line, sizeof line, "modelled bytes per %stile (fm_cost, skip, bf16, D = %d)", pass,
               sc->head_dim);
      pen_colorbar(pp, sc->bytes_max, 1, line);
    }
  }
}

/* Tile counts by the min/max rule and exactly; a mask without intervals has
 * exact classes only, and what its tightest fitting sub-mask would skip. */
static void panel_tiles(panel_pen *pp, const viz_state *s) {
  const viz_scene *sc = s->scene;
  const fm_tile_counts *k = &sc->counts;
  char a[48], line[320], cells[6][3][64];
  int mm = !sc->misfit, cols = mm ? 3 : 2;
  snprintf(line, sizeof line, "%s %d \xC3\x97 %d: %d \xC3\x97 %d",
           sc->pass == VIZ_BWD ? "Backward tiles" : "Tiles", sc->br, sc->bc, sc->tr, sc->tc);
  pen_header(pp, line);
  snprintf(cells[0][0], 64, "%s", "");
  snprintf(cells[0][1], 64, "%s", mm ? "min/max rule" : "exact");
  snprintf(cells[0][2], 64, "%s", "exact");
  for (int cl = 0; cl < FM_TILE_NCLASSES; cl++) {
    snprintf(cells[1 + cl][0], 64, "%s", class_name(cl));
    const int64_t *c = mm ? k->minmax : k->exact;
    viz_format_count(c[cl], a, sizeof a);
    snprintf(cells[1 + cl][1], 64, "%s  %.1f%%", a, k->total ? 100.0 * c[cl] / k->total : 0);
    viz_format_count(k->exact[cl], cells[1 + cl][2], 64);
  }
  snprintf(cells[4][0], 64, "%s", "\xCF\x81 (block sparsity)");
  snprintf(cells[4][1], 64, "%.4f", mm ? k->sparsity : k->sparsity_exact);
  snprintf(cells[4][2], 64, "%.4f", k->sparsity_exact);
  pen_table(pp, cells, 5, cols);
  if (mm) {
    viz_format_count(k->partial_but_masked, a, sizeof a);
    snprintf(line, sizeof line, "min/max partial, exactly masked: %s", a);
    pen_line(pp, line);
    viz_format_count(k->partial_but_unmasked, a, sizeof a);
    snprintf(line, sizeof line, "min/max partial, exactly unmasked: %s", a);
    pen_line(pp, line);
  } else {
    const fm_dense_report *r = fm_dense_result_report(sc->dense);
    snprintf(line, sizeof line, "FlashMask with the tightest fitting sub-mask: \xCF\x81 = %.4f",
             sc->subset_counts.sparsity);
    pen_line(pp, line);
    snprintf(line, sizeof line, "(two longest runs per column; %.1f%% of the masked elements",
             r->masked ? 100.0 * (double)(r->masked - r->advice.subset_masked) / (double)r->masked : 0.0);
    pen_line(pp, line);
    pen_line(pp, "left to an extra element mask)");
  }
  if (s->facts.npairs > 1) {
    snprintf(line, sizeof line, "counts over %d (batch, head) pairs; showing batch %d, head %d",
             s->facts.npairs, (int)(s->pair / sc->heads), (int)(s->pair % sc->heads));
    pen_line(pp, line);
  }
}

static void panel_memory(panel_pen *pp, const viz_scene *sc) {
  char line[320], cells[3][3][64];
  snprintf(line, sizeof line, "Mask memory (%s form)", sc->form == FM_FORM_NONE ? "no" : fm_form_name(sc->form));
  pen_header(pp, line);
  const char *names[3] = {"dense bool", "FlexAttention block mask",
                          sc->misfit ? "intervals of the sub-mask" : "FlashMask intervals"};
  int64_t vals[3] = {sc->bytes.dense, sc->bytes.block_mask, sc->bytes.intervals};
  for (int q = 0; q < 3; q++) {
    snprintf(cells[q][0], 64, "%s", names[q]);
    viz_format_bytes((double)vals[q], cells[q][1], 64);
    cells[q][2][0] = 0;
  }
  pen_table(pp, cells, 3, 2);
}

/* The columns no interval form holds, as many as there is room for (leaving
 * room for the lines under the cursor in a window). */
static void panel_misfits(panel_pen *pp, const viz_state *s, int reserve) {
  const viz_scene *sc = s->scene;
  char line[320], lines[24][160];
  snprintf(line, sizeof line, "Columns no interval form holds: %d of %d", sc->bad_prefix[sc->runs.sk],
           sc->runs.sk);
  pen_header(pp, line);
  int room = (int)floor((pp->bottom - pp->y) / pp->line) + 1 - reserve;
  if (room > 24) room = 24;
  int n = viz_misfit_lines(s, lines, room < 2 ? 2 : room);
  for (int i = 0; i < n && i < room; i++) pen_line(pp, lines[i]);
}

static void draw_panel(cairo_t *cr, const viz_state *s, const viz_layout *l) {
  const viz_scene *sc = s->scene;
  /* a table wider than this reads badly: numbers drift away from their names */
  panel_pen pp = {cr, l->panel.x, l->panel.y + 0.4 * l->font, fmin(l->panel.w, 27 * l->font), l->font,
                  1.45 * l->font, l->panel.y + l->panel.h};
  char lines[24][160];
  int nh = viz_hover_lines_at(s, l, lines, 24);
  panel_legend(&pp, s);
  panel_tiles(&pp, s);
  char pred[2][160]; /* the predicted time on a GPU profile (viewer --gpu) */
  for (int i = 0, np = viz_prediction_lines(s, pred, 2); i < np; i++) pen_line(&pp, pred[i]);
  panel_memory(&pp, sc);
  if (sc->misfit) panel_misfits(&pp, s, s->mouse_in ? 12 : 0);
  if (nh > 0) {
    pen_header(&pp, sc->misfit ? "Under the cursor" : "Under the cursor (tile bounds: min..max)");
    for (int i = 0; i < nh; i++) pen_line(&pp, lines[i]);
  }
  if (s->status[0] && pen_room(&pp, 1.4)) {
    pp.y += 0.4 * pp.line;
    set_font(cr, 0.88 * pp.font, 0);
    cairo_set_source_rgb(cr, 0.65, 0.1, 0.1);
    text_fit(cr, pp.x, pp.y, s->status, pp.w, 0);
  }
}

static void draw_help(cairo_t *cr, const viz_layout *l) {
  int n;
  const viz_key_help *keys = viz_key_help_table(&n);
  double font = 0.9 * l->font, line = 1.4 * font;
  double w = fmin(l->plot.w - 2 * font, 46 * font), h = (n + 1) * line;
  double x = l->plot.x + (l->plot.w - w) / 2, y = l->plot.y + fmax(font, (l->plot.h - h) / 2);
  cairo_set_source_rgba(cr, 1, 1, 1, 0.94);
  cairo_rectangle(cr, x, y, w, h);
  cairo_fill_preserve(cr);
  set_rgb(cr, 0x444444);
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);
  for (int i = 0; i < n; i++) {
    double ty = y + (i + 1.3) * line;
    set_font(cr, font, 1);
    set_rgb(cr, VIZ_RGB_TEXT);
    text_fit(cr, x + font, ty, keys[i].keys, 9 * font, 0);
    set_font(cr, font, 0);
    text_fit(cr, x + 10 * font, ty, keys[i].action, w - 11 * font, 0);
  }
}

void viz_draw(cairo_t *cr, const viz_state *s, double w, double h) {
  viz_layout l;
  viz_layout_compute(s, w, h, &l);
  cairo_save(cr);
  set_rgb(cr, VIZ_RGB_BACKGROUND);
  cairo_paint(cr);
  const viz_scene *sc = s->scene;
  if (!sc || !sc->valid || !sc->classes_valid) {
    cairo_restore(cr);
    return;
  }
  draw_raster(cr, s, &l.plot);
  if (s->layers & VIZ_LAYER_GRID) draw_grid(cr, s, &l.plot, 6.0);
  draw_axes(cr, s, &l);
  viz_draw_misfit_strip(cr, s, &l);
  viz_hover hv = viz_hover_of(s, &l);
  if (hv.valid) draw_hover_marks(cr, s, &l, hv);
  if (l.legend.h > 0) viz_draw_compact_legend(cr, s, &l);
  if (s->text) {
    viz_draw_caption(cr, s, &l, w);
    if (l.panel.w > 0) draw_panel(cr, s, &l);
    else if (s->status[0] && !l.legend.h) {
      set_font(cr, 0.88 * l.font, 0);
      cairo_set_source_rgb(cr, 0.65, 0.1, 0.1);
      text_fit(cr, l.plot.x, h - 0.5 * l.font, s->status, w - l.plot.x - l.font, 0);
    }
    if (s->show_help) draw_help(cr, &l);
  }
  cairo_restore(cr);
}

double viz_snap_x(cairo_t *cr, double x) { return snap_x(cr, x); }
double viz_snap_y(cairo_t *cr, double y) { return snap_y(cr, y); }

void viz_draw_mask_in(cairo_t *cr, const viz_state *s, const viz_rect *r, double grid_min_px) {
  draw_raster(cr, s, r);
  if (s->layers & VIZ_LAYER_GRID) draw_grid(cr, s, r, grid_min_px);
  cairo_save(cr);
  stroke_frame(cr, r);
  cairo_restore(cr);
}

fm_status viz_draw_state_fn(cairo_t *cr, double w, double h, void *ctx, fm_err *err) {
  (void)err;
  viz_draw(cr, (const viz_state *)ctx, w, h);
  return FM_OK;
}
