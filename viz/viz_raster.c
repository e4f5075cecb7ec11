/* viz_raster.c — the mask and tile layers as one raster, aggregated per pixel.
 *
 * Pixel column px covers keys [kx0, kx1) and pixel row l covers query rows
 * [y_l, y_l+1), both real numbers (a pixel may hold a thousand tokens or a
 * tenth of one). Every key column (mask layer) or key tile (tile layer) is a
 * vertical strip holding a few row runs, each with a channel: masked elements,
 * tiles of a class, overlay value. The count of a channel in the pixel is the
 * area of the runs' overlap with the pixel rectangle, an exact box filter, so
 * no pattern aliases into moire at any zoom.
 *
 * For one pixel column the overlap with [0, y) of a run [a, b) weighted by the
 * strip's horizontal overlap w is w * (ramp(y - a) - ramp(y - b)); summed over
 * runs this is piecewise linear in y with slope changes at run ends. Each run
 * end adds its slope (+w or -w) and intercept to the first pixel-row boundary
 * below it; prefix sums then give the cumulative count F(y_k) at every
 * boundary, and pixel row l holds F(y_l+1) - F(y_l). Work per frame:
 * O(strips in view + runs + channels * pixels), never O(Sq * Sk) or O(tiles).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "viz_internal.h"

enum { CH_MK, CH_M, CH_P, CH_PM, CH_PU, CH_V, NCH };

typedef struct rgb {
  double r, g, b;
} rgb;

static rgb rgb_of(uint32_t c) {
  return (rgb){((c >> 16) & 255) / 255.0, ((c >> 8) & 255) / 255.0, (c & 255) / 255.0};
}

static inline void acc(rgb *o, rgb c, double f) {
  o->r += c.r * f;
  o->g += c.g * f;
  o->b += c.b * f;
}

/* fmin/fmax handle NaN and are library calls at -O2; these are not and need not be */
static inline double dmin(double a, double b) { return a < b ? a : b; }
static inline double dmax(double a, double b) { return a > b ? a : b; }
static inline double clamp01(double x) { return x < 0 ? 0 : (x > 1 ? 1 : x); }

static inline uint32_t pack(rgb c) {
  uint32_t r = (uint32_t)(clamp01(c.r) * 255 + 0.5), g = (uint32_t)(clamp01(c.g) * 255 + 0.5),
           b = (uint32_t)(clamp01(c.b) * 255 + 0.5);
  return 0xFF000000u | r << 16 | g << 8 | b;
}

uint32_t viz_viridis(double t) {
  /* matplotlib's viridis at t = 0, 0.1, ..., 1 */
  static const uint32_t stops[11] = {0x440154, 0x482475, 0x414487, 0x355F8D, 0x2A788E, 0x21918C,
                                     0x22A884, 0x44BF70, 0x7AD151, 0xBDDF26, 0xFDE725};
  if (!(t > 0)) t = 0;
  if (t > 1) t = 1;
  double x = t * 10;
  int i = (int)x;
  if (i >= 10) i = 9;
  double f = x - i;
  rgb a = rgb_of(stops[i]), b = rgb_of(stops[i + 1]);
  rgb c = {a.r + (b.r - a.r) * f, a.g + (b.g - a.g) * f, a.b + (b.b - a.b) * f};
  uint32_t p = pack(c);
  return p & 0xFFFFFF;
}

typedef struct agg_col {
  int h;
  double y0, sy;
  double *slope[NCH], *cst[NCH]; /* (h + 2,) per channel, zero except where touched */
  uint8_t *touched;              /* (h + 2,) 1 where some channel has an event */
} agg_col;

/* A run [a, b) of weight w (tokens of key overlap) in channel ch. */
static inline void add_run(agg_col *c, int ch, double a, double b, double w) {
  double ka = floor((a - c->y0) / c->sy) + 1, kb = floor((b - c->y0) / c->sy) + 1;
  if (ka > c->h) return; /* starts below the view */
  int ia = ka < 0 ? 0 : (int)ka;
  c->slope[ch][ia] += w;
  c->cst[ch][ia] -= w * a;
  c->touched[ia] = 1;
  if (kb <= c->h) {
    int ib = kb < 0 ? 0 : (int)kb;
    c->slope[ch][ib] -= w;
    c->cst[ch][ib] += w * b;
    c->touched[ib] = 1;
  }
}

/* Cumulative value at key x of one row of tile values (cycles overlay):
 * row (Tc + 1,) prefix sums of value x width over key tiles of width bc. */
