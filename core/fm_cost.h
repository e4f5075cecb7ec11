/* fm_cost.h — the analytic cost model of the FlashMask kernels, forward and
 * backward, and the CPU simulation that turns it into trace content without
 * a GPU.
 *
 * The model follows the kernel tile by tile at its own tile size for the pass
 * (Br query rows x Bc key columns, fm_kernels.h) from the per-tile min/max
 * classes of fm_classify (the classes the kernel decides from the 8 bounds):
 *
 *   skip    MASKED tiles are skipped (no K/V load, no math); PARTIAL tiles
 *           load K/V and the interval vectors of their columns and mask
 *           element-wise; UNMASKED tiles load K/V only.
 *   noskip  every tile is visited with the same arithmetic: MASKED tiles are
 *           treated like PARTIAL ones (K/V, vectors, element mask).
 *   dense   every tile is visited and reads its rows x cols bytes of the
 *           Sq x Sk uint8 mask (one per vector set) from HBM; no interval
 *           vectors, no bounds, no preprocessing.
 *
 * FLOPs: the paper's count, 4*B*H*Sq*Sk*D*(1-rho) for the forward and 2.5
 * times that for the backward, rho = masked tiles / all tiles by the min/max
 * rule at the pass's tile size (fm_cost_paper_flops, the one place that
 * formula is written); and the executed count summed over the visited tiles
 * (real rows and columns; the tiles cut by a sequence end count only their
 * real part): 4*D*rows*cols per tile forward (S = Q K^T, O += P V), 10*D*rows*
 * cols backward (S = Q K^T, dP = dO V^T, dV += P^T dO, dK += dS^T Q, dQ += dS K).
 *
 * Bytes are the requests the kernel makes (tiled traffic, before any cache
 * reuse), in bytes (e = bytes per Q/K/V/O element, 2 for bf16):
 * Forward (FM_PASS_FWD), one CTA per query tile visiting key tiles:
 *   Q       read once per row tile:           B*H*Sq*D*e
 *   K, V    per visited tile:                 2*cols*D*e
 *   vectors per element-masked tile:          4 vectors * 4 B * cols (skip, noskip)
 *   dense   per tile:                         rows*cols (1 B per element)
 *   bounds  per tile considered:              8 * 4 B (skip, noskip)
 *   prep    bounds preprocessing per set:     reads 4*4*Sk, writes 8*4*Tc (skip, noskip)
 *   O, LSE  written once:                     B*H*Sq*D*e and B*H*Sq*4
 * Backward (FM_PASS_BWD), one CTA per key tile holding K_j, V_j and dK_j, dV_j
 * on chip, visiting the query tiles the rule does not skip (FlashMask's
 * Algorithm 2):
 *   Q, dO   per visited tile:                 rows*D*e each (bytes_q, bytes_do)
 *   LSE, D  per visited tile:                 rows*4 each (bytes_lse, bytes_delta; the
 *           kernel reads LSE scaled by log2 e, LSE2, written by the preprocessing)
 *   dQ      per visited tile, accumulated in fp32 with atomic adds: rows*D*4
 *           read and rows*D*4 written (an atomic add is a read-modify-write in
 *           L2), bytes_dq_accum each way
 *   K, V    once per key tile with a visited tile: 2*cols*D*e (bytes_kv)
 *   dK, dV  written once per key tile:        2*cols*D*e (bytes_dkdv; a key
 *           tile with nothing visited writes its zeros)
 *   vectors, dense, bounds, prep: as the forward
 *   rowsum  the D = rowsum(dO * O) preprocessing: reads O, dO and LSE once,
 *           2*B*H*Sq*D*e + B*H*Sq*4 (bytes_rowsum_read), writes D and LSE2,
 *           2*B*H*Sq*4, and zeroes the fp32 dQ accumulator, B*H*Sq*D*4
 *           (bytes_rowsum_write)
 *   dQ      the conversion: reads the fp32 accumulator once, B*H*Sq*D*4
 *           (bytes_dq_convert), writes dQ in bf16, B*H*Sq*D*e (bytes_dq)
 * The compulsory ("unique") bytes read every input and write every output
 * once: the floor of the HBM traffic that dram__bytes measures after L2
 * reuse (backward: Q, dO, O, LSE, the K/V columns some tile loads, the mask;
 * dQ, dK, dV written; the intermediates D and the fp32 dQ accumulator are
 * left out, as they may stay in L2); the tiled figure is what L1 asks of L2
 * (lts__t_sectors_srcunit_tex_op_read * 32).
 */
#ifndef FM_COST_H
#define FM_COST_H

