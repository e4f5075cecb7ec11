/* fm_linrnn_cpu.h — the CPU side of the chunkwise linear-RNN kernel
 * (kernels/fm_linrnn.h; docs/LINRNN.md; issue 23): packed document lengths,
 * the packed documents as a column-interval mask, the class of every c x c
 * sub-chunk tile, what each variant visits and its work in FLOPs, the
 * proposal's tile estimate beside the exact counts, the fp64 references
 * (chunkwise and token by token) and the per-tile trace of one run.
 *
 * (Named fm_linrnn_cpu.h: kernels/fm_linrnn.h, the kernel's host API, holds
 * the name fm_linrnn.h and its guard FM_LINRNN_H, and app/ sees both folders.)
 *
 * ---- the math (docs/LINRNN.md, "The recurrence") ----------------------------
 * Tokens t = 0 .. T-1 packed from documents [cu[d], cu[d+1]), per head h:
 *   S_t = exp(g_t) S_{t-1} + k_t v_t^T      (S: dk x dv; S_{t-1} = 0 at a document's
 *   o_t = scale S_t^T q_t                    first token, whose g_t is then unused)
 * Chunkwise with chunks [nC, nC + C) cut from token 0 whatever the documents
 * (no alignment), G_t = g_{nC} + ... + g_t inside chunk n:
 *   o_t = scale exp(G_t) S_in^T q_t      when doc(t) began before the chunk ("inter")
 *       + scale sum_{s in chunk, s <= t, doc(s) = doc(t)} exp(G_t - G_s) (q_t . k_s) v_s
 * with S_in the state after token nC - 1. The sum runs over the n x n grid of
 * c x c sub-chunk tiles (n = C / c), row block bi, key block bj.
 *
 * ---- the mask and the tile classes (docs/LINRNN.md, "Tiles") -----------------
 * The packed documents are fmsim's causal_document mask, one vector set,
 * Sq = Sk = T, causal: key s is visible to rows [s, end(doc(s))), so
 *   LTS_s = end(doc(s)) = cu[d + 1] for s in document d, LTE_s = T, UT empty.
 * (The proposal's LTS_s = s, LTE_s = end(doc(s)) masks the diagonal; see
 * fm_lr_proposal_colmask.) A tile's class is fmsim's one tile rule
 * (fm_tile_rule.h: fm_tile_bounds_of_columns over its real keys, then
 * fm_classify_minmax over its real rows): FM_TILE_MASKED (no visible (t, s)),
 * FM_TILE_PARTIAL, FM_TILE_UNMASKED. For these masks the rule is exact. A
 * tile with no real row or no real key (past T in the last chunk) is stored
 * as FM_TILE_MASKED and counted nowhere ("in range": both inside [0, T)).
 *
 * ---- the variants and the work model (docs/LINRNN.md, "Work") ---------------
 * Values are fm_linrnn_variant's (kernels/fm_linrnn.h). Per in-range tile:
 *   visited      SKIP: class != MASKED; CAUSAL: bi >= bj; NOSKIP: always
 *   elementwise  visited and class != UNMASKED (the element mask is applied)
 * Per in-range row block bi of chunk n (its first row r0 = nC + bi c):
 *   inter live   SKIP: r0 < nC + carried_n; CAUSAL, NOSKIP: always
 *   carried_n    the rows of chunk n whose document began before it: 0 when
 *                nC is a document start (chunk 0 always), else up to the
 *                first document start after nC (or the chunk's end)
 * The state handed from chunk n to chunk n + 1 (n < nchunks - 1):
 *   CAUSAL, NOSKIP  C rows (K^T V of the whole chunk, masked element-wise)
 *   SKIP            0 rows when token (n+1)C starts a document (the state is
 *                   reset there); else the rows from the first row of the row
 *                   block holding the start of doc((n+1)C - 1) (or nC when that
 *                   document began before chunk n) to the chunk's end
 * FLOPs (multiply-add = 2):
 *   intra  2 c c dk + 2 c c dv   per visited tile (QK^T, then its V product)
 *   inter  2 c dk dv             per live row block (q S_in)
 *   state  2 dk dv               per state row (K^T V)
 * Not counted: the decays (exp, scaling S_in), and the final states of
 * documents that end inside a chunk (one K^T V over that document's rows in
 * the chunk, at most 2 T dk dv in all, and only when asked for).
 * Useful FLOPs (what no skipping can avoid): 2 (dk + dv) per visible (t, s)
 * pair of a chunk, 2 dk dv per row with a carried state and per row of a
 * state that crosses into the next chunk.
 *
 * Memory: counting and classifying read the mask's vectors, O(T) (fm_colmask
 * stores 4 int32 per key: 16 T bytes), and keep n tile bounds of 32 bytes;
 * never O(T^2), never a dense C x C block. The class array of one head is
 * nchunks n^2 bytes, about T C / c^2: at most T for the kernel's shapes
 * (c^2 >= C).
 *
 * Status codes: FM_OK; FM_EINVAL for a bad argument (named in the message);
 * FM_ENOMEM when an allocation (checked against fm_limits.h) fails; FM_EIO
 * and FM_EFORMAT from the trace files.
 */
