/* fm_sm80.cu — host side of the portable mma.sync forward kernel
 * (fm_sm80_fwd.cuh): its parameters from the prepared launch, dispatch to the
 * per-head-dim launchers (fm_sm80_hd64.cu, fm_sm80_hd128.cu). */
#include <cuda_runtime.h>

#include "fm_cuda_status.cuh"
#include "fm_fwd_launch.cuh"
#include "fm_kernel_traits.h"
#include "fm_sm80_launch.cuh"

static_assert(FM_SM80_BR == fmk::BR && FM_SM80_BC_HD64 == fmk::tile_cfg<64>::BC &&
                  FM_SM80_BC_HD128 == fmk::tile_cfg<128>::BC,
              "core/fm_kernel_traits.h must match the sm80 kernel's tiles");

namespace fmk {

fm_status launch_sm80(const fwd_launch &l, fm_err *err) {
  const fm_attn_problem *p = l.p;
  fwd_params fp;
  fp.q = (const __nv_bfloat16 *)p->q;
  fp.k = (const __nv_bfloat16 *)p->k;
  fp.v = (const __nv_bfloat16 *)p->v;
  fp.o = (__nv_bfloat16 *)p->o;
  fp.lse = p->lse;
  fp.intervals = l.variant == FM_VARIANT_DENSE ? NULL : p->intervals;
  fp.bounds = l.bounds;
  fp.dense = p->dense_mask;
  fp.dense_set_stride = p->dense_per_set ? (int64_t)p->seqlen_q * p->seqlen_k : 0;
  fp.tile_class = l.instrumented ? p->tile_class : NULL;
  fp.tile_cycles = l.instrumented ? p->tile_cycles : NULL;
  fp.B = p->batch;
  fp.H = p->heads;
  fp.Sq = p->seqlen_q;
  fp.Sk = p->seqlen_k;
  fp.Tr = l.Tr;
  fp.Tc = l.Tc;
  fp.nb = p->mask_nb;
  fp.nh = p->mask_nh;
  fp.causal = p->causal ? 1 : 0;
  fp.scale = p->softmax_scale;
  fp.scale_log2 = p->softmax_scale * 1.4426950408889634f;
  cudaError_t e = p->head_dim == 128 ? launch_fwd<128>(fp, (int)l.variant, l.instrumented, l.stream)
                                     : launch_fwd<64>(fp, (int)l.variant, l.instrumented, l.stream);
  if (e != cudaSuccess) return cuda_fail(err, e, "sm80 forward kernel launch");
  return FM_OK;
}

}  // namespace fmk
