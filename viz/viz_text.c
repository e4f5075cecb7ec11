/* viz_text.c — text for every figure: cairo's toy API with DejaVu Sans, text
 * that fits a width (shrunk a little, then cut with an ellipsis: never drawn
 * past it), titles wrapped over lines, and the ink log that tests attach to a
 * surface to see every string and legend swatch drawn and where its ink lies
 * (docs/DESIGN.md, "Viewer and figures"). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "viz_internal.h"

#define FONT_FACE "DejaVu Sans"

/* ---- the ink log ------------------------------------------------------------ */

static const cairo_user_data_key_t ink_log_key = {0};

void viz_ink_log_attach(cairo_surface_t *surface, viz_ink_log *log) {
  cairo_surface_set_user_data(surface, &ink_log_key, log, NULL);
}

/* Appends the device-space box of the user-space rectangle (x, y, w, h). */
static void ink_add(cairo_t *cr, const char *text, double x, double y, double w, double h) {
  viz_ink_log *log = cairo_surface_get_user_data(cairo_get_target(cr), &ink_log_key);
  if (!log) return;
  if (log->count >= log->cap || !log->items) {
    log->count++;
    return;
  }
  double cx[4] = {x, x + w, x, x + w}, cy[4] = {y, y, y + h, y + h};
  viz_ink *k = &log->items[log->count++];
  k->x0 = k->y0 = INFINITY;
  k->x1 = k->y1 = -INFINITY;
  for (int i = 0; i < 4; i++) {
    cairo_user_to_device(cr, &cx[i], &cy[i]);
    k->x0 = fmin(k->x0, cx[i]);
    k->x1 = fmax(k->x1, cx[i]);
    k->y0 = fmin(k->y0, cy[i]);
    k->y1 = fmax(k->y1, cy[i]);
  }
  snprintf(k->text, sizeof k->text, "%s", text);
}

void viz_ink_mark(cairo_t *cr, double x, double y, double w, double h) { ink_add(cr, "", x, y, w, h); }

/* ---- fonts and single lines ------------------------------------------------- */

void viz_set_rgb(cairo_t *cr, uint32_t c) {
  cairo_set_source_rgb(cr, ((c >> 16) & 255) / 255.0, ((c >> 8) & 255) / 255.0, (c & 255) / 255.0);
}

void viz_set_font(cairo_t *cr, double size, int bold) {
  cairo_select_font_face(cr, FONT_FACE, CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double viz_text_width(cairo_t *cr, const char *t) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, t, &e);
  return e.x_advance;
}

void viz_text_at(cairo_t *cr, double x, double y, const char *t, double align) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, t, &e);
  double x0 = x - align * e.x_advance;
  if (!viz_svg_text_record(cr, x0, y, t)) { /* an SVG page takes it as <text> (viz_svg_text.c) */
    cairo_move_to(cr, x0, y);
    cairo_show_text(cr, t);
  }
  if (e.width > 0) ink_add(cr, t, x0 + e.x_bearing, y + e.y_bearing, e.width, e.height);
}

/* Bytes of the UTF-8 character before position n of t. */
static size_t utf8_back(const char *t, size_t n) {
  size_t k = n;
  while (k > 0 && ((unsigned char)t[k - 1] & 0xC0) == 0x80) k--;
  return k > 0 ? n - (k - 1) : 0;
}

void viz_text_fit(cairo_t *cr, double x, double y, const char *t, double maxw, double align) {
  cairo_matrix_t fm;
  cairo_get_font_matrix(cr, &fm);
  double size = fm.xx, w = viz_text_width(cr, t);
  if (w <= maxw + 1e-6 * (1 + fabs(maxw)) || w <= 0) { /* a width computed back from a sum */
    viz_text_at(cr, x, y, t, align);
    return;
  }
  /* shrink down to 80%, then cut characters and end with an ellipsis */
  double s2 = fmax(size * 0.8, size * maxw / w);
  cairo_set_font_size(cr, s2);
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", t);
  size_t n = strlen(buf);
  while (n > 0 && viz_text_width(cr, buf) > maxw) {
    n -= utf8_back(buf, n);
    while (n > 0 && buf[n - 1] == ' ') n--;
    snprintf(buf + n, sizeof buf - n, "\xE2\x80\xA6"); /* U+2026 */
  }
  if (n > 0 || viz_text_width(cr, buf) <= maxw) viz_text_at(cr, x, y, buf, align);
  cairo_set_font_size(cr, size);
}