static inline double rowsum_at(const double *row, double x, int32_t bc, int32_t tc, int32_t sk) {
  int32_t ct = (int32_t)(x / bc);
  if (ct >= tc) return row[tc];
  if (ct < 0) return 0;
  int32_t w = (ct + 1) * bc < sk ? bc : sk - ct * bc;
  double value = (row[ct + 1] - row[ct]) / w;
  return row[ct] + value * (x - (double)ct * bc);
}

/* Everything the colour of one pixel depends on besides its channel sums. */
typedef struct colour_ctx {
  int want_mask, want_tiles, want_hatch;
  viz_overlay overlay;
  double vmax;
  int period, stripe;
  rgb bg, masked, visible, partial, pmask, hatch;
} colour_ctx;

/* The colour of a pixel from the areas v[ch] over its covered area `area`
 * (cover: covered fraction of the pixel). *hatch_free: the colour does not
 * depend on the stripe pattern (so neighbours with equal sums may reuse it). */
static inline uint32_t pixel_colour(const colour_ctx *k, const double *v, double area, double cover,
                                    int px, int l, int rh, int *hatch_free) {
  double inv = 1.0 / area;
  double mk = k->want_mask ? clamp01(v[CH_MK] * inv) : 0;
  double fm = k->want_tiles ? clamp01(v[CH_M] * inv) : 0;
  double fp = k->want_tiles ? dmin(1 - fm, dmax(0, v[CH_P] * inv)) : 0;
  double fu = 1 - fm - fp;
  rgb o = {0, 0, 0};
  *hatch_free = 1;
  if (k->overlay != VIZ_OVERLAY_NONE) {
    double work = 1 - fm;
    double mean = work > 1e-9 ? v[CH_V] * inv / work : 0;
    rgb c = rgb_of(viz_viridis(k->vmax > 0 ? mean / k->vmax : 0));
    acc(&o, k->masked, fm);
    if (k->want_mask) {
      double pmk = dmin(work, dmax(0, mk - fm));
      rgb light = {c.r + (1 - c.r) * 0.55, c.g + (1 - c.g) * 0.55, c.b + (1 - c.b) * 0.55};
      acc(&o, light, pmk);
      acc(&o, c, work - pmk);
    } else {
      acc(&o, c, work);
    }
  } else if (k->want_tiles) {
    double pm = 0, pu = 0;
    if (k->want_hatch) {
      double pm_all = dmin(fp, dmax(0, v[CH_PM] * inv)), pu_all = dmin(fp, dmax(0, v[CH_PU] * inv));
      *hatch_free = pm_all <= 0 && pu_all <= 0;
      int sa = (px + l) % k->period < k->stripe;                                 /* "/" */
      int sb = (px - l + k->period * (rh / k->period + 1)) % k->period < k->stripe; /* "\" */
      pm = sa ? pm_all : 0;
      pu = sb ? dmin(fp - pm, pu_all) : 0;
    }
    acc(&o, k->masked, fm);
    acc(&o, k->visible, fu);
    acc(&o, k->hatch, pm + pu);
    if (k->want_mask) {
      /* masked elements of partial tiles; stripes take their share evenly */
      double pmk = dmin(fp, dmax(0, mk - fm));
      double rest = fp > 0 ? (fp - pm - pu) / fp : 0;
      acc(&o, k->pmask, pmk * rest);
      acc(&o, k->partial, (fp - pmk) * rest);
    } else {
      acc(&o, k->partial, fp - pm - pu);
    }
  } else if (k->want_mask) {
    acc(&o, k->masked, mk);
    acc(&o, k->visible, 1 - mk);
  } else {
    o = k->bg;
  }
  if (cover < 0.999) {
    o.r = o.r * cover + k->bg.r * (1 - cover);
    o.g = o.g * cover + k->bg.g * (1 - cover);
    o.b = o.b * cover + k->bg.b * (1 - cover);
  }
  return pack(o);
}

/* The raster (rh, rw) and the aggregation scratch, zeroed: slope and
 * intercept per channel and touched flags. -1 when out of memory. */
static int raster_buffers(viz_scene *sc, int rw, int rh) {
  if (!sc->raster || sc->raster_key.rw * sc->raster_key.rh != rw * rh) {
    free(sc->raster);
    sc->raster = malloc(sizeof(uint32_t) * (size_t)rw * (size_t)rh);
    sc->raster_key.rw = sc->raster_key.rh = 0;
    if (!sc->raster) return -1;
  }
  size_t need = sizeof(double) * (size_t)(2 * NCH * (rh + 2)) + (size_t)(rh + 2);
  if (sc->agg_cap < need) {
    free(sc->agg);
    sc->agg = calloc(1, need);
    sc->agg_cap = sc->agg ? need : 0;
    if (!sc->agg) return -1;
  } else {
    memset(sc->agg, 0, need);
  }
  return 0;
}