#ifndef FM_LINRNN_CPU_H
#define FM_LINRNN_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "fm_colmask.h"
#include "fm_status.h"
#include "fm_tile_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- variants: a registry (name, meaning) ----------------------------------- */

typedef enum fm_lr_variant {
  FM_LR_SKIP = 0,   /* = FM_LINRNN_SKIP: FlashMask's masked tiles and dead inter terms skipped */
  FM_LR_CAUSAL = 1, /* = FM_LINRNN_CAUSAL: only the tiles above the diagonal skipped */
  FM_LR_NOSKIP = 2, /* = FM_LINRNN_NOSKIP: every tile visited */
  FM_LR_NVARIANTS = 3
} fm_lr_variant;

const char *fm_lr_variant_name(int v);    /* "skip", "causal", "noskip"; NULL out of range */
const char *fm_lr_variant_meaning(int v); /* one line; NULL out of range */
int fm_lr_variant_parse(const char *name); /* the variant, -1 when unknown */

/* The per-tile rules above, written once for the CPU and the kernel. */
FM_HD int fm_lr_tile_visited(int variant, int cls, int32_t bi, int32_t bj) {
  if (variant == FM_LR_SKIP) return cls != FM_TILE_MASKED;
  if (variant == FM_LR_CAUSAL) return bi >= bj;
  return 1;
}
FM_HD int fm_lr_tile_elementwise(int variant, int cls, int32_t bi, int32_t bj) {
  return fm_lr_tile_visited(variant, cls, bi, bj) && cls != FM_TILE_UNMASKED;
}
/* Row block bi (sub rows each) of a chunk whose first `carried` rows continue
 * a document begun before it. */
FM_HD int fm_lr_inter_live(int variant, int32_t bi, int32_t sub, int32_t carried) {
  return variant != FM_LR_SKIP || bi * sub < carried;
}

/* ---- documents -------------------------------------------------------------- */

/* Cumulative lengths cu (ndocs + 1) int32, 0 = cu[0] < ... < cu[ndocs] = T.
 * The caller frees *cu with free(). */

/* Documents of L tokens; the last one cut to fill T (1 <= L, T <= 2^30). */
fm_status fm_lr_docs_fixed(int64_t tokens, int64_t len, int32_t **cu, int32_t *ndocs, fm_err *err);

