/* viz_state.c — the plain-data state, its layout, the pure event handler and
 * the parser of viewer scripts (the window replays them; tests and fuzz/ too). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_families.h"
#include "viz_internal.h"
#include "viz_sdl.h"

#define VIZ_MIN_SEQLEN 64
#define VIZ_MAX_SEQLEN (1 << 20)
#define VIZ_MIN_TILE 16
#define VIZ_MAX_TILE 256
#define VIZ_MIN_SPAN 2.0 /* tokens across the plot at the deepest zoom */
#define VIZ_ZOOM_STEP 1.25

void viz_state_init(viz_state *s, int width, int height) {
  memset(s, 0, sizeof *s);
  const fm_family_info *f = fm_family_find("causal_document");
  for (int i = 0; i < fm_family_count(); i++)
    if (fm_family_at(i) == f) s->family = i;
  s->use_family = 1;
  s->seqlen = 8192;
  s->sample = -1;
  s->br = s->bc = 128;
  s->layers = VIZ_LAYER_DEFAULT;
  s->overlay = VIZ_OVERLAY_NONE;
  s->text = 1;
  s->width = width;
  s->height = height;
}

void viz_view_reset(viz_state *s) {
  s->view.x0 = 0;
  s->view.x1 = s->facts.sk > 0 ? s->facts.sk : 1;
  s->view.y0 = 0;
  s->view.y1 = s->facts.sq > 0 ? s->facts.sq : 1;
}

/* ---- layout ---------------------------------------------------------------- */

/* Lines the caption may take: what the layout's estimate of its width needs
 * over the width it has, 1 or 2 (a reference image without text keeps 1). A
 * caption that fits one line starts over the plot, a longer one at the edge. */
static int caption_lines(const viz_state *s, double font, double w, double left, double right,
                         double *x) {
  *x = left;
  if (s->no_title) return 0;
  if (!s->text) return 1;
  char text[1024];
  viz_caption(s, text, sizeof text);
  double need = viz_text_estimate(text, 1.1 * font, 1);
  if (need <= w - left - right) return 1;
  *x = right;
  int n = (int)ceil(need / fmax(1.0, w - 2 * right));
  return n < 1 ? 1 : n > 2 ? 2 : n;
}

/* Sizes the plot for an area (aw x ah) at the mask's aspect. */
static void fit_plot(viz_layout *l, double sq, double sk, double aw, double ah) {
  double aspect = fmax(0.25, fmin(4.0, sk / sq)); /* plot width / height */
  if (aw < 1) aw = 1;
  if (ah < 1) ah = 1;
  double ph = fmin(ah, aw / aspect);
  l->plot.w = fmax(1, floor(ph * aspect));
  l->plot.h = fmax(1, floor(ph));
}

/* The legend alone, for a figure too small for the panel: beside the plot
 * when the width left over holds its widest item, else in rows under the
 * axis title (the plot gives up the height). */
static void layout_legend(const viz_state *s, viz_layout *l, double w, double h, double top,
                          double bottom, double left, double right, double sq, double sk) {
  viz_legend_entry e[VIZ_LEGEND_MAX];
  int n = viz_legend_entries(s, e);
  if (n == 0) return;
  double font = 0.85 * l->font, line = 1.4 * font, widest = 0;
  for (int i = 0; i < n; i++) widest = fmax(widest, viz_text_estimate(e[i].brief, font, 0));
  double item_w = 1.6 * 0.95 * font + 0.6 * font + widest, gap = round(1.2 * l->font);
  double spare = w - right - (left + l->plot.w) - gap;
  if (spare >= item_w && n * line <= l->plot.h) {
    l->plot.x = left;
    l->legend = (viz_rect){l->plot.x + l->plot.w + gap, l->plot.y, spare, n * line};
    l->legend_cols = 1;
    return;
  }
  double avail = w - left - right + 4.0 * l->font; /* under the axis title: from near the edge */
  int cols = (int)floor(avail / (item_w + l->font));
  if (cols < 1) cols = 1;
  if (cols > n) cols = n;
  int rows = (n + cols - 1) / cols;
  double lh = rows * line + 0.3 * l->font;
  fit_plot(l, sq, sk, w - left - right, h - top - bottom - lh);
  l->plot.y = top + floor((h - top - bottom - lh - l->plot.h) / 2);
  l->plot.x = left + floor((w - left - right - l->plot.w) / 2);
  l->legend = (viz_rect){right, h - lh, w - 2 * right, rows * line};
  l->legend_cols = cols;
}