/* The colours of the layers and overlay asked for, and the channels they
 * need (into chans; returns their count). */
static int colour_setup(const viz_scene *sc, const viz_state *s, double hatch_period, colour_ctx *k,
                        int *chans) {
  k->want_mask = (s->layers & VIZ_LAYER_MASK) != 0;
  k->overlay = s->overlay;
  k->want_tiles = (s->layers & VIZ_LAYER_TILES) != 0 || k->overlay != VIZ_OVERLAY_NONE;
  k->want_hatch = k->want_tiles && (s->layers & VIZ_LAYER_HATCH) && k->overlay == VIZ_OVERLAY_NONE &&
                  (sc->counts.partial_but_masked > 0 || sc->counts.partial_but_unmasked > 0);
  k->vmax = k->overlay == VIZ_OVERLAY_CYCLES ? sc->cycles_max : sc->bytes_max;
  /* hatch stripes in whole device pixels: period P, stripes about P/3 wide */
  k->period = hatch_period < 3 ? 3 : (int)(hatch_period + 0.5);
  k->stripe = k->period * 34 / 100 < 1 ? 1 : k->period * 34 / 100;
  k->bg = rgb_of(VIZ_RGB_BACKGROUND);
  k->masked = rgb_of(VIZ_RGB_MASKED);
  k->visible = rgb_of(VIZ_RGB_VISIBLE);
  k->partial = rgb_of(VIZ_RGB_PARTIAL);
  k->pmask = rgb_of(VIZ_RGB_PARTIAL_MASKED);
  k->hatch = rgb_of(VIZ_RGB_HATCH);
  int active[NCH] = {0}, nch = 0;
  active[CH_MK] = k->want_mask;
  active[CH_M] = active[CH_P] = k->want_tiles;
  active[CH_PM] = active[CH_PU] = k->want_hatch;
  active[CH_V] = k->overlay != VIZ_OVERLAY_NONE;
  for (int ch = 0; ch < NCH; ch++)
    if (active[ch]) chans[nch++] = ch;
  return nch;
}