/* Log-normal document lengths as flash-linear-attention's benchmarks draw
 * them (docs/LINRNN.md, "Documents"): N = round(T / mean) documents (at
 * least 1, at most T / min_len), each of min_len tokens plus a share of the
 * T - N min_len others, handed out one token at a time to document i with
 * probability w_i / sum w, w_i = exp(sigma Z_i), Z_i standard normal; no
 * upper bound on a length. The lengths sum to T exactly (no document is
 * cut); their mean is T / N. Seeded (fm_rng.h, stream "lognormal"):
 * O(T) time, O(N) memory. FM_EINVAL unless 1 <= min_len <= mean <= T and
 * sigma > 0. */
fm_status fm_lr_docs_lognormal(int64_t tokens, double mean, double sigma, int32_t min_len,
                               uint64_t seed, int32_t **cu, int32_t *ndocs, fm_err *err);

/* Checks cu: ndocs >= 1, cu[0] = 0, strictly increasing, cu[ndocs] = T. */
fm_status fm_lr_docs_check(const int32_t *cu, int32_t ndocs, int64_t tokens, fm_err *err);

/* The causal_document mask of the documents (above): Sq = Sk = T, one set,
 * causal. The caller destroys *out (fm_colmask_destroy). */
fm_status fm_lr_docs_colmask(const int32_t *cu, int32_t ndocs, fm_colmask **out, fm_err *err);
/* The proposal's vectors: LTS_s = s, LTE_s = end(doc(s)), causal (causal-2).
 * They mask every diagonal element (a token no longer sees itself) and
 * unmask the rows after the document again. For `fmsim check`. */
fm_status fm_lr_proposal_colmask(const int32_t *cu, int32_t ndocs, fm_colmask **out, fm_err *err);

/* FM_OK when m is a packed-document mask as above (causal, one set, Sq = Sk,
 * LTE = Sq, UT empty, LTS_s = the end of a run of keys that starts at s' with
 * LTS_{s'-1} = s'); else FM_EINVAL naming the first key that is not. */
fm_status fm_lr_mask_check(const fm_colmask *m, fm_err *err);

/* ---- tiles, counts, the estimate ------------------------------------------- */

/* 1 <= T <= 2^30, 1 <= c <= C <= 4096, c divides C. */
fm_status fm_lr_shape_check(int64_t tokens, int32_t chunk, int32_t sub, fm_err *err);
int32_t fm_lr_nchunks(int64_t tokens, int32_t chunk); /* ceil(T / C) */
/* Elements of one head's class array: nchunks * (C/c)^2. */
int64_t fm_lr_class_len(int64_t tokens, int32_t chunk, int32_t sub);

/* The class of every sub-tile, one head: classes is (nchunks, C/c, C/c)
 * uint8 FM_TILE_* (caller-allocated, fm_lr_class_len), the layout of the
 * kernel's tile_class for one head. m passes fm_lr_mask_check. The kernel's
 * instrumented record holds these classes in every variant (as fmsim's
 * attention kernels record the rule's class under noskip); what a variant
 * visited is fm_lr_tile_visited of them, and its tile_cycles are 0 exactly
 * on the tiles it skipped. */
fm_status fm_lr_classify(const fm_colmask *m, int32_t chunk, int32_t sub, uint8_t *classes,
                         fm_err *err);

/* The classes (n, n) of chunk ch alone, fm_lr_classify's chunk ch (m and
 * the shape checked by the caller; bounds: n of scratch). */
void fm_lr_classify_chunk(const fm_colmask *m, int32_t chunk, int32_t sub, int32_t ch,
                          fm_tile_bounds *bounds, uint8_t *cls);

/* The rows of chunk n that continue a document begun before it (carried_n
 * above) and the first row of the state handed to chunk n + 1 under SKIP
 * (*state_from, an absolute token index; (n+1)C when no state crosses, i.e.
 * 0 rows; only for n < nchunks - 1). m passes fm_lr_mask_check. */
void fm_lr_chunk_rows(const fm_colmask *m, int32_t chunk, int32_t sub, int32_t n, int32_t *carried,
                      int64_t *state_from);