void viz_layout_compute(const viz_state *s, double w, double h, viz_layout *l) {
  double scale = fmin(w / 1200.0, h / 800.0);
  double font = s->font_pt > 0 ? s->font_pt : fmax(9.0, fmin(22.0, 13.0 * scale));
  memset(l, 0, sizeof *l);
  l->font = font;
  double bottom = round(3.6 * font), left = round(5.6 * font), right = round(1.2 * font);
  double gap = round(2.0 * font), panel_min = round(24.0 * font);
  l->caption_line_h = 1.35 * 1.1 * font;
  l->caption_lines = caption_lines(s, font, w, left, right, &l->caption_x);
  l->caption_y = round(1.7 * font);
  double top = l->caption_lines ? round(2.9 * font + (l->caption_lines - 1) * l->caption_line_h)
                                : round(1.2 * font);
  double strip_h = 0;
  if (s->facts.misfit) { /* the columns no interval form holds, marked over the plot */
    strip_h = round(0.7 * font);
    top += strip_h + round(0.3 * font);
  }
  double sq = s->facts.sq > 0 ? s->facts.sq : 1, sk = s->facts.sk > 0 ? s->facts.sk : 1;
  int panel = (s->layers & VIZ_LAYER_PANEL) != 0;
  double aw = w - left - right - (panel ? gap + panel_min : 0), ah = h - top - bottom;
  if (panel && aw < 0.5 * (h - top - bottom)) { /* the plot would be too small: no panel */
    panel = 0;
    aw = w - left - right;
  }
  fit_plot(l, sq, sk, aw, ah);
  l->plot.y = top + floor((ah - l->plot.h) / 2);
  l->plot.x = panel ? left : left + floor((aw - l->plot.w) / 2);
  if (panel) {
    l->panel.x = l->plot.x + l->plot.w + gap;
    l->panel.y = top;
    l->panel.w = w - right - l->panel.x;
    l->panel.h = h - top - bottom;
  } else if (s->layers & VIZ_LAYER_PANEL) {
    layout_legend(s, l, w, h, top, bottom, left, right, sq, sk);
  }
  if (strip_h > 0) l->strip = (viz_rect){l->plot.x, l->plot.y - strip_h - round(0.3 * font), l->plot.w, strip_h};
}

void viz_point_to_tokens(const viz_state *s, const viz_layout *l, double px, double py, double *key,
                         double *row) {
  const viz_view *v = &s->view;
  *key = v->x0 + (px - l->plot.x) / l->plot.w * (v->x1 - v->x0);
  *row = v->y0 + (py - l->plot.y) / l->plot.h * (v->y1 - v->y0);
}

static int in_plot(const viz_layout *l, double px, double py) {
  return px >= l->plot.x && px < l->plot.x + l->plot.w && py >= l->plot.y && py < l->plot.y + l->plot.h;
}

/* ---- view changes ---------------------------------------------------------- */

static void clamp_axis(double *a0, double *a1, double extent) {
  double span = *a1 - *a0;
  if (span > extent) span = extent;
  if (*a0 < 0) *a0 = 0;
  if (*a0 + span > extent) *a0 = extent - span;
  *a1 = *a0 + span;
}

static void clamp_view(viz_state *s) {
  clamp_axis(&s->view.x0, &s->view.x1, s->facts.sk > 0 ? s->facts.sk : 1);
  clamp_axis(&s->view.y0, &s->view.y1, s->facts.sq > 0 ? s->facts.sq : 1);
}

/* Zooms by `factor` (< 1: in) keeping token (kx, ky) where it is. */
static void zoom_at(viz_state *s, double factor, double kx, double ky) {
  viz_view *v = &s->view;
  double sx = v->x1 - v->x0, sy = v->y1 - v->y0;
  double ex = s->facts.sk > 0 ? s->facts.sk : 1, ey = s->facts.sq > 0 ? s->facts.sq : 1;
  /* the same factor on both axes keeps tokens square; stop at the limits */
  double fmin_ = fmax(fmin(VIZ_MIN_SPAN, ex) / sx, fmin(VIZ_MIN_SPAN, ey) / sy);
  double fmax_ = fmin(ex / sx, ey / sy);
  if (fmax_ < fmin_) fmax_ = fmin_;
  factor = fmax(fmin_, fmin(fmax_, factor));
  v->x0 = kx - (kx - v->x0) * factor;
  v->x1 = v->x0 + sx * factor;
  v->y0 = ky - (ky - v->y0) * factor;
  v->y1 = v->y0 + sy * factor;
  clamp_view(s);
}

