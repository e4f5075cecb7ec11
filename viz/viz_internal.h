/* viz_internal.h — what the viz/ sources share and nothing outside reads:
 * the scene's layout, tile pieces, trace loading and the raster engine. */
#ifndef VIZ_INTERNAL_H
#define VIZ_INTERNAL_H

#include <stdint.h>

#include "fm_colmask.h"
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

/* Scratch reused across key tiles by viz_pieces_build (O(Tr + Bc) memory). */
typedef struct viz_piece_scratch {
  int32_t tr_cap;
  int32_t *acc_cov, *acc_touch, *stamp; /* (tr + 1,) */
  int32_t *keys;                        /* distinct row tiles of one key tile */
  int32_t keys_cap;
} viz_piece_scratch;
void viz_piece_scratch_free(viz_piece_scratch *sc);

/* Classes of every tile of one set as pieces, exactly what fm_classify says,
 * in O(Sk + pieces log pieces) time; adds the set's tiles to *counts when not
 * NULL; bounds (Tc,) receives the 8 bounds per key tile when not NULL. */
fm_status viz_pieces_build(const fm_colmask *m, int32_t set, int32_t br, int32_t bc,
                           viz_pieces *out, fm_tile_bounds *bounds, fm_tile_counts *counts,
                           viz_piece_scratch *scratch, fm_err *err);
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

/* Loaders: one-line errors naming the file. */
fm_status viz_load_trace(const char *dir, viz_trace *t, fm_colmask **mask, fm_err *err);
fm_status viz_load_dense_npy(const char *path, int true_masked, fm_colmask **mask, fm_err *err);
/* Dispatches on what path is: a folder (trace), a bool/uint8 .npy (dense) or
 * an int32/int64 .npy (intervals, read strictly or as Paddle does, what that
 * changed in *note). kind receives "trace", "dense mask" or "intervals". */
fm_status viz_load_source(const char *path, int causal, int true_masked, int strict,
                          viz_trace *trace, int *has_trace, fm_colmask **mask, const char **kind,
                          fm_intervals_note *note, fm_err *err);

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
  const char *file_kind;
  fm_intervals_note note; /* what reading an interval file as Paddle does changed */

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
  int32_t (*runs)[3][2]; /* (Sk,) masked row runs of each column, causal triangle included */
  uint8_t *nruns;        /* (Sk,) */
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
  fm_mask_bytes bytes;
  int32_t head_dim;

  /* overlays of the shown pair */
  int cycles_valid;
  double *cycles_rowsum; /* (Tr, Tc + 1): prefix over key tiles of cycles, skipped tiles 0 */
  double cycles_max;
  double bytes_max;

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
void viz_text_fit(cairo_t *cr, double x, double y, const char *t, double maxw, double align);
double viz_snap_x(cairo_t *cr, double x); /* centre of a device pixel: crisp 1-pixel lines */
double viz_snap_y(cairo_t *cr, double y);

/* Legend swatch helpers shared by the figures. */
void viz_swatch(cairo_t *cr, double x, double y, double size, uint32_t fill, int hatch);

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
