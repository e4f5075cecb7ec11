#include "fm_cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_tiles.h"

fm_status fm_cost_shape_check(const fm_cost_shape *s, fm_err *err) {
  if (s->batch < 1 || s->heads < 1)
    return fm_fail(err, FM_EINVAL, "batch and heads must be >= 1 (got %lld x %lld)",
                   (long long)s->batch, (long long)s->heads);
  if (s->head_dim < 1 || s->head_dim > 1024)
    return fm_fail(err, FM_EINVAL, "head dim %d out of range (1..1024)", s->head_dim);
  if (s->elem_bytes < 1 || s->elem_bytes > 8)
    return fm_fail(err, FM_EINVAL, "element size %d bytes out of range (1..8)", s->elem_bytes);
  if ((unsigned)s->variant >= FM_NVARIANTS)
    return fm_fail(err, FM_EINVAL, "unknown kernel variant %d", (int)s->variant);
  if (s->pass != 0 && s->pass != FM_PASS_FWD && s->pass != FM_PASS_BWD)
    return fm_fail(err, FM_EINVAL, "the cost model takes one pass, fwd or bwd (got %s)",
                   fm_pass_name(s->pass));
  return fm_tile_size_check(s->br, s->bc, err);
}

static inline int is_bwd(const fm_cost_shape *s) { return s->pass == FM_PASS_BWD; }

/* Is the tile visited (K/V loaded, math done), and does it apply the element mask? */
static inline int tile_visited(fm_variant v, int cls) {
  return v != FM_VARIANT_SKIP || cls != FM_TILE_MASKED;
}
static inline int tile_elementwise(fm_variant v, int cls) {
  if (v == FM_VARIANT_DENSE) return 1;
  if (v == FM_VARIANT_NOSKIP) return cls != FM_TILE_UNMASKED;
  return cls == FM_TILE_PARTIAL;
}

/* Backward, per visited tile: Q and dO (rows x D, e each), LSE and D (fp32 per
 * row), the fp32 dQ read and written. */
static inline int64_t bwd_row_bytes(const fm_cost_shape *s, int32_t rows) {
  return (int64_t)rows * (2 * (int64_t)s->head_dim * s->elem_bytes + 2 * 4 + 2 * 4 * (int64_t)s->head_dim);
}

/* The mask's part of a tile: dense bytes, or its bounds and (element-masked) vectors. */
static inline int64_t mask_bytes(const fm_cost_shape *s, int cls, int32_t rows, int32_t cols) {
  if (s->variant == FM_VARIANT_DENSE) return (int64_t)rows * cols;
  return 8 * 4 + (tile_elementwise(s->variant, cls) ? 4 * 4 * (int64_t)cols : 0);
}

int64_t fm_cost_tile_bytes(const fm_cost_shape *s, int cls, int32_t rows, int32_t cols) {
  int64_t b = mask_bytes(s, cls, rows, cols);
  if (tile_visited(s->variant, cls))
    b += is_bwd(s) ? bwd_row_bytes(s, rows) : 2 * (int64_t)cols * s->head_dim * s->elem_bytes;
  return b;
}

double fm_cost_paper_flops(int64_t batch, int64_t heads, int64_t sq, int64_t sk, int32_t head_dim,
                           double rho, fm_pass pass) {
  double fwd = 4.0 * (double)batch * (double)heads * (double)sq * (double)sk * (double)head_dim *
               (1.0 - rho);
  return ((pass & FM_PASS_FWD) ? fwd : 0.0) + ((pass & FM_PASS_BWD) ? 2.5 * fwd : 0.0);
}

double fm_cost_tflops(double flops, double ms) {
  if (!(ms > 0)) return NAN;
  return flops / (ms * 1e-3) / 1e12;
}

/* One tile of class cls, rows x cols, standing for `mult` (b, h) pairs. */
static void add_tile(fm_cost *out, const fm_cost_shape *s, int cls, int32_t rows, int32_t cols,
                     int64_t mult, double *visited_elems) {
  out->tiles[cls] += mult;
  if (tile_visited(s->variant, cls)) {
    out->tiles_visited += mult;
    *visited_elems += (double)mult * rows * cols;
    int64_t e = s->elem_bytes, d = s->head_dim;
    if (is_bwd(s)) {
      out->bytes_q += mult * rows * d * e;
      out->bytes_do += mult * rows * d * e;
      out->bytes_lse += mult * rows * 4;
      out->bytes_delta += mult * rows * 4;
      out->bytes_dq_accum += mult * rows * d * 4;
    } else {
      out->bytes_kv += mult * 2 * cols * d * e;
    }
  }
  if (tile_elementwise(s->variant, cls)) {
    out->tiles_elementwise += mult;
    if (s->variant == FM_VARIANT_DENSE) out->bytes_dense_mask += mult * (int64_t)rows * cols;
    else out->bytes_vectors += mult * 16 * (int64_t)cols;
  }
}

/* The row and set terms, the sums and the compulsory bytes, once the tiles
 * are counted; unique_kv_cols: key columns some tile loads, over the pairs. */
