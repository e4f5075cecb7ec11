/* viz.h — fmsim's viewer and figures (docs/DESIGN.md, "Viewer and figures").
 *
 * Three parts, kept apart so that each can be tested alone:
 *   viz_state           plain data: which mask, tile size, layers, the view
 *                       rectangle in tokens, the mouse; no pointers it owns;
 *   viz_handle_event    a pure function of (state, event): changes only the
 *                       state and says what the caller must do next (sync the
 *                       scene, redraw, save a screenshot, quit);
 *   viz_draw            draws a state into any cairo context (window, PNG,
 *                       SVG, PDF), knowing nothing of its backend.
 * Derived data (the mask, its tile classes, trace arrays, a raster cache)
 * lives in a viz_scene that viz_scene_sync brings up to date with the state,
 * rebuilding only what changed: a new family or S rebuilds the mask, a new
 * Br/Bc reclassifies, a pan or zoom only re-aggregates pixels.
 *
 * Drawing never visits Sq*Sk elements: each pixel column covers a key range
 * and each pixel row a query range, and the fraction of masked elements (or of
 * tiles of each class) in that rectangle is computed exactly from the column
 * intervals, O(Sk + pixels) per frame (viz_raster.c). Nothing here keeps a
 * per-tile array either (tile classes are run-length pieces per key tile), so
 * S = 1M with 16 x 16 tiles costs what S = 64 does, plus O(Sk).
 */
#ifndef VIZ_H
#define VIZ_H

#include <cairo.h>
#include <stdint.h>

#include "fm_colmask.h"
#include "fm_kernels.h"
#include "fm_status.h"
#include "fm_tiles.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Layers and decorations, bits of viz_state.layers. */
enum {
  VIZ_LAYER_MASK = 1u << 0,  /* masked / visible elements */
  VIZ_LAYER_TILES = 1u << 1, /* tile classes (min/max rule) */
  VIZ_LAYER_GRID = 1u << 2,  /* tile grid lines when tiles are large enough to see */
  VIZ_LAYER_HATCH = 1u << 3, /* hatch tiles where the min/max rule and the exact class differ */
  VIZ_LAYER_PANEL = 1u << 4, /* side panel: legend, live numbers, hover details */
  VIZ_LAYER_BACKWARD = 1u << 5, /* tiles and overlays of the backward pass: the backward's
                                   tile, a trace's *_bwd.npy (classes, cycles) or the CPU's
                                   classes there, the backward's modelled bytes */
  VIZ_LAYER_DEFAULT = VIZ_LAYER_MASK | VIZ_LAYER_TILES | VIZ_LAYER_GRID | VIZ_LAYER_HATCH |
                      VIZ_LAYER_PANEL
};

/* Per-tile overlays drawn over the tile layer, with a colour bar. */
typedef enum viz_overlay {
  VIZ_OVERLAY_NONE = 0,
  VIZ_OVERLAY_CYCLES = 1, /* tile_cycles.npy of a trace (GPU clock64 cycles per tile) */
  VIZ_OVERLAY_BYTES = 2,  /* modelled HBM bytes per tile (viz_tile_model_bytes) */
  VIZ_OVERLAY_COUNT = 3
} viz_overlay;

/* The visible part of the mask, in tokens: keys [x0, x1), query rows [y0, y1). */
typedef struct viz_view {
  double x0, x1, y0, y1;
} viz_view;

/* Facts about the data shown, written by viz_scene_sync and read by the event
 * handler (to clamp the view and cycle samples) without touching the scene. */
typedef struct viz_facts {
  int32_t sq, sk;        /* query rows, key columns of the current mask */
  int has_file;          /* 1: a file (trace, .npy) was given at start */
  int nsamples;          /* document samples for the current S (0: documents are drawn) */
  int32_t npairs;        /* (batch, head) pairs: B * H */
  int has_cycles;        /* the cycles overlay is available at the current Br x Bc */
  int32_t file_br, file_bc; /* tile size of the trace's arrays of the shown pass (0 without) */
  int32_t bwd_br, bwd_bc;   /* the backward's tile: the trace's, else the kernel's (registry) */
  int bwd_from_trace;       /* the trace has the backward's arrays (tiles_bwd.npy) */
  int misfit;               /* the mask fits no interval form (a dense file): drawn from its
                               runs, tile classes exact, the columns no form holds marked */
  int64_t misfit_columns;   /* columns of the shown pair that no interval form holds */
} viz_facts;

/* What the window, the figures and the tests share. Plain data: copying it
 * copies the whole viewer state (the scene pointer is not owned). */
