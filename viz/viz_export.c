/* viz_export.c — figures into files (PNG, SVG, PDF: three cairo surfaces of
 * the same draw call), written atomically, and the offscreen frame benchmark. */
#define _POSIX_C_SOURCE 200809L
#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fm_fileio.h"
#include "viz_internal.h"

#define VIZ_MAX_PIXELS 16384

fm_status viz_format_from_path(const char *path, viz_format *out, fm_err *err) {
  const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
  if (!dot || (slash && dot < slash) || dot == path || (slash && dot == slash + 1))
    return fm_fail(err, FM_EINVAL, "%s: the output needs an extension: .png, .svg or .pdf", path);
  if (!strcasecmp(dot, ".png")) *out = VIZ_FMT_PNG;
  else if (!strcasecmp(dot, ".svg")) *out = VIZ_FMT_SVG;
  else if (!strcasecmp(dot, ".pdf")) *out = VIZ_FMT_PDF;
  else
    return fm_fail(err, FM_EINVAL, "%s: unknown output type '%s' (expected .png, .svg or .pdf)", path, dot);
  return FM_OK;
}

typedef struct sink {
  fm_atomic_file af;
  fm_status st;
  fm_err err;
} sink;

static cairo_status_t sink_write(void *closure, const unsigned char *data, unsigned int len) {
  sink *k = closure;
  if (k->st != FM_OK) return CAIRO_STATUS_WRITE_ERROR;
  k->st = fm_atomic_write(&k->af, data, len, &k->err);
  return k->st == FM_OK ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

/* The SVG kept in memory, its <text> elements added, into the file. */
static fm_status svg_out(sink *k, const viz_svg_buf *svg, const viz_svg_buf *texts, const char *path,
                         fm_err *err) {
  viz_svg_buf out;
  fm_status st = viz_svg_text_compose(svg, texts, &out, err);
  if (st != FM_OK) {
    if (err) {
      fm_err e = *err;
      fm_fail(err, st, "%s: %s", path, e.msg);
    }
    return st;
  }
  if (sink_write(k, (const unsigned char *)out.data, (unsigned)out.len) != CAIRO_STATUS_SUCCESS && err)
    *err = k->err;
  free(out.data);
  return k->st;
}

/* Pixels per layout unit of mask rasters on vector pages (read by viz_draw). */
const cairo_user_data_key_t viz_raster_scale_key = {0};

fm_status viz_write_figure(const char *path, viz_format fmt, double w, double h, double dpi,
                           viz_draw_fn draw, void *ctx, fm_err *err) {
  return viz_write_figure_ex(path, 0, fmt, w, h, dpi, draw, ctx, err);
}

fm_status viz_write_figure_ex(const char *path, unsigned out_flags, viz_format fmt, double w, double h,
                              double dpi, viz_draw_fn draw, void *ctx, fm_err *err) {
  if (!(w >= 1 && w <= VIZ_MAX_PIXELS && h >= 1 && h <= VIZ_MAX_PIXELS))
    return fm_fail(err, FM_EINVAL, "size %gx%g: width and height must be in 1..%d", w, h, VIZ_MAX_PIXELS);
  if (!(dpi >= 18 && dpi <= 2400)) return fm_fail(err, FM_EINVAL, "dpi %g must be in 18..2400", dpi);
  double scale = dpi / 72.0;
  int pw = (int)ceil(w * scale - 1e-9), ph = (int)ceil(h * scale - 1e-9);
  if (fmt == VIZ_FMT_PNG && (pw > VIZ_MAX_PIXELS || ph > VIZ_MAX_PIXELS))
    return fm_fail(err, FM_EINVAL, "size %gx%g at %g dpi is %dx%d pixels; the limit is %d per side", w, h,
                   dpi, pw, ph, VIZ_MAX_PIXELS);
  sink k;
  memset(&k, 0, sizeof k);
  viz_svg_buf svg = {0}, svg_texts = {0};
  fm_status st = fm_atomic_open_ex(&k.af, path, out_flags, err);
  if (st != FM_OK) return st;
  cairo_surface_t *surf = NULL;
  if (fmt == VIZ_FMT_PNG) {
    surf = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, pw, ph);
  } else if (fmt == VIZ_FMT_PDF) {
    surf = cairo_pdf_surface_create_for_stream(sink_write, &k, w, h);
    cairo_pdf_surface_set_metadata(surf, CAIRO_PDF_METADATA_CREATOR, "fmsim");
    /* a fixed date keeps the file reproducible (docs/DESIGN.md, "Style", rule 8: no timestamps) */
    cairo_pdf_surface_set_metadata(surf, CAIRO_PDF_METADATA_CREATE_DATE, "2000-01-01T00:00:00Z");
    cairo_pdf_surface_set_metadata(surf, CAIRO_PDF_METADATA_MOD_DATE, "2000-01-01T00:00:00Z");
  } else { /* kept in memory: the text goes in as <text> elements at the end (viz_svg_text.c) */
    surf = cairo_svg_surface_create_for_stream(viz_svg_buf_write, &svg, w, h);
    cairo_svg_surface_restrict_to_version(surf, CAIRO_SVG_VERSION_1_1);
    cairo_surface_set_user_data(surf, &viz_svg_text_key, &svg_texts, NULL);
  }
  if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) {
    st = fm_fail(err, FM_ENOMEM, "%s: cannot create the drawing surface: %s", path,
                 cairo_status_to_string(cairo_surface_status(surf)));
    cairo_surface_destroy(surf);
    fm_atomic_close(&k.af, 0, NULL);
    return st;
  }
  double *raster_scale = malloc(sizeof *raster_scale);
  if (raster_scale) {
    *raster_scale = fmt == VIZ_FMT_PNG ? 0 : scale;
    cairo_surface_set_user_data(surf, &viz_raster_scale_key, raster_scale, free);
  }
  cairo_t *cr = cairo_create(surf);
  if (fmt == VIZ_FMT_PNG) cairo_scale(cr, scale, scale);
  st = draw(cr, w, h, ctx, err);
  if (st == FM_OK && cairo_status(cr) != CAIRO_STATUS_SUCCESS)
    st = fm_fail(err, FM_EIO, "%s: drawing failed: %s", path, cairo_status_to_string(cairo_status(cr)));
  cairo_destroy(cr);
  if (st == FM_OK && fmt == VIZ_FMT_PNG) {
    cairo_status_t cs = cairo_surface_write_to_png_stream(surf, sink_write, &k);
    if (cs != CAIRO_STATUS_SUCCESS && k.st == FM_OK)
      st = fm_fail(err, FM_EIO, "%s: PNG encoding failed: %s", path, cairo_status_to_string(cs));
  }
  cairo_surface_finish(surf);
  if (st == FM_OK && cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS && k.st == FM_OK)
    st = fm_fail(err, FM_EIO, "%s: writing failed: %s", path,
                 cairo_status_to_string(cairo_surface_status(surf)));
  cairo_surface_destroy(surf);
  if (st == FM_OK && fmt == VIZ_FMT_SVG) st = svg_out(&k, &svg, &svg_texts, path, err);
  free(svg.data);
  free(svg_texts.data);
  if (st == FM_OK && k.st != FM_OK) {
    st = k.st;
    if (err) *err = k.err;
  }
  fm_status cs = fm_atomic_close(&k.af, st == FM_OK, st == FM_OK ? err : NULL);
  return st != FM_OK ? st : cs;
}