static void pan_by(viz_state *s, double dkeys, double drows) {
  s->view.x0 += dkeys;
  s->view.x1 += dkeys;
  s->view.y0 += drows;
  s->view.y1 += drows;
  clamp_view(s);
}

/* ---- keys ------------------------------------------------------------------- */

static int32_t pow2_step(int64_t v, int up, int64_t lo, int64_t hi) {
  int64_t p = lo;
  if (up) {
    while (p <= v && p < hi) p *= 2;
    return (int32_t)(p > hi ? hi : p);
  }
  int64_t best = lo;
  for (p = lo; p < v && p <= hi; p *= 2) best = p;
  return (int32_t)best;
}

static const viz_key_help key_table[] = {
    {"mouse wheel", "zoom in / out at the cursor (down to single tokens)"},
    {"left drag", "pan"},
    {"mouse over", "tile and key column under the cursor: classes, bounds, intervals"},
    {"f / F", "next / previous mask family"},
    {"d / D", "next / previous document sample (or a new random draw)"},
    {"r / R", "Br (tile rows) x2 / /2, 16..256"},
    {"c / C", "Bc (tile key columns) x2 / /2, 16..256"},
    {"s / S", "sequence length x2 / /2, 64..1M (families)"},
    {"h / H", "next / previous (batch, head) pair"},
    {"m", "mask layer on / off"},
    {"t", "tile-class layer on / off"},
    {"g", "tile grid lines on / off"},
    {"x", "hatching where min/max rule and exact class differ, on / off"},
    {"o", "overlay: none, cycles (trace), modelled bytes"},
    {"b", "backward pass on / off: its tile, classes, cycles and bytes"},
    {"n", "side panel (legend, numbers) on / off"},
    {"+ / -", "zoom in / out at the centre"},
    {"arrows", "pan by a tenth of the view"},
    {"0 / Home", "reset the view"},
    {"p", "save a screenshot of the view (PNG)"},
    {"e / v", "export the view as PDF / SVG"},
    {"?", "show / hide this key list"},
    {"q / Esc", "quit"},
};

const viz_key_help *viz_key_help_table(int *count) {
  *count = (int)(sizeof key_table / sizeof key_table[0]);
  return key_table;
}

/* A key that cannot act here: the reason in the status line, redrawn. */
static unsigned refuse(viz_state *s, const char *why) {
  snprintf(s->status, sizeof s->status, "%s", why);
  return VIZ_DO_REDRAW;
}

unsigned viz_toggle_backward(viz_state *s) {
  if (!(s->layers & VIZ_LAYER_BACKWARD)) {
    if (s->facts.bwd_br <= 0) return refuse(s, "no backward tile for this head dim in the kernel registry");
    s->layers |= VIZ_LAYER_BACKWARD;
    s->fwd_br = s->br;
    s->fwd_bc = s->bc;
    s->br = s->facts.bwd_br;
    s->bc = s->facts.bwd_bc;
    snprintf(s->status, sizeof s->status, "backward: tiles %d x %d (%s)", s->br, s->bc,
             s->facts.bwd_from_trace ? "the trace's record" : "the kernel's tile, classes from the CPU");
  } else {
    s->layers &= ~(unsigned)VIZ_LAYER_BACKWARD;
    if (s->fwd_br > 0) {
      s->br = s->fwd_br;
      s->bc = s->fwd_bc;
    }
    snprintf(s->status, sizeof s->status, "forward: tiles %d x %d", s->br, s->bc);
  }
  return VIZ_DO_SYNC | VIZ_DO_REDRAW;
}