/* What one variant does over the whole sequence, one head. */
typedef struct fm_lr_work {
  int64_t tiles_visited;     /* in-range sub-tiles computed */
  int64_t tiles_elementwise; /* of those, with the element mask */
  int64_t inter_blocks;      /* row blocks whose q S_in term is computed */
  int64_t state_rows;        /* rows of the K^T V state updates */
  double flops_intra, flops_inter, flops_state;
  double flops;              /* their sum */
} fm_lr_work;

/* Every count of one sequence at (C, c, dk, dv), one head (multiply by H). */
typedef struct fm_lr_counts {
  int64_t tokens;
  int32_t chunk, sub, n, nchunks, ndocs, dk, dv;
  int64_t tiles;                         /* in-range sub-tiles of the diagonal C x C blocks */
  int64_t tiles_class[FM_TILE_NCLASSES]; /* by the tile rule, indexed by FM_TILE_* */
  int64_t row_blocks;                    /* in-range row blocks */
  int64_t boundaries;                    /* document starts strictly inside a chunk */
  double rho;                  /* tiles_class[FM_TILE_MASKED] / tiles */
  double boundaries_per_chunk; /* boundaries / nchunks: the proposal's m */
  fm_lr_work work[FM_LR_NVARIANTS];
  double flops_useful;  /* element-exact work (above) */
  int64_t mask_bytes;   /* the mask's vectors the count read: 16 T (fm_colmask) */
  int64_t scratch_bytes; /* what the count allocated: n tile bounds */
} fm_lr_counts;

/* Counts one sequence: O(T + nchunks n^2) time, O(n) memory besides m.
 * dk, dv >= 1 only scale the FLOPs. */
fm_status fm_lr_count(const fm_colmask *m, int32_t chunk, int32_t sub, int32_t dk, int32_t dv,
                      fm_lr_counts *out, fm_err *err);

/* The proposal's estimate of the masked fraction of the sub-tiles with m
 * document boundaries per chunk: causal + m (n-1)(n-2) / (6 n^2), causal =
 * n(n-1) / (2 n^2); 28/64 + 7m/64 at C = 128, c = 16. It treats every
 * boundary alone; boundaries that share a chunk mask overlapping tiles. */
double fm_lr_proposal_rho(int32_t chunk, int32_t sub, double m);

typedef struct fm_lr_estimate {
  double m;                /* boundaries per chunk (counted) */
  double rho_causal;       /* the causal part: n(n-1) / (2 n^2) */
  double rho_estimate;     /* fm_lr_proposal_rho at m (may exceed 1) */
  double rho_exact;        /* counts->rho */
  double visited_estimate; /* 1 - rho_estimate (may be negative) */
  double visited_exact;    /* work[FM_LR_SKIP].tiles_visited / tiles */
  double error;            /* rho_estimate - rho_exact */
} fm_lr_estimate;
void fm_lr_estimate_of(const fm_lr_counts *c, fm_lr_estimate *out);

/* flash-linear-attention's packing: every document starts a new chunk of
 * `chunk` tokens (its prepare_chunk_indices), the last chunk of a document
 * padded. Its work by the CAUSAL rules on whole chunks: per chunk n(n+1)/2
 * visited tiles, n inter blocks, C state rows (every chunk but the last). */
typedef struct fm_lr_aligned {
  int64_t tokens_padded; /* sum over documents of ceil(L / C) C */
  int64_t chunks;        /* sum of ceil(L / C) */
  fm_lr_work work;
} fm_lr_aligned;
fm_status fm_lr_aligned_count(const int32_t *cu, int32_t ndocs, int32_t chunk, int32_t sub,
                              int32_t dk, int32_t dv, fm_lr_aligned *out, fm_err *err);

/* ---- the fp64 references ---------------------------------------------------- */