fm_status viz_write_png_surface(const char *path, cairo_surface_t *surface, fm_err *err) {
  sink k;
  memset(&k, 0, sizeof k);
  fm_status st = fm_atomic_open_ex(&k.af, path, FM_OUT_NOFOLLOW, err);
  if (st != FM_OK) return st;
  cairo_surface_flush(surface);
  cairo_status_t cs = cairo_surface_write_to_png_stream(surface, sink_write, &k);
  if (k.st != FM_OK) {
    st = k.st;
    if (err) *err = k.err;
  } else if (cs != CAIRO_STATUS_SUCCESS) {
    st = fm_fail(err, FM_EIO, "%s: PNG encoding failed: %s", path, cairo_status_to_string(cs));
  }
  fm_status c2 = fm_atomic_close(&k.af, st == FM_OK, st == FM_OK ? err : NULL);
  return st != FM_OK ? st : c2;
}

/* ---- frame benchmark ------------------------------------------------------ */

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double percentile(const double *sorted, int n, double p) {
  if (n == 0) return 0;
  double r = p / 100.0 * (n - 1);
  int i = (int)floor(r);
  if (i >= n - 1) return sorted[n - 1];
  return sorted[i] + (sorted[i + 1] - sorted[i]) * (r - i);
}

/* The k-th event of the scripted session: zoom in at a wandering point, hover,
 * drag, zoom back out. */
