/* viz_internal.h — what the viz/ sources share and nothing outside reads:
 * the scene's layout, tile pieces, trace loading and the raster engine. */
#ifndef VIZ_INTERNAL_H
#define VIZ_INTERNAL_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_dense.h"
#include "fm_families.h"
#include "fm_forms.h"
#include "fm_intervals_io.h"
#include "fm_memory.h"
#include "fm_samples.h"
#include "fm_tiles.h"
#include "viz.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* A run of row tiles [rt0, rt1) of one key tile with one (min/max, exact)
 * class pair. The classes of key tile ct are pieces[start[ct] .. start[ct+1]). */
typedef struct viz_piece {
  int32_t rt0, rt1;
  uint8_t minmax, exact; /* FM_TILE_* */
} viz_piece;

typedef struct viz_pieces {
  int32_t tr, tc;
  int64_t count, cap;
  viz_piece *items;  /* (count,) */
  int64_t *start;    /* (tc + 1,) */
} viz_pieces;

void viz_pieces_free(viz_pieces *p);

/* The masked row runs of every column of one set, causal triangle included:
 * column j holds items[start[j] .. start[j+1]) (sorted, disjoint half-open
 * row ranges; start values are offsets into items). A mask with intervals has
 * at most three per column (fm_colmask_column_runs); a dense mask that fits no
 * interval form any number (fm_dense_result_all_runs). */
typedef struct viz_colruns {
  int32_t sq, sk;
  const int64_t *start;      /* (Sk + 1,) */
  const int32_t (*items)[2]; /* (start[Sk] - start[0], 2) from items + start[0] */
} viz_colruns;

/* Scratch reused across key tiles by viz_pieces_build (O(Tr) memory): four
 * (tr_cap,) arrays in one allocation, owned through acc_cov. */
typedef struct viz_piece_scratch {
  int32_t tr_cap;
  int32_t *acc_cov, *acc_touch, *stamp; /* (tr + 1,) */
  int32_t *keys;                        /* (tr + 1,): distinct row tiles of one key tile */
} viz_piece_scratch;
void viz_piece_scratch_free(viz_piece_scratch *sc);

/* Classes of every tile of one set as pieces, exactly what fm_classify says,
 * in O(Sk + pieces log pieces) time; adds the set's tiles to *counts when not
 * NULL; bounds (Tc,) receives the 8 bounds per key tile when not NULL. */
fm_status viz_pieces_build(const fm_colmask *m, int32_t set, int32_t br, int32_t bc,
                           viz_pieces *out, fm_tile_bounds *bounds, fm_tile_counts *counts,
                           viz_piece_scratch *scratch, fm_err *err);
/* The same for a mask that fits no interval form, from its runs: the exact
 * classes, and min/max classes equal to them (without intervals there are no
 * bounds to apply the rule to). */
fm_status viz_pieces_build_runs(const viz_colruns *runs, int32_t br, int32_t bc, viz_pieces *out,
                                fm_tile_counts *counts, viz_piece_scratch *scratch, fm_err *err);
/* The same from per-tile class arrays (a trace): classes, exact are (Tr, Tc). */
fm_status viz_pieces_from_arrays(const uint8_t *classes, const uint8_t *exact, int32_t tr,
                                 int32_t tc, viz_pieces *out, fm_err *err);
/* Finishes counts (total, sparsity) after the per-set additions. */
void viz_counts_finish(fm_tile_counts *c);

/* The tile arrays of one pass of a trace at that pass's tile. */
typedef struct viz_trace_tiles {
  int32_t br, bc, tr, tc;
  int tiles_by_pair;            /* tile arrays are (B*H, Tr, Tc) (run traces), else (sets, Tr, Tc) */
  uint8_t *tiles, *tiles_exact; /* NULL: the trace has no such pass */
  int64_t *cycles;              /* (batch, heads, Tr, Tc) or NULL */
} viz_trace_tiles;

/* The passes of a trace: forward (tiles.npy, tiles_exact.npy, tile_cycles.npy
 * at summary.json's br x bc) and backward (tiles_bwd.npy, tiles_exact_bwd.npy,
 * tile_cycles_bwd.npy at "backward" br x bc, run traces with one). */
enum { VIZ_FWD = 0, VIZ_BWD = 1 };