/* ---- estimates (the layout, which has no cairo context) --------------------- */

double viz_text_estimate(const char *t, double size, int bold) {
  int64_t chars = 0;
  for (const unsigned char *p = (const unsigned char *)t; *p; p++) chars += (*p & 0xC0) != 0x80;
  return (double)chars * size * (bold ? 0.62 : 0.56);
}

/* ---- wrapped titles --------------------------------------------------------- */

#define SEP "  \xC2\xB7  " /* "  ·  ": where a caption prefers to break */

/* Width of t[a, b) with trailing spaces left out. */
static double span_width(cairo_t *cr, const char *t, size_t a, size_t b) {
  char buf[512];
  while (b > a && t[b - 1] == ' ') b--;
  snprintf(buf, sizeof buf, "%.*s", (int)(b - a), t + a);
  return viz_text_width(cr, buf);
}

/* Where the line starting at `at` ends (exclusive) and the next one starts:
 * the whole rest when it fits; else the furthest separator that fits; else
 * the furthest space; else the first break (the line is cut when drawn). */
static size_t line_end(cairo_t *cr, const char *t, size_t at, double maxw, size_t *next) {
  const size_t len = strlen(t), seplen = strlen(SEP);
  size_t sep = 0, sep_next = 0, sp = 0, sp_next = 0, first = 0, first_next = 0;
  *next = len;
  if (span_width(cr, t, at, len) <= maxw) return len;
  for (size_t p = at + 1; p < len; p++) {
    int is_sep = !strncmp(t + p, SEP, seplen);
    if (t[p] != ' ') continue;
    size_t nx = is_sep ? p + seplen : p + 1;
    if (span_width(cr, t, at, p) > maxw) {
      if (!sep && !sp && !first) {
        first = p;
        first_next = nx;
      }
      break;
    }
    if (is_sep) {
      sep = p;
      sep_next = nx;
    } else {
      sp = p;
      sp_next = nx;
    }
    if (is_sep) p += seplen - 1;
  }
  if (sep) *next = sep_next;
  else if (sp) *next = sp_next;
  else if (first) *next = first_next;
  return sep ? sep : sp ? sp : first ? first : len;
}

int viz_text_wrap(cairo_t *cr, const char *t, double maxw, int max_lines, char (*lines)[512]) {
  size_t at = 0, len = strlen(t);
  int n = 0;
  while (at < len && n < max_lines) {
    size_t next, end = n == max_lines - 1 ? len : line_end(cr, t, at, maxw, &next);
    if (n == max_lines - 1) next = len;
    while (end > at && t[end - 1] == ' ') end--;
    snprintf(lines[n++], 512, "%.*s", (int)(end - at), t + at);
    at = next;
  }
  return n;
}

int viz_text_wraps_into(cairo_t *cr, const char *t, double maxw, int max_lines) {
  char lines[8][512];
  if (max_lines < 1) return 0;
  if (strlen(t) >= sizeof lines[0]) return 0;
  int n = viz_text_wrap(cr, t, maxw, 8, lines);
  if (n > max_lines) return 0;
  for (int i = 0; i < n; i++) /* the last line holds the rest: it may still be too wide */
    if (viz_text_width(cr, lines[i]) > maxw + 1e-6 * (1 + fabs(maxw))) return 0;
  return 1;
}

int viz_text_lines_draw(cairo_t *cr, double x, double y, double line_h, const char *t, double maxw,
                        int max_lines, double align) {
  char lines[8][512];
  if (max_lines > 8) max_lines = 8;
  int n = viz_text_wrap(cr, t, maxw, max_lines, lines);
  for (int i = 0; i < n; i++) viz_text_fit(cr, x, y + i * line_h, lines[i], maxw, align);
  return n;
}