static viz_event scripted_event(const viz_layout *l, int k) {
  viz_event e;
  memset(&e, 0, sizeof e);
  int phase = k % 48;
  double cx = l->plot.x + l->plot.w / 2, cy = l->plot.y + l->plot.h / 2;
  if (phase < 12) {
    e.type = VIZ_EV_WHEEL;
    e.wheel = 1;
    e.x = (int)(l->plot.x + l->plot.w * (0.25 + 0.03 * phase));
    e.y = (int)(l->plot.y + l->plot.h * (0.7 - 0.02 * phase));
  } else if (phase < 24) {
    e.type = VIZ_EV_MOTION;
    e.x = (int)(l->plot.x + l->plot.w * (0.1 + 0.07 * (phase - 12)));
    e.y = (int)(l->plot.y + l->plot.h * (0.9 - 0.06 * (phase - 12)));
  } else if (phase == 24) {
    e.type = VIZ_EV_BUTTON_DOWN;
    e.button = 1;
    e.x = (int)cx;
    e.y = (int)cy;
  } else if (phase < 35) {
    e.type = VIZ_EV_MOTION;
    e.x = (int)(cx - 17 * (phase - 24));
    e.y = (int)(cy - 11 * (phase - 24));
  } else if (phase == 35) {
    e.type = VIZ_EV_BUTTON_UP;
    e.button = 1;
    e.x = (int)(cx - 17 * 10);
    e.y = (int)(cy - 11 * 10);
  } else {
    e.type = VIZ_EV_WHEEL;
    e.wheel = -1;
    e.x = (int)cx;
    e.y = (int)cy;
  }
  return e;
}

/* One frame: the event handled, the scene brought up to date and drawn into
 * cr's surface; its wall time in *ms. */
static fm_status timed_frame(viz_state *s, const viz_event *e, cairo_t *cr, double *ms, fm_err *err) {
  double t0 = now_ms();
  fm_status st = FM_OK;
  if (viz_handle_event(s, e) & VIZ_DO_SYNC) st = viz_scene_sync(s->scene, s, err);
  viz_draw(cr, s, s->width, s->height);
  cairo_surface_flush(cairo_get_target(cr));
  *ms = now_ms() - t0;
  return st;
}

fm_status viz_bench_frames(viz_state *s, int n, viz_bench_result *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  if (n < 1) return fm_fail(err, FM_EINVAL, "--bench-frames needs at least one frame");
  cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, s->width, s->height);
  cairo_t *cr = cairo_create(surf);
  static const int rebuild_keys[] = {'c', 'C', 'r', 'R', 'c', 'C', 'r', 'R'};
  const int nrebuild = (int)(sizeof rebuild_keys / sizeof rebuild_keys[0]);
  double *times = malloc(sizeof(double) * (size_t)n), *rebuild = malloc(sizeof(double) * (size_t)nrebuild);
  if (!times || !rebuild) {
    free(times);
    free(rebuild);
    cairo_destroy(cr);
    cairo_surface_destroy(surf);
    return fm_fail(err, FM_ENOMEM, "out of memory");
  }
  fm_status st = viz_scene_sync(s->scene, s, err);
  if (st == FM_OK) viz_draw(cr, s, s->width, s->height); /* warm-up */
  viz_layout l;
  viz_layout_compute(s, s->width, s->height, &l);
  for (int k = 0; k < n && st == FM_OK; k++) {
    viz_event e = scripted_event(&l, k);
    st = timed_frame(s, &e, cr, &times[k], err);
  }
  for (int k = 0; k < nrebuild && st == FM_OK; k++) { /* tile-size keys: the scene rebuilt */
    viz_event e = {.type = VIZ_EV_KEY, .key = rebuild_keys[k]};
    st = timed_frame(s, &e, cr, &rebuild[k], err);
  }
  if (st == FM_OK) {
    qsort(times, (size_t)n, sizeof *times, cmp_double);
    qsort(rebuild, (size_t)nrebuild, sizeof *rebuild, cmp_double);
    out->frames = n;
    out->p50_ms = percentile(times, n, 50);
    out->p90_ms = percentile(times, n, 90);
    out->p99_ms = percentile(times, n, 99);
    out->max_ms = times[n - 1];
    out->rebuild_frames = nrebuild;
    out->rebuild_p50_ms = percentile(rebuild, nrebuild, 50);
    out->rebuild_max_ms = rebuild[nrebuild - 1];
  }
  free(times);
  free(rebuild);
  cairo_destroy(cr);
  cairo_surface_destroy(surf);
  return st;
}
