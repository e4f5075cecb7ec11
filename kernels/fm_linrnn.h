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
 * computed chunkwise: the T tokens are cut into chunks of C
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
 *                     the diagonal: no math (variant SKIP; the chunk's q, k, v
 *                     are loaded once for all its tiles and terms)
 *   FM_TILE_PARTIAL   masked element-wise (D_ts = 0 where masked)
 *   FM_TILE_UNMASKED  plain
 * Variants (fm_linrnn_variant; every variant walks the same chunks in the
 * same order, and accumulates in the same order, so a skipped product is
 * exactly a zero the others add):
 *   SKIP    the c x c sub-tiles the rule calls MASKED are not computed; the
 *           inter-chunk term runs only on 16-row blocks holding a row whose
 *           document began before the chunk; a state is computed only where it
 *           is read (the next chunk continues its document, or final_state
 *           asks for it), over the 16-token steps of its own document.
 *   CAUSAL  what chunkwise kernels do today inside a chunk: the sub-tiles on
 *           and below the diagonal, the inter-chunk term on every row, the
 *           state of the chunk's last document over every token of the chunk
 *           (weights 0 outside the document).
 *   NOSKIP  CAUSAL and the sub-tiles above the diagonal too (the baseline).
 * All three give bit-identical outputs and final states (a skipped product
 * adds exact zeros). Sub-tiles wider than 16 are computed whole, in 16 x 16
 * blocks. One unit (document or checkpoint segment, head, value block) carries
 * the state through its chunks in registers, so a document of n chunks is n
 * chunk steps of one CTA in sequence, unless the documents are long (8 chunks
 * or more on average) and too few to fill the GPU (under 512 (document, head,
 * value block) walks): then a state-only pass computes the state every kseg
 * chunks and a scan chains them, so that about 1024 units share the walk
 * (a persistent grid of the CTAs that fit takes them from a counter). The
 * choice depends on the shape alone; every variant takes the same.
 *
 * The two-pass path (chunk 128, sub-chunk 64, dk 128, its states within 4
 * GiB; again a function of the shape): the walk above runs without outputs and
 * stores the state entering every live chunk (fp16 with a power-of-two scale
 * per 16 value columns, nchunks x H x dk x dv in the workspace), then one CTA per (chunk, head) computes the chunk's outputs
 * with wgmma, transposed (kernels/fm_linrnn_wg.cuh), no chunk waiting for
 * another (FM_LINRNN_TWO_PASS=0 in the environment turns the path off: the
 * A/B against the fused kernel). With checkpoints, the state-only pass
 * stores the states of the segments it walks whole (kernels/fm_linrnn.cuh,
 * "Covered segments"), and the outputs take S_in there from them and the
 * chained checkpoint states, so those segments are walked once. Its sub-tiles are
 * the 64 x 64 of c = 64, visited and skipped by the same rule; its products are
 * split the same way, but the stored state entering a chunk is rounded to fp16
 * (2^-11 relative an element), so the inter term's error is ~1e-4 of the
 * output instead of ~1e-5; its bits differ from the fused kernel's (every
 * variant of one shape takes the same path, so skip == causal == noskip holds
 * on it too).
 *
 * Numerics: fp32 accumulation; every tensor-core product has one operand
 * exact in bf16 (q, k, v) and the other (P, the state, the decay-weighted v)
 * split into two bf16 halves, so the result is within ~1e-5 of the fp64
 * recurrence before the output's own bf16 rounding (2^-9 relative); ~1e-4 on
 * the two-pass path (its states entering a chunk in fp16, above). Decays are
 * computed in fp32 as exp of sums of non-positive log-decays (never the
 * difference of two long sums); g is clamped at -64 (exp(-64) ~ 1.6e-28; -inf
 * is allowed) and a document's first g is not used. g > 0 is not checked.
 *
 * Layouts (device pointers), packed tokens T, heads H (one batch: documents
 * are packed along T, as flash-linear-attention's cu_seqlens path does):
 *   q, k        (T, H, dk) bf16 (uint16_t bit patterns), 16-byte aligned
 *   v, o        (T, H, dv) bf16; v 16-byte aligned, o 4-byte aligned
 *   g           (T, H) fp32 log decay, g <= 0 (alpha_t = exp(g_t)); the g of a
 *               document's first token multiplies a zero state (no effect)
 *   cu_seqlens  (ndocs + 1) int32: 0 = cu[0] < cu[1] < ... < cu[ndocs] = T
 *               (read on the device only: not checked; a violation is undefined)
 *   final_state (ndocs, H, dk, dv) fp32 or NULL: S at each document's last
 *               token, every document written
 *   tile_class  (H, nchunks, C/c, C/c) uint8 FM_TILE_* (instrumented only):
 *               the rule's class of each sub-tile (a sub-tile past T: MASKED);
 *               every element written by the launch (by its preprocessing)
 *   tile_cycles (H, nchunks, C/c, C/c) int64 (instrumented only): clock64
 *               cycles spent scoring the sub-tile (Q K^T, decay, mask, the
 *               split and store of P), summed over its 16 x 16 blocks, as seen
 *               by the unit of the first 16 value columns (two-pass path: by
 *               warp 0 of the warpgroup that scores the sub-tile); 0 exactly
 *               for sub-tiles the variant does not
 *               visit (its P V products are not timed)
 * nchunks = ceil(T / C); T need not be a multiple of C. Head dims: dk 64 or
 * 128, dv 64, 128 or 256; chunk C 64 or 128 (256 is not built: its tiles do
 * not fit the shared memory of one CTA); sub-chunk c in {16, 32, 64}, c <= C
 * (anything else is FM_EUNSUPPORTED, with the list in the message). Bad
 * arguments are FM_EINVAL, one line each. CUDA runtime failures are FM_EIO
 * with the CUDA error in the message; FM_EUNSUPPORTED when no usable device
 * exists or it is not sm_90 (the kernels are built for sm_90a only).
 * Workspace: the caller's (fm_linrnn_problem.workspace) or, when it passes
 * none, stream-ordered, allocated and freed on `stream` (its size:
 * fm_linrnn_workspace_bytes, O(T H): per token its document and the in-block
 * decay sums, per chunk its sub-tile classes and flags; with checkpoints one
 * dk x dv fp32 state per checkpoint and head, nchunks / kseg of them; on the
 * two-pass path one dk x dv fp16 state and dv / 16 scales per chunk and head,
 * and with checkpoints one decay per chunk and head).
 * Design, costs and measurements: kernels/PERF_NOTES.md, "Linear RNN".
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
  /* NULL: the launch allocates its workspace stream-ordered and frees it.
     Else the caller's device memory (256-byte aligned, workspace_bytes of it,
     at least fm_linrnn_workspace_bytes(p)), owned by the caller, not to be
     touched until the launch's work on its stream is done: a caching
     allocator's block (PyTorch's) spares the stream-ordered pool's mapping
     on every call. */
  void *workspace;
  size_t workspace_bytes;
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