typedef struct viz_state {
  /* which mask: a family (use_family = 1) or the file given at start */
  int use_family;
  int family;       /* index for fm_family_at() */
  int64_t seqlen;   /* S = Sq = Sk of a family mask, 64 .. 1M from the keys */
  int sample;       /* document sample of S, -1: default / documents drawn */
  uint64_t seed;    /* seed of random draws (documents when S has no sample, eviction) */
  int32_t br, bc;   /* tile rows x key columns; keys move them by powers of two in 16..256 */
  int32_t fwd_br, fwd_bc; /* the tile to go back to when the backward layer is turned off */
  int32_t pair;     /* (batch, head) pair shown: b * H + h */
  /* how */
  unsigned layers;     /* VIZ_LAYER_* bits */
  viz_overlay overlay;
  viz_view view;
  int text;            /* 0: draw no text at all (font-independent reference images) */
  double font_pt;      /* > 0: the base font size in layout units (8: a figure on paper);
                          0: from the size, 9..22 (screens) */
  char title[256];     /* the caption line; "" : the default (mask, S, tiles, rho) */
  int no_title;        /* 1: no caption line, its room goes to the plot */
  double raster_scale; /* mask raster pixels per layout unit; 0: from the cairo device scale */
  /* window and mouse, in layout units (pixels of the window) */
  int width, height;
  int mouse_x, mouse_y, mouse_in;
  int dragging;
  int drag_x, drag_y;
  viz_view drag_view;
  int show_help;       /* the key list drawn over the plot */
  int exports;         /* screenshots and exports written so far (names files) */
  char status[520];    /* last message for the user ("" when none) */
  viz_facts facts;
  struct viz_scene *scene; /* derived data read by viz_draw; set by the owner */
} viz_state;

/* Defaults: causal_document, S = 8192, 128 x 128 tiles, every layer on. */
void viz_state_init(viz_state *s, int width, int height);
/* The whole mask in view. */
void viz_view_reset(viz_state *s);

/* ---- events -------------------------------------------------------------- */

typedef enum viz_event_type {
  VIZ_EV_KEY = 1,     /* key: a printable ASCII character (shift applied) or VIZ_KEY_* */
  VIZ_EV_MOTION,      /* x, y */
  VIZ_EV_BUTTON_DOWN, /* x, y, button (1 = left) */
  VIZ_EV_BUTTON_UP,   /* x, y, button */
  VIZ_EV_WHEEL,       /* x, y, wheel: notches, > 0 away from the user = zoom in */
  VIZ_EV_RESIZE,      /* width, height */
  VIZ_EV_LEAVE,       /* the pointer left the window */
  VIZ_EV_QUIT
} viz_event_type;

enum {
  VIZ_KEY_LEFT = 0x100,
  VIZ_KEY_RIGHT,
  VIZ_KEY_UP,
  VIZ_KEY_DOWN,
  VIZ_KEY_HOME,
  VIZ_KEY_ESCAPE
};

typedef struct viz_event {
  viz_event_type type;
  int key;
  int x, y; /* window coordinates, layout units */
  int button;
  double wheel;
  int width, height;
} viz_event;

/* What the caller does after an event (bits returned by viz_handle_event). */
enum {
  VIZ_DO_REDRAW = 1u << 0,
  VIZ_DO_SYNC = 1u << 1,       /* the mask, the tile size or the pair changed: viz_scene_sync */
  VIZ_DO_SCREENSHOT = 1u << 2, /* PNG of the current view */
  VIZ_DO_EXPORT_PDF = 1u << 3,
  VIZ_DO_EXPORT_SVG = 1u << 4,
  VIZ_DO_QUIT = 1u << 5
};

/* Changes only *s; returns VIZ_DO_* bits. Never fails: an impossible request
 * (S of a file, an overlay without data) leaves a message in s->status. */
unsigned viz_handle_event(viz_state *s, const viz_event *e);

/* The backward layer on or off (key b, --layer ...-bwd): on, the tile becomes
 * the backward's (s->facts.bwd_br x bwd_bc: a trace's own, else the kernel's)
 * and the forward's is kept to come back to; off, the forward's comes back.
 * The overlays follow the pass (a cycles overlay where the trace has the
 * pass's cycles). The state must have been synced. Returns VIZ_DO_* bits;
 * s->status says what. */
unsigned viz_toggle_backward(viz_state *s);

/* Every key of the viewer, for --help and the in-window key list. */
typedef struct viz_key_help {
  const char *keys;
  const char *action;
} viz_key_help;
const viz_key_help *viz_key_help_table(int *count);