/* A loaded trace folder (fm_trace.h, fm_run_trace.h). */
typedef struct viz_trace {
  char family[128], params[512], device[64];
  int64_t seqlen_q, seqlen_k, batch, heads;
  int causal;
  int32_t head_dim;
  int64_t sets;                 /* vector sets of columns.npy */
  viz_trace_tiles pass[2];      /* VIZ_FWD, VIZ_BWD */
} viz_trace;
void viz_trace_free(viz_trace *t);

/* What a file given to the viewer holds (viz_load_source). */
typedef struct viz_source {
  viz_trace trace;          /* a trace folder (has_trace) */
  int has_trace;
  fm_colmask *mask;         /* the intervals; for a dense mask that fits no interval form,
                               its tightest fitting sub-mask (dims, sets, what FlashMask
                               could skip) */
  fm_dense_result *misfit;  /* a dense mask that fits no interval form, every run of
                               every column kept (fm_dense_result_all_runs); else NULL */
  const char *kind;         /* "trace", "dense mask" or "intervals" */
  char what[200];           /* what the file holds, for titles: "dense bool mask, causal-1" */
  fm_intervals_note note;   /* what reading an interval file as Paddle does changed */
} viz_source;
void viz_source_free(viz_source *src);

/* How a file is read: the options of `fmsim view` and `fmsim render`. */
typedef struct viz_source_opts {
  int causal;              /* INTERVALS.npy with k = 2 is causal-2 */
  int causal_given;        /* the flag was given: a k = 1 or 4 against it is an error */
  int true_masked;         /* MASK.npy: true means masked */
  int strict;              /* INTERVALS.npy: refuse what Paddle reads leniently */
  fm_dense_reading reading; /* MASK.npy of a float dtype: --bool / --additive */
} viz_source_opts;

/* Loaders: one-line errors naming the file. */
fm_status viz_load_trace(const char *dir, viz_trace *t, fm_colmask **mask, fm_err *err);
/* Dispatches on what path is: a folder (trace), a dense mask .npy (any dtype
 * fm_dense reads; kept whole as runs when it fits no interval form) or an
 * int32/int64 .npy (intervals, read strictly or as Paddle does). */
fm_status viz_load_source(const char *path, const viz_source_opts *o, viz_source *out, fm_err *err);

/* The raster cache key: everything a mask raster depends on. */
typedef struct viz_raster_key {
  viz_view view;
  int rw, rh;
  unsigned layers;
  viz_overlay overlay;
  uint64_t version;
  double hatch_period;
} viz_raster_key;

struct viz_scene {
  viz_scene_opts opts;
  fm_sample_set samples;
  int have_samples;

  /* the file given at start */
  fm_colmask *file_mask;
  viz_trace trace;
  int has_trace;
  char file_label[256];
  char file_what[200];    /* what it holds (viz_source.what) */
  const char *file_kind;
  fm_intervals_note note; /* what reading an interval file as Paddle does changed */
  fm_dense_result *dense; /* a dense mask that fits no interval form: every run (viz_source.misfit) */

  /* the mask shown and the state fields it was made from */
  const fm_colmask *mask; /* file_mask or family_mask */
  fm_colmask *family_mask;
  int valid;
  int use_family, family, sample;
  int64_t seqlen;
  uint64_t seed;
  fm_family_used used;
  char label[256];
  int64_t batch, heads;
  fm_form form;

  /* the (batch, head) pair shown and its mask set */
  int32_t pair, set;
  int misfit;            /* the mask shown fits no interval form (the file's `dense`) */
  viz_colruns runs;      /* of the shown pair */
  int64_t *runs_start;   /* (Sk + 1,) owned storage of runs for interval masks */
  int32_t (*runs_items)[2]; /* (<= 3 Sk, 2) */
  int32_t *bad_prefix;   /* misfit: (Sk + 1,) columns of the shown pair no form holds, before j */
  int64_t bad_total;     /* misfit: such columns over every pair */
  int runs_valid;

  /* classification at br x bc, of one pass (VIZ_FWD, VIZ_BWD: VIZ_LAYER_BACKWARD) */
  int32_t br, bc, tr, tc;
  int pass;
  int classes_valid;
  int classes_from_trace;
  fm_tile_bounds *bounds; /* (Tc,) of the shown set */
  viz_pieces pieces;      /* of the shown set */
  viz_piece_scratch scratch;
  fm_tile_counts counts;  /* every set */
  fm_tile_counts subset_counts; /* misfit: the tightest fitting sub-mask's, by the min/max rule */
  fm_mask_bytes bytes;
  int32_t head_dim;

