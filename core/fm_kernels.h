/* fm_kernels.h — the kernel registry: what each GPU kernel of fmsim is, which
 * GPUs it runs on, its tile per head dim, its variants and passes. Core reads
 * it without CUDA, so the CPU simulation, the cost model and `bench
 * --export-only` use the tile of the kernel that would run. The launchers
 * live in kernels/ (fm_attn.h), indexed by the same fm_kernel_id.
 *
 * Adding a kernel: a row here (fm_kernels.c: tiles, variants, passes and the
 * schedule of each pass), its tile and CTAs-per-SM macros in
 * fm_kernel_traits.h, its launcher row in kernels/fm_attn.cu; nothing else
 * (docs/DESIGN.md, "Adding a kernel").
 */
#ifndef FM_KERNELS_H
#define FM_KERNELS_H

#include <stdint.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a launch computes about the mask. Shared by the kernels, the cost
 * model and the traces ("variant" in summary.json). */
typedef enum fm_variant {
  FM_VARIANT_SKIP = 0,   /* the product: fully masked tiles skipped before any K/V load */
  FM_VARIANT_NOSKIP = 1, /* every tile visited, same arithmetic (bit-identical output) */
  FM_VARIANT_DENSE = 2,  /* element mask read from an Sq x Sk array in HBM */
  FM_NVARIANTS = 3
} fm_variant;

const char *fm_variant_name(fm_variant v); /* "skip", "noskip", "dense"; "?" when out of range */
/* Parses "skip" / "noskip" / "dense"; FM_EINVAL naming the choices otherwise. */
fm_status fm_variant_parse(const char *text, fm_variant *out, fm_err *err);

/* How the sm90 kernels, forward and backward, mask the elements of a partial
 * tile (fm_attn_problem.mask_method, kernels/fm_attn.h; kernels/fm_sm90_mask.h;
 * kernels/PERF_NOTES.md, "R2P (issue 25)"): every method masks the same
 * elements and gives the same output and gradients bit for bit; only their
 * speed differs. AUTO is the library's choice (R2P unless the build defines
 * FM_SM90_MASK_DEFAULT). SLICES or R2P, whichever is not the default, runs in
 * the skip variant only (the noskip variant and the other pipelining modes
 * are built with the default alone: FM_EUNSUPPORTED there). WORDS is an
 * implementation of R2P's mask: where the forward does not build it, it runs
 * R2P instead, never failing where R2P would run; the backward always runs
 * R2P for it. The sm80 kernel has one method and takes AUTO only.
 * `fmsim run --mask-method`, the scenario key `mask_method:` and
 * fmsim.torch's mask_method name it. */
typedef enum fm_mask_method {
  FM_MASK_METHOD_AUTO = 0,
  FM_MASK_METHOD_SLICES = 1, /* forward: a bit test per element; backward: an interval compare
                                per element */
  FM_MASK_METHOD_R2P = 2,    /* per-thread words applied by R2P, a select per element */
  FM_MASK_METHOD_WORDS = 3   /* forward: the per-thread R2P words precomputed per partial tile by a
                                preprocessing kernel and copied into the K stage with K; built for the
                                skip variant in the default mode, within FM90M_WORDS_BUDGET (256 MiB of
                                words workspace, kernels/fm_sm90_mask.h): beyond it, and for the
                                variants and modes where it is not built, the forward runs r2p, said
                                once on stderr; backward: r2p */
} fm_mask_method;

const char *fm_mask_method_name(fm_mask_method m); /* "auto", "slices", "r2p", "words"; "?" when out
                                                      of range */
/* Parses "auto" / "slices" / "r2p" / "words"; FM_EINVAL naming the choices otherwise. */
fm_status fm_mask_method_parse(const char *text, fm_mask_method *out, fm_err *err);

/* Forward, backward, or both. */
typedef enum fm_pass { FM_PASS_FWD = 1, FM_PASS_BWD = 2, FM_PASS_BOTH = 3 } fm_pass;
const char *fm_pass_name(fm_pass p); /* "fwd", "bwd", "both" */
fm_status fm_pass_parse(const char *text, fm_pass *out, fm_err *err);