/* ---- layout (pure; the handler and the drawing agree on it) -------------- */

typedef struct viz_rect {
  double x, y, w, h;
} viz_rect;

typedef struct viz_layout {
  double font;   /* base font size, layout units */
  viz_rect plot; /* the mask, axes outside it */
  viz_rect panel; /* legend, numbers, hover; w = 0 when there is no room */
  double caption_x, caption_y; /* start of the caption's first line (baseline) */
  int caption_lines; /* lines the caption (title) may take; 0 with no_title */
  double caption_line_h;
  viz_rect strip;  /* above the plot: the columns no interval form holds (h = 0: none) */
  viz_rect legend; /* the legend alone when the panel is on but has no room (h = 0: none) */
  int legend_cols; /* its items per row */
} viz_layout;

void viz_layout_compute(const viz_state *s, double w, double h, viz_layout *out);
/* Window point -> token coordinates (key x, row y) in the current view. */
void viz_point_to_tokens(const viz_state *s, const viz_layout *l, double px, double py, double *key,
                         double *row);

/* ---- scene: the derived data --------------------------------------------- */

typedef struct viz_scene viz_scene;

typedef struct viz_scene_opts {
  const char *path;       /* TRACE_DIR, MASK.npy (any dtype of fm_dense.h, fitting an interval
                             form or not) or INTERVALS.npy (int32/int64); NULL: families */
  int causal;             /* INTERVALS.npy: the intervals are of a causal mask (k = 2; k = 1
                             and 4 say it themselves unless causal_given) */
  int causal_given;       /* 1: --causal or --bidir gave `causal`: a k against it is an error */
  int true_masked;        /* MASK.npy: true means masked (default: true means may attend) */
  int reading;            /* MASK.npy of a float dtype: an fm_dense_reading (--bool, --additive) */
  int strict;             /* INTERVALS.npy: refuse what Paddle reads leniently (fm_intervals_io.h) */
  int64_t batch, heads;   /* families: B and H (per-head families draw B*H masks) */
  const char *param_family; /* the family the params below belong to */
  const char *const *params;
  int nparams;
  const char *samples_path; /* NULL: the built-in samples */
  int32_t head_dim;       /* for modelled bytes (0: 128, or the trace's head_dim) */
  const struct fm_gpu_profile *profile; /* the timing model's (core/fm_timing.h): the side panel's
                                           predicted time; NULL: none. Borrowed: it must outlive
                                           the scene */
} viz_scene_opts;

/* Creates a scene; with a path, loads the file (one-line error naming it on
 * failure) and fills the source fields of *s (use_family = 0, br/bc of a
 * trace). The caller owns *out (viz_scene_destroy). */
fm_status viz_scene_create(const viz_scene_opts *o, viz_state *s, viz_scene **out, fm_err *err);
void viz_scene_destroy(viz_scene *sc); /* NULL is a no-op */
/* One line saying what reading an interval file as Paddle does changed
 * (fm_intervals_note), "" when nothing; owned by the scene. */
const char *viz_scene_note(const viz_scene *sc);

/* Brings the scene up to date with *s, rebuilding only what changed, and
 * writes s->facts (resetting the view when the mask extent changed). On
 * failure (a family that cannot be built at that S) the state's mask fields
 * are put back to what the scene holds, s->status says why, and the error is
 * returned; the scene stays drawable. */
fm_status viz_scene_sync(viz_scene *sc, viz_state *s, fm_err *err);

/* Read-only views of the scene for reports and tests. */
const fm_colmask *viz_scene_mask(const viz_scene *sc);
const fm_tile_counts *viz_scene_counts(const viz_scene *sc); /* over every vector set */
/* A mask no interval form holds: its tightest fitting sub-mask's counts (what
 * FlashMask could skip), over every set; NULL for a mask that fits. */
const fm_tile_counts *viz_scene_subset_counts(const viz_scene *sc);
/* Bytes of the mask (dense, block mask, intervals; of the sub-mask when it fits no form). */
void viz_scene_bytes(const viz_scene *sc, int64_t *dense, int64_t *block_mask, int64_t *intervals);
/* The state's default caption (or its title), whole: what a figure of it says. */
void viz_state_caption(const viz_state *s, char *buf, size_t cap);
const char *viz_scene_label(const viz_scene *sc);            /* family name or file name */
/* D of the modelled bytes and the predicted time: the option's, else the
 * trace's, else 128 (after a sync). */
int32_t viz_scene_head_dim(const viz_scene *sc);
/* Class of tile (rt, ct) of the shown set: FM_TILE_* by min/max and exactly. */
void viz_scene_tile_class(const viz_scene *sc, int32_t rt, int32_t ct, int *minmax, int *exact);