static unsigned handle_key(viz_state *s, int key) {
  int nfam = fm_family_count();
  s->status[0] = 0;
  switch (key) {
  case 'f':
  case 'F':
    if (!s->use_family) s->use_family = 1;
    else s->family = (s->family + (key == 'f' ? 1 : nfam - 1)) % nfam;
    return VIZ_DO_SYNC | VIZ_DO_REDRAW;
  case 'd':
  case 'D':
    if (!s->use_family) return refuse(s, "the file has no document samples (f: families)");
    if (s->facts.nsamples > 0) {
      int n = s->facts.nsamples;
      s->sample = ((s->sample < 0 ? 0 : s->sample) + (key == 'd' ? 1 : n - 1)) % n;
    } else {
      s->seed = key == 'd' ? s->seed + 1 : (s->seed > 0 ? s->seed - 1 : 0);
    }
    return VIZ_DO_SYNC | VIZ_DO_REDRAW;
  case 'r':
  case 'R':
    s->br = pow2_step(s->br, key == 'r', VIZ_MIN_TILE, VIZ_MAX_TILE);
    return VIZ_DO_SYNC | VIZ_DO_REDRAW;
  case 'c':
  case 'C':
    s->bc = pow2_step(s->bc, key == 'c', VIZ_MIN_TILE, VIZ_MAX_TILE);
    return VIZ_DO_SYNC | VIZ_DO_REDRAW;
  case 's':
  case 'S':
    if (!s->use_family) return refuse(s, "S is fixed by the file (f switches to the families)");
    s->seqlen = pow2_step(s->seqlen, key == 's', VIZ_MIN_SEQLEN, VIZ_MAX_SEQLEN);
    return VIZ_DO_SYNC | VIZ_DO_REDRAW;
  case 'h':
  case 'H':
    if (s->facts.npairs > 1) {
      s->pair = (s->pair + (key == 'h' ? 1 : s->facts.npairs - 1)) % s->facts.npairs;
      return VIZ_DO_SYNC | VIZ_DO_REDRAW;
    }
    return refuse(s, "one mask serves every (batch, head) pair");
  case 'm': s->layers ^= VIZ_LAYER_MASK; return VIZ_DO_REDRAW;
  case 't': s->layers ^= VIZ_LAYER_TILES; return VIZ_DO_REDRAW;
  case 'g': s->layers ^= VIZ_LAYER_GRID; return VIZ_DO_REDRAW;
  case 'x': s->layers ^= VIZ_LAYER_HATCH; return VIZ_DO_REDRAW;
  case 'n': s->layers ^= VIZ_LAYER_PANEL; return VIZ_DO_REDRAW;
  case 'b': return viz_toggle_backward(s);
  case 'o':
    s->overlay = (viz_overlay)((s->overlay + 1) % VIZ_OVERLAY_COUNT);
    if (s->overlay == VIZ_OVERLAY_CYCLES && !s->facts.has_cycles) {
      s->overlay = VIZ_OVERLAY_BYTES;
      snprintf(s->status, sizeof s->status,
               "no cycles at this tile size (they come from a GPU trace); showing modelled bytes");
    }
    return VIZ_DO_REDRAW;
  case '+':
  case '=':
    zoom_at(s, 1 / VIZ_ZOOM_STEP, (s->view.x0 + s->view.x1) / 2, (s->view.y0 + s->view.y1) / 2);
    return VIZ_DO_REDRAW;
  case '-':
  case '_':
    zoom_at(s, VIZ_ZOOM_STEP, (s->view.x0 + s->view.x1) / 2, (s->view.y0 + s->view.y1) / 2);
    return VIZ_DO_REDRAW;
  case VIZ_KEY_LEFT: pan_by(s, -(s->view.x1 - s->view.x0) / 10, 0); return VIZ_DO_REDRAW;
  case VIZ_KEY_RIGHT: pan_by(s, (s->view.x1 - s->view.x0) / 10, 0); return VIZ_DO_REDRAW;
  case VIZ_KEY_UP: pan_by(s, 0, -(s->view.y1 - s->view.y0) / 10); return VIZ_DO_REDRAW;
  case VIZ_KEY_DOWN: pan_by(s, 0, (s->view.y1 - s->view.y0) / 10); return VIZ_DO_REDRAW;
  case '0':
  case VIZ_KEY_HOME: viz_view_reset(s); return VIZ_DO_REDRAW;
  case 'p': return VIZ_DO_SCREENSHOT | VIZ_DO_REDRAW;
  case 'e': return VIZ_DO_EXPORT_PDF | VIZ_DO_REDRAW;
  case 'v': return VIZ_DO_EXPORT_SVG | VIZ_DO_REDRAW;
  case '?': s->show_help = !s->show_help; return VIZ_DO_REDRAW;
  case VIZ_KEY_ESCAPE:
    if (s->show_help) {
      s->show_help = 0;
      return VIZ_DO_REDRAW;
    }
    return VIZ_DO_QUIT;
  case 'q': return VIZ_DO_QUIT;
  }
  return 0;
}