const uint32_t *viz_raster_render(viz_scene *sc, const viz_state *s, int rw, int rh,
                                  double hatch_period) {
  viz_raster_key key;
  memset(&key, 0, sizeof key);
  key.view = s->view;
  key.rw = rw;
  key.rh = rh;
  key.layers = s->layers & (VIZ_LAYER_MASK | VIZ_LAYER_TILES | VIZ_LAYER_HATCH);
  key.overlay = s->overlay;
  key.version = sc->version;
  key.hatch_period = hatch_period;
  if (sc->raster_valid && memcmp(&key, &sc->raster_key, sizeof key) == 0) return sc->raster;
  sc->raster_valid = 0;
  if (raster_buffers(sc, rw, rh)) return NULL;

  const fm_colmask *m = sc->mask;
  const int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m);
  const int32_t br = sc->br, bc = sc->bc, tc = sc->tc, tr = sc->tr;
  colour_ctx k;
  int chans[NCH], nch = colour_setup(sc, s, hatch_period, &k, chans);

  agg_col col;
  col.h = rh;
  col.y0 = s->view.y0;
  col.sy = (s->view.y1 - s->view.y0) / rh;
  const double x0 = s->view.x0, sx = (s->view.x1 - s->view.x0) / rw;
  double *p = sc->agg;
  for (int ch = 0; ch < NCH; ch++) {
    col.slope[ch] = p;
    p += rh + 2;
    col.cst[ch] = p;
    p += rh + 2;
  }
  col.touched = (uint8_t *)p;
  const uint32_t bg = pack(k.bg);
  /* visible row tiles (cycles overlay) */
  const int32_t rt_lo = viz_tile_of(s->view.y0, br, tr), rt_hi = viz_tile_of(s->view.y1, br, tr);

  for (int px = 0; px < rw; px++) {
    double kx0 = x0 + px * sx, kx1 = kx0 + sx;
    double a = kx0 < 0 ? 0 : kx0, b = kx1 > sk ? sk : kx1;
    double colcov = b - a;
    if (colcov <= 0) {
      for (int l = 0; l < rh; l++) sc->raster[(size_t)l * rw + px] = bg;
      continue;
    }
    if (k.want_mask) {
      int32_t j0 = (int32_t)floor(a), j1 = (int32_t)ceil(b);
      if (j1 > sk) j1 = sk;
      for (int32_t j = j0; j < j1; j++) {
        double w = dmin(j + 1.0, b) - dmax((double)j, a);
        if (w <= 0) continue;
        for (int64_t q = sc->runs.start[j]; q < sc->runs.start[j + 1]; q++)
          add_run(&col, CH_MK, sc->runs.items[q][0], sc->runs.items[q][1], w);
      }
    }
    if (k.want_tiles) {
      int32_t c0 = (int32_t)(a / bc), c1 = (int32_t)ceil(b / bc);
      if (c1 > tc) c1 = tc;
      for (int32_t ct = c0; ct < c1; ct++) {
        double t0 = (double)ct * bc, t1 = dmin((double)(ct + 1) * bc, sk);
        double w = dmin(t1, b) - dmax(t0, a);
        if (w <= 0) continue;
        int32_t bc_real = (int32_t)(t1 - t0);
        for (int64_t q = sc->pieces.start[ct]; q < sc->pieces.start[ct + 1]; q++) {
          const viz_piece *pc = &sc->pieces.items[q];
          double r0 = (double)pc->rt0 * br, r1 = dmin((double)pc->rt1 * br, sq);
          if (pc->minmax == FM_TILE_MASKED) add_run(&col, CH_M, r0, r1, w);
          else if (pc->minmax == FM_TILE_PARTIAL) {
            add_run(&col, CH_P, r0, r1, w);
            if (k.want_hatch && pc->exact == FM_TILE_MASKED) add_run(&col, CH_PM, r0, r1, w);
            if (k.want_hatch && pc->exact == FM_TILE_UNMASKED) add_run(&col, CH_PU, r0, r1, w);
          }
          if (k.overlay == VIZ_OVERLAY_BYTES && pc->minmax != FM_TILE_MASKED)
            add_run(&col, CH_V, r0, r1,
                    w * (double)viz_tile_model_bytes(pc->minmax, br, bc_real, sc->head_dim,
                                                     sc->pass == VIZ_BWD ? FM_PASS_BWD : FM_PASS_FWD));
        }
      }
      if (k.overlay == VIZ_OVERLAY_CYCLES && sc->cycles_valid) {
        for (int32_t rt = rt_lo; rt <= rt_hi; rt++) {
          const double *row = sc->cycles_rowsum + (int64_t)rt * (tc + 1);
          double g = rowsum_at(row, b, bc, tc, sk) - rowsum_at(row, a, bc, tc, sk);
          if (g != 0) add_run(&col, CH_V, (double)rt * br, dmin((double)(rt + 1) * br, sq), g);
        }
      }
    }
    /* Sweep down the column. S, C: slope and intercept after the events at
     * boundary k, so F(k) = S * y_k + C and pixel row l holds F(l+1) - F(l).
     * Where no event falls on either boundary of a row, the row's sums equal
     * the previous row's: its colour is reused (most rows of most columns). */
    double S[NCH] = {0}, C[NCH] = {0}, v[NCH] = {0};
    for (int q = 0; q < nch; q++) {
      int ch = chans[q];
      S[ch] = col.slope[ch][0];
      C[ch] = col.cst[ch][0];
      col.slope[ch][0] = col.cst[ch][0] = 0;
    }
    int event_l = 1, have_prev = 0, prev_free = 0;
    col.touched[0] = 0;
    uint32_t prev = bg;
    for (int l = 0; l < rh; l++) {
      int event_k = col.touched[l + 1];
      col.touched[l + 1] = 0;
      uint32_t *dst = &sc->raster[(size_t)l * rw + px];
      double ya = col.y0 + l * col.sy, yb = ya + col.sy;
      int full_row = ya >= 0 && yb <= sq;
      if (!event_k && !event_l && have_prev && prev_free && full_row) {
        *dst = prev;
        continue;
      }
      double fl[NCH];
      for (int q = 0; q < nch; q++) fl[chans[q]] = S[chans[q]] * ya + C[chans[q]];
      if (event_k)
        for (int q = 0; q < nch; q++) {
          int ch = chans[q];
          S[ch] += col.slope[ch][l + 1];
          C[ch] += col.cst[ch][l + 1];
          col.slope[ch][l + 1] = col.cst[ch][l + 1] = 0;
        }
      for (int q = 0; q < nch; q++) v[chans[q]] = S[chans[q]] * yb + C[chans[q]] - fl[chans[q]];
      event_l = event_k;
      double rowcov = dmin(yb, sq) - dmax(ya, 0);
      if (rowcov <= 0) {
        *dst = bg;
        have_prev = 0;
        continue;
      }
      double area = colcov * rowcov;
      *dst = prev = pixel_colour(&k, v, area, area / (sx * col.sy), px, l, rh, &prev_free);
      have_prev = full_row;
    }
    col.touched[rh + 1] = 0;
    for (int q = 0; q < nch; q++) col.slope[chans[q]][rh + 1] = col.cst[chans[q]][rh + 1] = 0;
  }
  sc->raster_key = key;
  sc->raster_valid = 1;
  return sc->raster;
}