typedef enum fm_kernel_id {
  FM_KERNEL_SM80 = 0, /* portable mma.sync kernel, sm_80 and up (built for sm_90a here) */
  FM_KERNEL_SM90 = 1, /* Hopper: TMA, wgmma, warp specialization (sm_90a only) */
  FM_NKERNELS = 2,
  FM_KERNEL_AUTO = -1 /* the fastest kernel the device supports (fm_kernel_auto) */
} fm_kernel_id;

#define FM_KERNEL_MAX_TILES 4

/* How one pass of a kernel spreads its work items over the SMs (the timing
 * model's fm_sched, core/fm_timing.h, follows from it). */
typedef enum fm_kernel_sched_kind {
  FM_KSCHED_NONE = 0,             /* the kernel has no such pass */
  FM_KSCHED_GRID = 1,             /* one CTA per work item, hardware block dispatch */
  FM_KSCHED_PERSISTENT_HEAD = 2,  /* a persistent grid: heads in order, heaviest first in each */
  FM_KSCHED_PERSISTENT_INDEX = 3  /* a persistent grid: heads in order, items in index order */
} fm_kernel_sched_kind;

/* The schedule facts of one pass. ctas_per_sm is the kernel's
 * __launch_bounds__ minimum of resident CTAs, a macro of fm_kernel_traits.h
 * that the kernel static_asserts against. */
typedef struct fm_kernel_sched {
  fm_kernel_sched_kind kind;
  int32_t ctas_per_sm; /* resident CTAs per SM; 0 with FM_KSCHED_NONE */
} fm_kernel_sched;

typedef struct fm_kernel_tile {
  int32_t head_dim, br, bc; /* forward: query rows x key columns of one CTA's tile */
  int32_t bwd_br, bwd_bc;   /* backward: query rows of one step x key columns of one CTA
                               (0 x 0 when the kernel has no backward) */
} fm_kernel_tile;

typedef struct fm_kernel_desc {
  fm_kernel_id id;
  const char *name;     /* "sm80", "sm90": what --kernel takes */
  const char *summary;  /* one line for help texts */
  int32_t cc_major, cc_minor; /* the compute capability it needs */
  int32_t cc_exact;     /* 1: that capability only (sm_90a code); 0: it or newer */
  int32_t preference;   /* auto picks the runnable kernel with the highest */
  int32_t ntiles;
  fm_kernel_tile tiles[FM_KERNEL_MAX_TILES];
  uint32_t variants;    /* bit (1u << fm_variant) per variant it implements */
  uint32_t passes;      /* FM_PASS_* bits it implements */
  fm_kernel_sched fwd_sched, bwd_sched; /* per pass; bwd_sched.kind FM_KSCHED_NONE without a backward */
} fm_kernel_desc;

/* The registry row of id (NULL when out of range). Static storage. */
const fm_kernel_desc *fm_kernel_get(fm_kernel_id id);

/* Parses a registry name ("sm80", "sm90") or "auto" (FM_KERNEL_AUTO); FM_EINVAL
 * naming the choices. */
fm_status fm_kernel_parse(const char *text, fm_kernel_id *out, fm_err *err);

/* The registry's kernel names in order, "sm80, sm90", into buf (returns buf):
 * what messages offer, so that a new registry row needs no other edit. */
const char *fm_kernel_names(char *buf, int cap);

/* The kernel that `auto` means on a device of compute capability major.minor:
 * the runnable kernel with the highest preference. major < 0 means "no device
 * known" (a CPU-only run): the answer is then the kernel for the reference GPU
 * (the H200, sm_90), so that simulations use the tile a GPU run would use.
 * FM_EUNSUPPORTED when no kernel runs on that capability. */
fm_status fm_kernel_auto(int32_t major, int32_t minor, fm_kernel_id *out, fm_err *err);

/* 1 when kernel id can run on compute capability major.minor. */
int fm_kernel_runs_on(fm_kernel_id id, int32_t major, int32_t minor);

/* The tile of kernel id for one pass (FM_PASS_FWD or FM_PASS_BWD) at
 * head_dim; FM_EUNSUPPORTED naming the supported head dims when it has none
 * for it, or when the kernel has no such pass; FM_EINVAL for FM_PASS_BOTH (a
 * pass has one tile). id may be FM_KERNEL_AUTO (resolved for no device, as
 * fm_kernel_auto(-1, ...)). */
fm_status fm_kernel_tile_size(fm_kernel_id id, fm_pass pass, int32_t head_dim, int32_t *br, int32_t *bc,
                              fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