unsigned viz_handle_event(viz_state *s, const viz_event *e) {
  viz_layout l;
  viz_layout_compute(s, s->width, s->height, &l);
  switch (e->type) {
  case VIZ_EV_KEY: return handle_key(s, e->key);
  case VIZ_EV_RESIZE:
    if (e->width < 1 || e->height < 1) return 0;
    s->width = e->width;
    s->height = e->height;
    return VIZ_DO_REDRAW;
  case VIZ_EV_MOTION:
    s->mouse_x = e->x;
    s->mouse_y = e->y;
    s->mouse_in = 1;
    if (s->dragging) {
      double tx = (s->drag_view.x1 - s->drag_view.x0) / l.plot.w;
      double ty = (s->drag_view.y1 - s->drag_view.y0) / l.plot.h;
      s->view = s->drag_view;
      /* in doubles: window coordinates are any int (a script, a huge window) */
      pan_by(s, -((double)e->x - s->drag_x) * tx, -((double)e->y - s->drag_y) * ty);
    }
    return VIZ_DO_REDRAW;
  case VIZ_EV_BUTTON_DOWN:
    s->mouse_x = e->x;
    s->mouse_y = e->y;
    if (e->button == 1 && in_plot(&l, e->x, e->y)) {
      s->dragging = 1;
      s->drag_x = e->x;
      s->drag_y = e->y;
      s->drag_view = s->view;
    }
    return 0;
  case VIZ_EV_BUTTON_UP:
    if (e->button == 1 && s->dragging) {
      s->dragging = 0;
      return VIZ_DO_REDRAW;
    }
    return 0;
  case VIZ_EV_WHEEL: {
    if (e->wheel == 0) return 0;
    double kx, ky;
    if (in_plot(&l, e->x, e->y)) {
      viz_point_to_tokens(s, &l, e->x, e->y, &kx, &ky);
    } else {
      kx = (s->view.x0 + s->view.x1) / 2;
      ky = (s->view.y0 + s->view.y1) / 2;
    }
    zoom_at(s, pow(VIZ_ZOOM_STEP, -e->wheel), kx, ky);
    return VIZ_DO_REDRAW;
  }
  case VIZ_EV_LEAVE:
    s->mouse_in = 0;
    s->dragging = 0;
    return VIZ_DO_REDRAW;
  case VIZ_EV_QUIT: return VIZ_DO_QUIT;
  }
  return 0;
}

/* ---- scripts ---------------------------------------------------------------- */

/* The next whitespace-separated word of *p into buf; 0 when none. */
static int next_word(const char **p, char *buf, size_t cap) {
  const char *q = *p;
  while (*q == ' ' || *q == '\t') q++;
  size_t n = 0;
  while (*q && !isspace((unsigned char)*q)) {
    if (n + 1 < cap) buf[n] = *q;
    n++;
    q++;
  }
  *p = q;
  if (n >= cap) n = cap - 1; /* too long: kept cut, and no name matches it */
  buf[n] = 0;
  return n > 0;
}