  /* overlays of the shown pair */
  int cycles_valid;
  double *cycles_rowsum; /* (Tr, Tc + 1): prefix over key tiles of cycles, skipped tiles 0 */
  double cycles_max;
  double bytes_max;

  /* predicted times of the mask (viz_notes.c), VIZ_FWD and VIZ_BWD, for the
     mask the key fields name (a family's; a file's never changes) */
  struct {
    int valid, use_family, family, sample;
    int64_t seqlen;
    uint64_t seed;
    double ms[2];      /* NAN: none, note[] says why */
    int32_t br[2], bc[2];
    char note[2][160];
  } pred;

  /* data version: bumps on every change the raster depends on */
  uint64_t version;

  /* raster cache and scratch of the aggregation */
  uint32_t *raster; /* (rh, rw) ARGB32 premultiplied (opaque) */
  viz_raster_key raster_key;
  int raster_valid;
  double *agg;    /* aggregation scratch */
  size_t agg_cap;
};

/* Draws the mask raster for s into sc->raster at rw x rh pixels covering the
 * plot (reused when nothing it depends on changed). Returns sc->raster. */
const uint32_t *viz_raster_render(viz_scene *sc, const viz_state *s, int rw, int rh,
                                  double hatch_period);

/* The mask raster of s (view s->view), tile grid and a frame in rect r. */
void viz_draw_mask_in(cairo_t *cr, const viz_state *s, const viz_rect *r, double grid_min_px);

/* Text and line helpers shared by the figures (toy API, DejaVu Sans). */
void viz_set_rgb(cairo_t *cr, uint32_t c);
void viz_set_font(cairo_t *cr, double size, int bold);
double viz_text_width(cairo_t *cr, const char *t);
void viz_text_at(cairo_t *cr, double x, double y, const char *t, double align); /* 0 left .. 1 right */

/* Text on SVG pages as <text> elements (viz_svg_text.c). A growable buffer;
 * `failed` once an allocation failed (nothing more is added). */
typedef struct viz_svg_buf {
  char *data; /* NUL-terminated; owned, free() it */
  size_t len, cap;
  int failed;
} viz_svg_buf;
/* The surface user-data key of the collector (a viz_svg_buf of <text> elements)
 * that viz_write_figure_ex attaches to an SVG surface. */
extern const cairo_user_data_key_t viz_svg_text_key;
/* 1 when cr draws on an SVG surface with a collector: the string t, its origin
 * (x, y) in user space, was recorded as a <text> element (device position,
 * angle, size, weight, colour) and must not be drawn; 0 otherwise. */
int viz_svg_text_record(cairo_t *cr, double x, double y, const char *t);
/* cairo's SVG stream into a viz_svg_buf (closure). */
cairo_status_t viz_svg_buf_write(void *closure, const unsigned char *data, unsigned int len);
/* out = svg with the <text> elements of texts before its closing </svg>;
 * FM_ENOMEM or FM_EIO (no </svg>) with err set. The caller frees out->data. */
fm_status viz_svg_text_compose(const viz_svg_buf *svg, const viz_svg_buf *texts, viz_svg_buf *out,
                               fm_err *err);
/* Draws t within maxw: as it is when it fits, else shrunk (down to 80%) and
 * then cut with an ellipsis: never past maxw. */
void viz_text_fit(cairo_t *cr, double x, double y, const char *t, double maxw, double align);
/* Width of t at `size` without a cairo context, a little generous (the
 * layout's estimate; what is drawn is measured and fitted). */
double viz_text_estimate(const char *t, double size, int bold);
/* t wrapped into at most max_lines lines of width maxw, in the current font:
 * breaks at "  ·  " separators where it can, else at spaces; the last line
 * takes the rest. Returns the lines written into lines (512 bytes each). */
int viz_text_wrap(cairo_t *cr, const char *t, double maxw, int max_lines, char (*lines)[512]);
/* 1 when t wraps (viz_text_wrap) into at most max_lines lines of maxw at the
 * current font, none shrunk or cut. */
int viz_text_wraps_into(cairo_t *cr, const char *t, double maxw, int max_lines);
/* Wraps (at most 8 lines) and draws them from baseline y, line_h apart, each
 * fitted to maxw. Returns the lines drawn. */
int viz_text_lines_draw(cairo_t *cr, double x, double y, double line_h, const char *t, double maxw,
                        int max_lines, double align);
/* A figure's title (viz_figures.c): the height it takes in at most max_lines
 * lines of maxw at 1.15 font bold (0 when t is empty), its lines into *lines
 * (one line, estimated, without glyphs: text 0); and drawing those lines from
 * baseline y. */
