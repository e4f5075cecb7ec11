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
  return fm_tile_size_check(s->br, s->bc, err);
}

/* Is the tile visited (K/V loaded, math done), and does it apply the element mask? */
static inline int tile_visited(fm_variant v, int cls) {
  return v != FM_VARIANT_SKIP || cls != FM_TILE_MASKED;
}
static inline int tile_elementwise(fm_variant v, int cls) {
  if (v == FM_VARIANT_DENSE) return 1;
  if (v == FM_VARIANT_NOSKIP) return cls != FM_TILE_UNMASKED;
  return cls == FM_TILE_PARTIAL;
}

int64_t fm_cost_tile_bytes(const fm_cost_shape *s, int cls, int32_t rows, int32_t cols) {
  int64_t b = 0;
  if (tile_visited(s->variant, cls)) b += 2 * (int64_t)cols * s->head_dim * s->elem_bytes;
  if (s->variant == FM_VARIANT_DENSE) {
    b += (int64_t)rows * cols;
  } else {
    b += 8 * 4; /* the tile's 8 bounds */
    if (tile_elementwise(s->variant, cls)) b += 4 * 4 * (int64_t)cols;
  }
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
  int64_t e = s->elem_bytes, d = s->head_dim;
  int64_t pairs = s->batch * s->heads;
  double visited_elems = 0;
  int64_t unique_kv_cols = 0; /* key columns some tile loads, over the sets (x mult below) */
  for (int32_t set = 0; set < nsets; set++) {
    for (int32_t ct = 0; ct < tc; ct++) {
      int32_t cols = (ct + 1) * s->bc <= sk ? s->bc : sk - ct * s->bc;
      int any = 0;
      for (int32_t rt = 0; rt < tr; rt++) {
        int32_t rows = (rt + 1) * s->br <= sq ? s->br : sq - rt * s->br;
        int64_t idx = (int64_t)set * per_set + (int64_t)rt * tc + ct;
        int cls = classes[idx];
        out->tiles[cls] += mult;
        int64_t tb = fm_cost_tile_bytes(s, cls, rows, cols);
        if (tile_bytes) tile_bytes[idx] = tb;
        if (tile_visited(s->variant, cls)) {
          any = 1;
          out->tiles_visited += mult;
          out->bytes_kv += mult * 2 * cols * d * e;
          visited_elems += (double)mult * rows * cols;
        }
        if (tile_elementwise(s->variant, cls)) {
          out->tiles_elementwise += mult;
          if (s->variant == FM_VARIANT_DENSE) out->bytes_dense_mask += mult * (int64_t)rows * cols;
          else out->bytes_vectors += mult * 16 * (int64_t)cols;
        }
      }
      if (any) unique_kv_cols += mult * cols;
    }
  }
  free(own);
  out->tr = tr;
  out->tc = tc;
  out->tiles_total = pairs * per_set;
  out->rho = (double)out->tiles[FM_TILE_MASKED] / (double)out->tiles_total;
  out->flops_full = fm_cost_paper_flops(s->batch, s->heads, sq, sk, s->head_dim, 0.0, FM_PASS_FWD);
  out->flops_paper = fm_cost_paper_flops(s->batch, s->heads, sq, sk, s->head_dim, out->rho, FM_PASS_FWD);
  out->flops_executed = 4.0 * (double)d * visited_elems;
  out->bytes_q = pairs * sq * d * e;
  out->bytes_o = pairs * sq * d * e;
  out->bytes_lse = pairs * sq * 4;
  if (s->variant != FM_VARIANT_DENSE) {
    out->bytes_bounds = pairs * per_set * 32;
    out->bytes_prep_read = (int64_t)nsets * 16 * sk;
    out->bytes_prep_write = (int64_t)nsets * 32 * tc;
  }
  out->bytes_read = out->bytes_q + out->bytes_kv + out->bytes_vectors + out->bytes_dense_mask +
                    out->bytes_bounds + out->bytes_prep_read;
  out->bytes_write = out->bytes_o + out->bytes_lse + out->bytes_prep_write;
  /* compulsory: Q once, the K/V columns any tile loads once, the mask once */
  out->unique_read = out->bytes_q + unique_kv_cols * 2 * d * e;
  if (s->variant == FM_VARIANT_DENSE) out->unique_read += (int64_t)nsets * sq * sk;
  else out->unique_read += out->bytes_prep_read + out->bytes_prep_write; /* vectors + bounds */
  out->unique_write = out->bytes_o + out->bytes_lse + out->bytes_prep_write;
  return FM_OK;
}