fm_status viz_script_parse(const char *line, viz_script_cmd *out, fm_err *err) {
  static const struct {
    const char *word;
    viz_script_op op;
    int nmin, nmax;
  } ops[] = {{"motion", VIZ_SCRIPT_MOTION, 2, 2}, {"down", VIZ_SCRIPT_DOWN, 2, 2},
             {"up", VIZ_SCRIPT_UP, 2, 2},         {"drag", VIZ_SCRIPT_DRAG, 4, 4},
             {"wheel", VIZ_SCRIPT_WHEEL, 1, 3},   {"resize", VIZ_SCRIPT_RESIZE, 2, 2}};
  static const struct {
    const char *name;
    int key;
  } named[] = {{"left", VIZ_KEY_LEFT}, {"right", VIZ_KEY_RIGHT}, {"up", VIZ_KEY_UP},
               {"down", VIZ_KEY_DOWN}, {"home", VIZ_KEY_HOME},   {"escape", VIZ_KEY_ESCAPE}};
  memset(out, 0, sizeof *out);
  const char *p = line;
  char word[32], arg[32];
  if (!next_word(&p, word, sizeof word) || word[0] == '#') return FM_OK;
  if (!strcmp(word, "key")) {
    if (!next_word(&p, arg, sizeof arg))
      return fm_fail(err, FM_EINVAL, "'key' needs a character or a key name");
    out->op = VIZ_SCRIPT_KEY;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
      if (!strcmp(arg, named[i].name)) out->key = named[i].key;
    if (!out->key && (strlen(arg) != 1 || arg[0] < 33 || arg[0] > 126))
      return fm_fail(err, FM_EINVAL, "key '%.31s' is not one character or a named key", arg);
    if (!out->key) out->key = arg[0];
    if (next_word(&p, arg, sizeof arg))
      return fm_fail(err, FM_EINVAL, "unexpected '%.31s' after the key", arg);
    return FM_OK;
  }
  int k = -1;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (!strcmp(word, ops[i].word)) k = (int)i;
  if (k < 0) return fm_fail(err, FM_EINVAL, "unknown event '%.31s' (see fmsim view --help)", word);
  out->op = ops[k].op;
  while (next_word(&p, arg, sizeof arg)) {
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (*end || errno || out->nargs == ops[k].nmax)
      return fm_fail(err, FM_EINVAL, "%s: '%.31s' is not %s", word, arg,
                     out->nargs == ops[k].nmax ? "expected (too many numbers)" : "an integer");
    long lim = out->op == VIZ_SCRIPT_RESIZE ? 16384
               : out->op == VIZ_SCRIPT_WHEEL && out->nargs == 0 ? VIZ_SCRIPT_MAX_WHEEL
                                                                : VIZ_SCRIPT_MAX_COORD;
    long lo = out->op == VIZ_SCRIPT_RESIZE ? 1 : -lim;
    if (v < lo || v > lim)
      return fm_fail(err, FM_EINVAL, "%s: %.31s is out of range (%ld..%ld)", word, arg, lo, lim);
    out->a[out->nargs++] = (int)v;
  }
  if (out->nargs < ops[k].nmin || (out->op == VIZ_SCRIPT_WHEEL && out->nargs == 2))
    return fm_fail(err, FM_EINVAL, "%s: expected %s", word,
                   out->op == VIZ_SCRIPT_WHEEL ? "N [X Y]" : out->op == VIZ_SCRIPT_DRAG ? "X0 Y0 X1 Y1"
                   : out->op == VIZ_SCRIPT_RESIZE ? "W H" : "X Y");
  return FM_OK;
}

static viz_event mouse_event(viz_event_type type, int x, int y) {
  viz_event e;
  memset(&e, 0, sizeof e);
  e.type = type;
  e.x = x;
  e.y = y;
  e.button = 1;
  return e;
}

int viz_script_events(const viz_script_cmd *c, viz_event *ev) {
  const int *a = c->a;
  int n = 0;
  switch (c->op) {
  case VIZ_SCRIPT_NONE: break;
  case VIZ_SCRIPT_KEY:
    memset(&ev[n], 0, sizeof ev[n]);
    ev[n].type = VIZ_EV_KEY;
    ev[n++].key = c->key;
    break;
  case VIZ_SCRIPT_MOTION: ev[n++] = mouse_event(VIZ_EV_MOTION, a[0], a[1]); break;
  case VIZ_SCRIPT_DOWN: ev[n++] = mouse_event(VIZ_EV_BUTTON_DOWN, a[0], a[1]); break;
  case VIZ_SCRIPT_UP: ev[n++] = mouse_event(VIZ_EV_BUTTON_UP, a[0], a[1]); break;
  case VIZ_SCRIPT_DRAG:
    ev[n++] = mouse_event(VIZ_EV_MOTION, a[0], a[1]);
    ev[n++] = mouse_event(VIZ_EV_BUTTON_DOWN, a[0], a[1]);
    for (int k = 1; k <= 4; k++) /* coordinates are within +-2^20: no overflow */
      ev[n++] = mouse_event(VIZ_EV_MOTION, a[0] + (a[2] - a[0]) * k / 4, a[1] + (a[3] - a[1]) * k / 4);
    ev[n++] = mouse_event(VIZ_EV_BUTTON_UP, a[2], a[3]);
    break;
  case VIZ_SCRIPT_WHEEL:
    if (c->nargs == 3) ev[n++] = mouse_event(VIZ_EV_MOTION, a[1], a[2]);
    ev[n] = mouse_event(VIZ_EV_WHEEL, a[1], a[2]);
    ev[n++].wheel = a[0];
    break;
  case VIZ_SCRIPT_RESIZE:
    memset(&ev[n], 0, sizeof ev[n]);
    ev[n].type = VIZ_EV_RESIZE;
    ev[n].width = a[0];
    ev[n++].height = a[1];
    break;
  }
  return n;
}