/* Modelled bytes one tile of rows x cols requests from memory, by its
 * min/max class: the project's cost model (fm_cost_tile_bytes, FlashMask skip
 * variant, bf16): 8 int32 bounds for every tile, 4 int32 interval vectors of
 * its columns for partial tiles, and for a tile that is not skipped K and V
 * (cols x D each; FM_PASS_FWD) or Q, dO, LSE, D and the fp32 dQ both ways
 * (rows; FM_PASS_BWD). */
int64_t viz_tile_model_bytes(int minmax_class, int32_t rows, int32_t cols, int32_t head_dim,
                             fm_pass pass);

/* ---- drawing ------------------------------------------------------------- */

/* Draws the state into cr over [0, w] x [0, h] layout units (the cairo user
 * space). s->scene must be synced. */
void viz_draw(cairo_t *cr, const viz_state *s, double w, double h);

/* The lines the side panel shows under the cursor ("Under the cursor"), for
 * a drawing of w x h: the element and tile, their classes, the tile's bounds
 * and the column's intervals, or, for a mask that fits no interval form, the
 * column's masked runs and whether a form holds it. Returns the count (0 when
 * the mouse is off the mask); at most max lines of 160 bytes. */
int viz_hover_lines(const viz_state *s, double w, double h, char (*lines)[160], int max);

/* The side panel's predicted time of the mask shown (every (batch, head)
 * pair) with the scene's profile (viz_scene_opts.profile), through the timing
 * model (core/fm_timing.h) at the profile's tile, which is its kernel's:
 * "predicted 12.3 ms fwd on h200-sm90 (sm90, 128x128)", and the backward's
 * line when the backward layer is shown; a pass or head dim the profile has
 * no fit for, or a mask no interval form holds, says so instead of a number.
 * Cached per mask in the scene. Returns the count (0 without a profile); at
 * most max lines of 160 bytes. */
int viz_prediction_lines(const viz_state *s, char (*lines)[160], int max);

/* Colour-blind-safe palette (Okabe-Ito), 0xRRGGBB. */
enum {
  VIZ_RGB_BACKGROUND = 0xFFFFFF,
  VIZ_RGB_MASKED = 0xE2E2E2,         /* masked element / skipped tile */
  VIZ_RGB_VISIBLE = 0x0072B2,        /* visible element / unmasked tile (blue) */
  VIZ_RGB_PARTIAL = 0xE69F00,        /* partial tile (orange) */
  VIZ_RGB_PARTIAL_MASKED = 0xF6DDAA, /* masked element inside a partial tile */
  VIZ_RGB_HATCH = 0x1A1A1A,
  VIZ_RGB_MISFIT = 0xCC79A7,         /* a column no interval form holds (reddish purple) */
  VIZ_RGB_TEXT = 0x222222
};
/* Viridis, t in [0, 1] -> 0xRRGGBB (overlays and colour bars). */
uint32_t viz_viridis(double t);

/* ---- files --------------------------------------------------------------- */

typedef enum viz_format { VIZ_FMT_PNG = 0, VIZ_FMT_SVG, VIZ_FMT_PDF } viz_format;

/* The format named by a path's extension (.png, .svg, .pdf, any case). */
fm_status viz_format_from_path(const char *path, viz_format *out, fm_err *err);

/* A drawing callback: draws into cr over [0, w] x [0, h]; a non-OK status
 * abandons the file. */
typedef fm_status (*viz_draw_fn)(cairo_t *cr, double w, double h, void *ctx, fm_err *err);

/* Writes one figure of w x h layout units to path. PNG: w*dpi/72 x h*dpi/72
 * pixels (dpi 72: one pixel per unit). SVG/PDF: a w x h pt page; masks are
 * embedded as images of dpi/72 pixels per point. Atomic: the file appears
 * complete or not at all. Limits: 1..16384 units and PNG pixels per side. */
fm_status viz_write_figure(const char *path, viz_format fmt, double w, double h, double dpi,
                           viz_draw_fn draw, void *ctx, fm_err *err);
/* The same with the output flags of fm_atomic_open_ex (core/fm_fileio.h):
 * FM_OUT_NOFOLLOW for a name fmsim chose (a scenario's figures, the viewer's
 * exports), which refuses a symbolic link found there; viz_write_figure is
 * out_flags 0, for a path the user named. */
fm_status viz_write_figure_ex(const char *path, unsigned out_flags, viz_format fmt, double w, double h,
                              double dpi, viz_draw_fn draw, void *ctx, fm_err *err);