typedef struct fm_lr_problem {
  int64_t tokens;              /* T */
  int32_t heads, dk, dv;       /* H >= 1, dk >= 1, dv >= 1 */
  double scale;                /* usually 1/sqrt(dk) */
  int32_t ndocs;
  const int32_t *cu_seqlens;   /* (ndocs + 1), fm_lr_docs_check */
  const float *q, *k;          /* (T, H, dk): bf16 values converted with fm_bf16.h, or any */
  const float *v;              /* (T, H, dv) */
  const float *g;              /* (T, H) log decay, finite and <= 0 */
} fm_lr_problem;

/* The chunkwise form above, as a kernel of `variant` runs it: per row block,
 * the inter term first, then the tiles bj = 0 .. n-1 it visits, each summed
 * over its keys in order, masked elements weighted exactly 0; tiles of
 * fm_lr_classify. Outputs: o (T, H, dv) double; final_state (ndocs, H, dk,
 * dv) double or NULL (S at each document's last token). Every variant gives
 * bit-identical outputs (a skipped tile would add exact zeros). Memory:
 * O(T) for the mask, O(dk dv + C + n^2) per head besides the outputs. */
fm_status fm_lr_reference_chunkwise(const fm_lr_problem *p, int32_t chunk, int32_t sub, int variant,
                                    double *o, double *final_state, fm_err *err);

/* The token-by-token recurrence (the independent path), same outputs. */
fm_status fm_lr_reference_recurrent(const fm_lr_problem *p, double *o, double *final_state,
                                    fm_err *err);

/* ||got - ref||_2 / ||ref||_2 over n values (0 when both are zero, +inf
 * when only ref is, NaN when any value is NaN). */
double fm_lr_rel_error(const double *got, const double *ref, int64_t n);

/* ---- the per-tile trace of a run (docs/LINRNN.md, "Trace") ----------------- */

/* A linrnn trace folder (docs/DESIGN.md, "Traces": staged, summary.json
 * last): summary.json (format "fmsim-trace", kind "linrnn"), tile_class.npy
 * uint8 (R, nchunks, n, n), tile_cycles.npy int64 (R, nchunks, n, n) when
 * measured, cu_seqlens.npy int32 (ndocs + 1). R is the heads of the record:
 * H for a kernel's (kernels/fm_linrnn.h's tile_class), 1 for the CPU's
 * (every head shares the documents). */
typedef struct fm_lr_trace {
  char device[128];     /* "cpu" or the GPU's name */
  char variant[16];     /* the variant whose record it is */
  char docs_source[160];
  int64_t tokens;
  int32_t chunk, sub, nchunks, ndocs, record_heads;
  int32_t shown_chunk;  /* the chunk a figure draws by default */
  int32_t *cu_seqlens;  /* (ndocs + 1) */
  uint8_t *tile_class;  /* (record_heads, nchunks, n, n) */
  int64_t *tile_cycles; /* the same shape, or NULL */
} fm_lr_trace;

/* One variant's work as a JSON object `key` in the open object: tiles_visited,
 * tiles_elementwise, inter_blocks, state_rows, flops, flops_intra,
 * flops_inter, flops_state (the FLOPs times `heads`). */
struct fm_json;
void fm_lr_work_json(struct fm_json *j, const char *key, const fm_lr_work *w, double heads);

/* The chunk with the most document boundaries inside it (the first such). */
int32_t fm_lr_busiest_chunk(const int32_t *cu, int32_t ndocs, int32_t chunk);

/* Writes the folder dir (locked by the caller, fm_outdir_lock_take); counts,
 * when not NULL, adds the counts of every variant to summary.json. */
fm_status fm_lr_trace_write(const char *dir, const fm_lr_trace *t, const fm_lr_counts *counts,
                            fm_err *err);
/* Reads a folder written by fm_lr_trace_write; checks every array against
 * the summary. The caller frees with fm_lr_trace_free. */
fm_status fm_lr_trace_load(const char *dir, fm_lr_trace *t, fm_err *err);
void fm_lr_trace_free(fm_lr_trace *t); /* frees the arrays; NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif
