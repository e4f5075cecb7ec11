/* viz_svg_text.c — text on SVG pages as <text> elements, editable in any SVG
 * editor, instead of the glyph outlines cairo's SVG surface draws (it has no
 * setting for text). The writer (viz_export.c) attaches a collector to an SVG
 * surface and keeps cairo's output in memory; viz_text_at asks
 * viz_svg_text_record first, which takes the string with its device position,
 * angle, size, weight and colour instead of drawing it; at the end the writer
 * puts the <text> elements before cairo's closing </svg> (viz_svg_text_compose).
 * Text is drawn last in every figure, so elements after the drawing keep its
 * stacking. The ink log still records every string (viz_text.c). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viz_internal.h"

const cairo_user_data_key_t viz_svg_text_key = {0};

static int buf_add(viz_svg_buf *b, const char *s, size_t n) {
  if (b->failed) return -1;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
      b->failed = 1;
      return -1;
    }
    b->data = p, b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
  return 0;
}

static void buf_printf(viz_svg_buf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) buf_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void buf_escaped(viz_svg_buf *b, const char *t) {
  for (; *t; t++) {
    const char *e = *t == '&' ? "&amp;" : *t == '<' ? "&lt;" : *t == '>' ? "&gt;" : *t == '"' ? "&quot;" : NULL;
    if (e) buf_add(b, e, strlen(e));
    else if ((unsigned char)*t >= 0x20 || *t == '\t') buf_add(b, t, 1);
  }
}

cairo_status_t viz_svg_buf_write(void *closure, const unsigned char *data, unsigned int len) {
  return buf_add(closure, (const char *)data, len) ? CAIRO_STATUS_NO_MEMORY : CAIRO_STATUS_SUCCESS;
}

int viz_svg_text_record(cairo_t *cr, double x, double y, const char *t) {
  viz_svg_buf *texts = cairo_surface_get_user_data(cairo_get_target(cr), &viz_svg_text_key);
  if (!texts) return 0;
  double dx = x, dy = y, ux = 1, uy = 0;
  cairo_user_to_device(cr, &dx, &dy);
  cairo_user_to_device_distance(cr, &ux, &uy);
  const double angle = atan2(uy, ux) * 180.0 / M_PI;
  cairo_matrix_t fm;
  cairo_get_font_matrix(cr, &fm);
  cairo_font_face_t *face = cairo_get_font_face(cr);
  const int bold = cairo_font_face_get_type(face) == CAIRO_FONT_TYPE_TOY &&
                   cairo_toy_font_face_get_weight(face) == CAIRO_FONT_WEIGHT_BOLD;
  const char *family = cairo_font_face_get_type(face) == CAIRO_FONT_TYPE_TOY
                           ? cairo_toy_font_face_get_family(face) : "sans-serif";
  double r = 0, g = 0, b = 0, a = 1;
  cairo_pattern_get_rgba(cairo_get_source(cr), &r, &g, &b, &a); /* a solid source: text is never a gradient */
  buf_printf(texts, "<text x=\"%.3f\" y=\"%.3f\" font-family=\"", dx, dy);
  buf_escaped(texts, family);
  buf_printf(texts, "\" font-size=\"%.3f\"%s fill=\"rgb(%d,%d,%d)\"", fm.xx * hypot(ux, uy),
             bold ? " font-weight=\"bold\"" : "", (int)lround(r * 255), (int)lround(g * 255),
             (int)lround(b * 255));
  if (a < 1) buf_printf(texts, " fill-opacity=\"%.3f\"", a);
  if (fabs(angle) > 1e-9) buf_printf(texts, " transform=\"rotate(%.3f %.3f %.3f)\"", angle, dx, dy);
  buf_printf(texts, " xml:space=\"preserve\">");
  buf_escaped(texts, t);
  buf_printf(texts, "</text>\n");
  return 1;
}

fm_status viz_svg_text_compose(const viz_svg_buf *svg, const viz_svg_buf *texts, viz_svg_buf *out,
                               fm_err *err) {
  if (svg->failed || texts->failed)
    return fm_fail(err, FM_ENOMEM, "out of memory while writing the SVG");
  const char *end = NULL;
  for (const char *p = svg->data ? strstr(svg->data, "</svg>") : NULL; p; p = strstr(p + 1, "</svg>")) end = p;
  if (!end) return fm_fail(err, FM_EIO, "cairo's SVG has no closing </svg>");
  memset(out, 0, sizeof *out);
  buf_add(out, svg->data, (size_t)(end - svg->data));
  if (texts->len) {
    buf_printf(out, "<g id=\"text\">\n");
    buf_add(out, texts->data, texts->len);
    buf_printf(out, "</g>\n");
  }
  buf_add(out, end, strlen(end));
  if (out->failed) return fm_fail(err, FM_ENOMEM, "out of memory while writing the SVG");
  return FM_OK;
}
