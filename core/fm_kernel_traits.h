/* fm_kernel_traits.h — the tile configuration of every GPU kernel, in one
 * place that the C core (cost model, CPU simulation, timing model, `bench
 * --export-only`) and the CUDA kernels both read (FlashAttention's
 * kernel_traits, written as plain macros so that a C-only build sees them).
 *
 * A kernel's tile is Br query rows x Bc key columns for one head dim. The
 * kernels static_assert their compile-time tiles against these macros; the
 * registry (fm_kernels.h) lists them per kernel. docs/DESIGN.md, "Kernels",
 * says how to add a kernel.
 */
#ifndef FM_KERNEL_TRAITS_H
#define FM_KERNEL_TRAITS_H

/* sm80: the portable mma.sync kernel (kernels/fm_sm80_fwd.cuh). One CTA of
 * 4 warps owns 128 query rows; key tiles of 64 columns for both head dims. */
#define FM_SM80_BR 128
#define FM_SM80_BC_HD64 64
#define FM_SM80_BC_HD128 64
/* CTAs resident per SM: the kernel's __launch_bounds__ minimum (static_assert in
 * kernels/fm_sm80.cu); the registry's schedule of the pass. */
#define FM_SM80_CTAS_PER_SM 2

/* sm90: the Hopper kernel (kernels/fm_sm90_fwd.cuh): consumer warpgroups of 64
 * query rows each (wgmma m64), two at head dim 128 and three at head dim 64,
 * key tiles of 128 columns. */
#define FM_SM90_BR_HD64 192
#define FM_SM90_BC_HD64 128
#define FM_SM90_BR_HD128 128
#define FM_SM90_BC_HD128 128
/* CTAs resident per SM, forward and backward: the kernels' __launch_bounds__
 * minimum (static_asserts in kernels/fm_sm90_fwd.cuh, fm_sm90_bwd.cuh); their
 * persistent grids launch at most this many per SM. */
#define FM_SM90_CTAS_PER_SM 1
#define FM_SM90_BWD_CTAS_PER_SM 1
/* sm90 backward (kernels/fm_sm90_bwd.cuh): one CTA per key tile of 128 columns
 * (two consumer warpgroups of 64 key rows each) steps through the query tiles
 * that are not fully masked, 64 query rows a step. */
#define FM_SM90_BWD_BR_HD64 64
#define FM_SM90_BWD_BC_HD64 128
#define FM_SM90_BWD_BR_HD128 64
#define FM_SM90_BWD_BC_HD128 128

#endif