double viz_title_height(cairo_t *cr, const char *t, double maxw, double font, int max_lines,
                        int text, int *lines);
void viz_title_draw(cairo_t *cr, const char *t, double x, double y, double maxw, double font,
                    int lines, int text);
/* The cp-plan figure (viz_cp_plan.c, a row of the registry): a
 * viz_draw_fn whose ctx is a const viz_figure_opts. */
fm_status viz_draw_cp_plan(cairo_t *cr, double w, double h, void *ctx, fm_err *err);
/* Records a legend mark (swatch, line sample) in the ink log, if one is attached. */
void viz_ink_mark(cairo_t *cr, double x, double y, double w, double h);
double viz_snap_x(cairo_t *cr, double x); /* centre of a device pixel: crisp 1-pixel lines */
double viz_snap_y(cairo_t *cr, double y);

/* Legend swatch helpers shared by the figures: a 1.6 size x size box at
 * (x, y), hatch 1 "/", 2 "\\", 3 a viridis ramp (overlays). */
void viz_swatch(cairo_t *cr, double x, double y, double size, uint32_t fill, int hatch);

/* The legend of a state: what its layers show. */
typedef struct viz_legend_entry {
  uint32_t fill;
  int hatch;         /* as viz_swatch */
  const char *text;  /* the side panel's words */
  const char *brief; /* the compact legend's (small figures) */
} viz_legend_entry;
#define VIZ_LEGEND_MAX 8
/* Fills out (VIZ_LEGEND_MAX,) and returns the count. */
int viz_legend_entries(const viz_state *s, viz_legend_entry *out);

/* The default caption of a state: mask (and what a file holds), S, tiles,
 * rho (over all (batch, head) pairs, with their number, and the pair drawn;
 * for a mask no form holds also what FlashMask's tightest fitting sub-mask
 * skips); s->title when set; "" with no_title or no scene. viz_caption_at
 * gives it shorter by level (0 .. VIZ_CAPTION_LEVELS - 1): the documents and
 * what a file holds go first, then the file name is shortened and the words
 * around the numbers, then the name is cut shorter and at last left out; every number stays whole at every
 * level. viz_caption is level 0. */
#define VIZ_CAPTION_LEVELS 5
void viz_caption_at(const viz_state *s, int level, char *buf, size_t cap);
void viz_caption(const viz_state *s, char *buf, size_t cap);
/* Draw calls of viz_draw (viz_notes.c): the caption in its lines, the compact
 * legend in l->legend, the strip of columns no interval form holds. */
void viz_draw_caption(cairo_t *cr, const viz_state *s, const viz_layout *l, double w);
void viz_draw_compact_legend(cairo_t *cr, const viz_state *s, const viz_layout *l);
void viz_draw_misfit_strip(cairo_t *cr, const viz_state *s, const viz_layout *l);

/* The element and tile under the mouse (valid = 0 when it is off the mask).
 * Over a mask that fits no interval form, a pixel covering a column no form
 * holds points at that column (misfit = 1). */
typedef struct viz_hover {
  int valid;
  int32_t i, j, rt, ct;
  int misfit;
} viz_hover;
viz_hover viz_hover_of(const viz_state *s, const viz_layout *l);
/* viz_hover_lines (viz.h) with the layout given. */
int viz_hover_lines_at(const viz_state *s, const viz_layout *l, char (*lines)[160], int max);
/* The side panel's list of the columns no form holds (shown pair): "j = 12:
 * 5 runs [0, 12) ...", and how many more; at most max lines. */
int viz_misfit_lines(const viz_state *s, char (*lines)[160], int max);

/* User data on a vector surface: pixels per layout unit of mask rasters
 * (double, set by viz_write_figure). */
extern const cairo_user_data_key_t viz_raster_scale_key;

/* Tile index of a token (clamped to the grid). */
static inline int32_t viz_tile_of(double token, int32_t size, int32_t count) {
  int64_t t = (int64_t)(token / size);
  return t < 0 ? 0 : (t >= count ? count - 1 : (int32_t)t);
}

/* Formatting shared by the draw code: "131072", "128K", "1M". */
void viz_format_tokens(int64_t v, int k_suffix, char *buf, int cap);
void viz_format_bytes(double bytes, char *buf, int cap);
void viz_format_count(int64_t v, char *buf, int cap); /* thin groups: "1 985 985" */

#endif