/* Writes an image surface as PNG, atomically (the window's numbered
 * screenshots: a name fmsim chose, so a symbolic link there is refused). */
fm_status viz_write_png_surface(const char *path, cairo_surface_t *surface, fm_err *err);

/* viz_draw of a state as a viz_draw_fn (ctx is the viz_state). */
fm_status viz_draw_state_fn(cairo_t *cr, double w, double h, void *ctx, fm_err *err);

/* ---- figures: one registry for `fmsim render`, the viewer and scenarios -- */

/* A mask of a gallery drawn from a trace folder (a scenario's case). */
typedef struct viz_gallery_item {
  const char *trace; /* the trace folder */
  const char *title; /* the panel's title, e.g. "sliding_window w=48" */
} viz_gallery_item;

/* What a figure may draw from; each figure reads the members it needs. */
typedef struct viz_figure_opts {
  int64_t seqlen;           /* S of the masks drawn */
  int32_t br, bc;           /* tile rows x key columns */
  int sample;               /* document sample, -1: sample 0 when S has samples */
  uint64_t seed;            /* seed of random draws */
  const char *samples_path; /* document samples, NULL: built in */
  const char *trace;        /* a trace folder (per-case figures) */
  int32_t head_dim;         /* D of modelled bytes, 0: the trace's or 128 */
  int text;                 /* 0: draw no text (font-independent reference images) */
  const char *title;        /* the figure's title, NULL: its default */
  int no_title;             /* 1: no title, its room goes to the drawing */
  const viz_gallery_item *items; /* gallery: these masks (a scenario's), not the families */
  int nitems;
  const char *items_name;   /* gallery of items: whose masks, for the default title */
  const struct fm_cp_plan *cp_plan; /* cp-plan: the plan drawn (core/fm_cp_plan.h; borrowed);
                               NULL: its default, causal_document at seqlen on 4 ranks,
                               every sharding, visited tiles (no GPU profile) */
} viz_figure_opts;

/* A row of the registry. Adding a figure is a row and its draw function in
 * viz/viz_figures.c, and its reference image in tests/test_viz_render.c. */
typedef struct viz_figure {
  const char *name;      /* what `render --figure` and a scenario's figures: take */
  const char *summary;   /* one line for help texts */
  double width, height;  /* default size on screens: PNG pixels at 72 dpi, the viewer's window */
  double width_in, height_in; /* default size on paper: PDF and SVG pages, inches (72 pt each) */
  viz_draw_fn draw;      /* ctx: a const viz_figure_opts */
  int per_case;          /* 1: drawn from one mask or trace (a source, opts.trace), the
                            viewer's own drawing; 0: a figure with masks of its own */
  int takes_trace;       /* 1: `render --figure NAME TRACE_DIR` draws that trace (opts.trace;
                            a figure of its own without one) */
} viz_figure;

int viz_figure_count(void);
const viz_figure *viz_figure_at(int i);           /* NULL when out of range */
const viz_figure *viz_figure_find(const char *name); /* NULL when unknown */
/* "gallery, memory or tiles": the names for messages, into buf. */
const char *viz_figure_names(char *buf, int cap);

/* ---- what was drawn: tests, and the check that nothing is clipped -------- */

/* One string or legend mark drawn, with its ink box in device units (the
 * pixels of an image surface, points of a PDF page). */
typedef struct viz_ink {
  char text[160]; /* the string as drawn (cut strings end with U+2026); "" for a mark */
  double x0, y0, x1, y1;
} viz_ink;

/* Filled by every text and legend mark the viz code draws on a surface the
 * log is attached to: items[0 .. min(count, cap)); count goes on past cap. */
typedef struct viz_ink_log {
  viz_ink *items; /* (cap,), owned by the caller */
  int count, cap;
} viz_ink_log;

/* Attaches log to surface (NULL detaches); the caller keeps it alive meanwhile. */
void viz_ink_log_attach(cairo_surface_t *surface, viz_ink_log *log);

/* ---- benchmark ----------------------------------------------------------- */

typedef struct viz_bench_result {
  int frames;
  double p50_ms, p90_ms, p99_ms, max_ms;    /* pan, zoom and hover frames */
  int rebuild_frames;
  double rebuild_p50_ms, rebuild_max_ms;    /* frames after a Br/Bc key (reclassification) */
} viz_bench_result;

/* Replays n scripted events (zoom, pan, hover; then a few Br/Bc keys) on *s
 * offscreen at s->width x s->height, timing handle + sync + draw per frame. */
fm_status viz_bench_frames(viz_state *s, int n, viz_bench_result *out, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