static void finish(fm_cost *out, const fm_cost_shape *s, int32_t sq, int32_t sk, int32_t nsets,
                   int64_t unique_kv_cols) {
  const int64_t e = s->elem_bytes, d = s->head_dim, pairs = s->batch * s->heads;
  const int64_t rows_d = pairs * sq * d; /* one (B, Sq, H, D) tensor's elements */
  if (s->variant != FM_VARIANT_DENSE) {
    out->bytes_bounds = out->tiles_total * 32;
    out->bytes_prep_read = (int64_t)nsets * 16 * sk;
    out->bytes_prep_write = (int64_t)nsets * 32 * out->tc;
  }
  if (is_bwd(s)) {
    out->bytes_kv = unique_kv_cols * 2 * d * e; /* once per key tile that visits anything */
    out->bytes_dkdv = pairs * sk * 2 * d * e;
    out->bytes_rowsum_read = 2 * rows_d * e + pairs * sq * 4;      /* O, dO, LSE */
    out->bytes_rowsum_write = 2 * pairs * sq * 4 + rows_d * 4;     /* D, LSE2, the zeroed dQ */
    out->bytes_dq_convert = rows_d * 4;
    out->bytes_dq = rows_d * e;
  } else {
    out->bytes_q = rows_d * e;
    out->bytes_o = rows_d * e;
    out->bytes_lse = pairs * sq * 4;
  }
  out->bytes_read = out->bytes_q + out->bytes_kv + out->bytes_vectors + out->bytes_dense_mask +
                    out->bytes_bounds + out->bytes_prep_read + out->bytes_do + out->bytes_delta +
                    out->bytes_dq_accum + out->bytes_rowsum_read + out->bytes_dq_convert +
                    (is_bwd(s) ? out->bytes_lse : 0);
  out->bytes_write = out->bytes_o + (is_bwd(s) ? 0 : out->bytes_lse) + out->bytes_prep_write +
                     out->bytes_dq_accum + out->bytes_dkdv + out->bytes_rowsum_write + out->bytes_dq;
  /* compulsory: the inputs once (Q; backward also dO, O, LSE), the K/V columns any tile
     loads once, the mask once; the outputs once */
  int64_t mask = s->variant == FM_VARIANT_DENSE ? (int64_t)nsets * sq * sk
                                                : out->bytes_prep_read + out->bytes_prep_write;
  out->unique_read = rows_d * e + unique_kv_cols * 2 * d * e + mask;
  if (is_bwd(s)) out->unique_read += 2 * rows_d * e + pairs * sq * 4;
  out->unique_write = is_bwd(s) ? out->bytes_dq + out->bytes_dkdv + out->bytes_prep_write
                                : out->bytes_o + out->bytes_lse + out->bytes_prep_write;
}

fm_status fm_cost_compute(const fm_colmask *m, const fm_cost_shape *s, const uint8_t *classes,
                          int64_t *tile_bytes, fm_cost *out, fm_err *err) {
  memset(out, 0, sizeof *out);
  fm_status st = fm_cost_shape_check(s, err);
  if (st != FM_OK) return st;
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), nsets = fm_colmask_nsets(m);
  int32_t nb = fm_colmask_nb(m), nh = fm_colmask_nh(m);
  if ((nb != 1 && nb != s->batch) || (nh != 1 && nh != s->heads))
    return fm_fail(err, FM_EINVAL,
                   "mask has %d x %d vector sets; the problem has batch %lld and %lld heads "
                   "(sets must be 1 or match)",
                   nb, nh, (long long)s->batch, (long long)s->heads);
  int32_t tr = (sq + s->br - 1) / s->br, tc = (sk + s->bc - 1) / s->bc;
  int64_t per_set = (int64_t)tr * tc;
  uint8_t *own = NULL;
  if (!classes) {
    own = malloc((size_t)(per_set * nsets));
    if (!own)
      return fm_fail(err, FM_ENOMEM, "cannot allocate %lld bytes of tile classes",
                     (long long)(per_set * nsets));
    fm_tile_counts counts;
    st = fm_classify(m, s->br, s->bc, &counts, own, NULL, err);
    if (st != FM_OK) {
      free(own);
      return st;
    }
    classes = own;
  }
  /* every (b, h) pair maps to one set; a set serves `mult` pairs */
  int64_t mult = (nb == 1 ? s->batch : 1) * (nh == 1 ? s->heads : 1);
  fm_pass pass = is_bwd(s) ? FM_PASS_BWD : FM_PASS_FWD;
  double visited_elems = 0;
  int64_t unique_kv_cols = 0; /* key columns some tile loads, over the pairs */
  for (int32_t set = 0; set < nsets; set++) {
    for (int32_t ct = 0; ct < tc; ct++) {
      int32_t cols = (ct + 1) * s->bc <= sk ? s->bc : sk - ct * s->bc;
      int any = 0;
      for (int32_t rt = 0; rt < tr; rt++) {
        int32_t rows = (rt + 1) * s->br <= sq ? s->br : sq - rt * s->br;
        int64_t idx = (int64_t)set * per_set + (int64_t)rt * tc + ct;
        int cls = classes[idx];
        add_tile(out, s, cls, rows, cols, mult, &visited_elems);
        if (tile_bytes) tile_bytes[idx] = fm_cost_tile_bytes(s, cls, rows, cols);
        any |= tile_visited(s->variant, cls);
      }
      if (any) unique_kv_cols += mult * cols;
    }
  }
  free(own);
  out->pass = pass;
  out->tr = tr;
  out->tc = tc;
  out->tiles_total = s->batch * s->heads * per_set;
  out->rho = (double)out->tiles[FM_TILE_MASKED] / (double)out->tiles_total;
  out->flops_full = fm_cost_paper_flops(s->batch, s->heads, sq, sk, s->head_dim, 0.0, pass);
  out->flops_paper = fm_cost_paper_flops(s->batch, s->heads, sq, sk, s->head_dim, out->rho, pass);
  out->flops_executed = (pass == FM_PASS_BWD ? 10.0 : 4.0) * (double)s->head_dim * visited_elems;
  finish(out, s, sq, sk, nsets, unique_kv_cols);
  return FM_OK;
}