#include <stdint.h>

#include "fm_colmask.h"
#include "fm_kernels.h"
#include "fm_status.h"
#include "fm_tile_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_cost_shape {
  int64_t batch, heads;    /* B, H of the attention problem */
  int32_t head_dim;        /* D */
  int32_t br, bc;          /* the kernel's tile: query rows x key columns */
  int32_t elem_bytes;      /* bytes per Q/K/V/O element (2 for bf16) */
  fm_variant variant;
  fm_pass pass;            /* FM_PASS_FWD (also 0) or FM_PASS_BWD; br, bc are that pass's tile */
} fm_cost_shape;

typedef struct fm_cost {
  fm_pass pass;                  /* FM_PASS_FWD or FM_PASS_BWD */
  int32_t tr, tc;                /* tiles per (batch, head): Tr x Tc */
  int64_t tiles_total;           /* B*H*Tr*Tc */
  int64_t tiles[FM_TILE_NCLASSES]; /* min/max classes over all (b, h), FM_TILE_* */
  int64_t tiles_visited;         /* K/V loaded and math done */
  int64_t tiles_elementwise;     /* visited tiles that apply the element mask */
  double rho;                    /* tiles[MASKED] / tiles_total */
  double flops_paper;            /* 4*B*H*Sq*Sk*D*(1-rho), x 2.5 backward */
  double flops_executed;         /* 4*D*rows*cols (backward 10*D*rows*cols) over the visited tiles */
  double flops_full;             /* flops_paper at rho = 0: every element */
  /* tiled requests, bytes */
  int64_t bytes_q, bytes_kv, bytes_vectors, bytes_dense_mask, bytes_bounds;
  int64_t bytes_prep_read, bytes_prep_write;
  int64_t bytes_o, bytes_lse;    /* forward: written; backward: LSE read per visited tile, O 0 */
  /* backward only (0 in the forward), see above */
  int64_t bytes_do, bytes_delta, bytes_dq_accum, bytes_dkdv;
  int64_t bytes_rowsum_read, bytes_rowsum_write, bytes_dq_convert, bytes_dq;
  int64_t bytes_read, bytes_write; /* sums of the above (bytes_dq_accum counts in both) */
  /* compulsory bytes: every input read once, every output written once */
  int64_t unique_read, unique_write;
} fm_cost;

/* Checks a shape: B, H >= 1, D in 1..1024, tile sizes in 1..65536, e in 1..8,
 * a known variant, pass 0, FM_PASS_FWD or FM_PASS_BWD (a pass has one tile). */
fm_status fm_cost_shape_check(const fm_cost_shape *s, fm_err *err);

/* Modelled bytes one tile requests for its min/max class and real rows x
 * cols. Forward: K/V, interval vectors or dense mask, its 8 bounds; Q, O, LSE
 * and the preprocessing belong to rows and sets, not tiles, and are not
 * included. Backward: Q, dO, LSE, D, the fp32 dQ read and written, interval
 * vectors or dense mask, its 8 bounds; K, V, dK, dV belong to key tiles and
 * the preprocessing and conversion to rows, and are not included. */
int64_t fm_cost_tile_bytes(const fm_cost_shape *s, int cls, int32_t rows, int32_t cols);

/* The cost of the kernel on mask m. classes: (nsets, Tr, Tc) min/max classes
 * at (s->br, s->bc) as fm_classify writes them, or NULL to classify here
 * (O(nsets*Tr*Tc) bytes of scratch). tile_bytes, when not NULL, receives
 * (nsets, Tr, Tc) int64 fm_cost_tile_bytes per tile (caller-allocated). */
fm_status fm_cost_compute(const fm_colmask *m, const fm_cost_shape *s, const uint8_t *classes,
                          int64_t *tile_bytes, fm_cost *out, fm_err *err);

/* The paper's FLOP count (docs/DESIGN.md, "How we measure"): the
 * forward pass does two matmuls of 2*Sq*Sk*D FLOPs per (batch, head) on the
 * tiles it does not skip, 4*B*H*Sq*Sk*D*(1-rho); the backward does five, 2.5
 * times the forward's; FM_PASS_BOTH counts both (3.5 times). rho is the block
 * sparsity at the kernel's own tile size (0 for the full count). */
double fm_cost_paper_flops(int64_t batch, int64_t heads, int64_t sq, int64_t sk, int32_t head_dim,
                           double rho, fm_pass pass);

/* TFLOP/s of `flops` done in `ms` milliseconds (NaN when ms <= 0). */
double fm_cost_tflops(double flops, double ms);

#ifdef __cplusplus
}
#endif
#endif
