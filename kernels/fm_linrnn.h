/* fm_linrnn.h — host API of the chunkwise linear-attention kernel (C-callable).
 *
 * Linear attention with a scalar per-token, per-head decay over packed
 * documents (GLA with scalar gates, "simple GLA", mLSTM-style scalar decay),
 * the state reset at every document boundary:
 *
 *   S_t = exp(g_t) * S_{t-1} + k_t v_t^T        (S_t: dk x dv, fp32)
 *   o_t = scale * S_t^T q_t
 *   S_{t-1} = 0 when t is the first token of a document (cu_seqlens)
 *
 * computed chunkwise (docs/LINRNN.md): the T tokens are cut into chunks of C
 * tokens from token 0, with no regard for document boundaries (documents are
 * packed without chunk alignment). Inside a chunk, the intra-chunk term
 * (Q K^T * D) V runs over c x c sub-chunk tiles, D_ts = exp(G_t - G_s) for s
 * <= t in the same document and 0 otherwise; the inter-chunk term q_t S adds
 * the state carried into the chunk for the rows whose document began before
 * it. The sub-chunk tiles are classified by fmsim's tile rule
 * (core/fm_tile_rule.h) from the column intervals of the packed documents (the
 * causal_document mask: key s is visible to rows [s, end of s's document)),
 * restricted to the diagonal C x C blocks:
 *   FM_TILE_MASKED    every (t, s) of the tile crosses a boundary or lies above
 *                     the diagonal: no load, no math (variant SKIP)
 *   FM_TILE_PARTIAL   masked element-wise (D_ts = 0 where masked)
 *   FM_TILE_UNMASKED  plain
 * Variants (fm_linrnn_variant): SKIP skips FlashMask's masked tiles and the
 * inter-chunk term of row blocks whose documents all begin inside the chunk;
 * CAUSAL skips only the tiles above the diagonal (what chunkwise kernels do
 * today); NOSKIP visits every tile. All three give bit-identical outputs and
 * final states (a skipped tile adds exact zeros).
 *
 * Layouts (device pointers), packed tokens T, heads H (one batch: documents
 * are packed along T, as flash-linear-attention's cu_seqlens path does):
 *   q, k        (T, H, dk) bf16 (uint16_t bit patterns)
 *   v, o        (T, H, dv) bf16
 *   g           (T, H) fp32 log decay, g <= 0 (alpha_t = exp(g_t)); the g of a
 *               document's first token multiplies a zero state (no effect)
 *   cu_seqlens  (ndocs + 1) int32: 0 = cu[0] < cu[1] < ... < cu[ndocs] = T
 *   final_state (ndocs, H, dk, dv) fp32 or NULL: S at each document's last token
 *   tile_class  (H, nchunks, C/c, C/c) uint8 FM_TILE_* (instrumented only)
 *   tile_cycles (H, nchunks, C/c, C/c) int64 clock64 cycles of the tile's work
 *               (0 for skipped tiles; instrumented only)
 * nchunks = ceil(T / C). Head dims: dk 64 or 128, dv 64, 128 or 256; chunk C
 * in {64, 128, 256}, sub-chunk c in {16, 32, 64}, c <= C (a combination this
 * build does not instantiate is FM_EUNSUPPORTED, with the list in the message).
 * CUDA runtime failures are FM_EIO with the CUDA error in the message;
 * FM_EUNSUPPORTED when no usable device exists. Workspace: stream-ordered,
 * allocated and freed on `stream` (its size: fm_linrnn_workspace_bytes, O(T)
 * mask data plus the per-chunk states).
 */
#ifndef FM_LINRNN_H
#define FM_LINRNN_H

#include <stddef.h>
#include <stdint.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fm_linrnn_variant {
  FM_LINRNN_SKIP = 0,   /* FlashMask: masked sub-chunk tiles and dead inter-chunk terms skipped */
  FM_LINRNN_CAUSAL = 1, /* only the tiles above the diagonal skipped (today's practice) */
  FM_LINRNN_NOSKIP = 2, /* every tile visited and masked element-wise (the baseline) */
  FM_LINRNN_NVARIANTS
} fm_linrnn_variant;

typedef struct fm_linrnn_problem {
  int32_t tokens, heads; /* T, H */
  int32_t dk, dv;        /* 64/128; 64/128/256 */
  int32_t chunk, sub;    /* C, c */
  int32_t ndocs;         /* documents in cu_seqlens */
  float scale;           /* usually 1/sqrt(dk) */
  const int32_t *cu_seqlens;
  const void *q, *k, *v;
  const float *g;
  void *o;
  float *final_state; /* NULL: not written */
  uint8_t *tile_class;  /* NULL unless instrumented */
  int64_t *tile_cycles; /* NULL unless instrumented */
} fm_linrnn_problem;

/* The name of a variant ("skip", "causal", "noskip"), NULL when out of range. */
const char *fm_linrnn_variant_name(fm_linrnn_variant v);

/* Bytes of stream-ordered workspace fm_linrnn_forward takes for p. */
size_t fm_linrnn_workspace_bytes(const fm_linrnn_problem *p);

/* Launches the forward on `stream` (a cudaStream_t; NULL the default stream):
 * asynchronous, no host synchronisation. instrumented selects the build that
 * writes tile_class / tile_cycles. */
fm_status fm_linrnn_forward(const fm_linrnn_problem *p, fm_linrnn_variant variant, int instrumented,
                            void *stream, fm_err *err);

/* sizeof(fm_linrnn_problem), for bindings that mirror the struct. */
size_t fm_linrnn_problem_size(void);

#ifdef __cplusplus
}
#endif
#endif
