/* fm_sm80.cu — host side of the portable mma.sync forward kernel
 * (fm_sm80_fwd.cuh): its parameters from the prepared launch, dispatch to the
 * per-head-dim launchers (fm_sm80_hd64.cu, fm_sm80_hd128.cu). */
#include <cuda_runtime.h>

#include "fm_cuda_status.cuh"
#include "fm_pass_launch.cuh"
#include "fm_kernel_traits.h"
#include "fm_sm80_launch.cuh"

static_assert(FM_SM80_BR == fmk::BR && FM_SM80_BC_HD64 == fmk::tile_cfg<64>::BC &&
                  FM_SM80_BC_HD128 == fmk::tile_cfg<128>::BC,
              "core/fm_kernel_traits.h must match the sm80 kernel's tiles");
static_assert(FM_SM80_CTAS_PER_SM == fmk::CTAS_PER_SM &&
                  fmk::CTAS_PER_SM * fmk::smem_bytes<128>() <= 227 * 1024 &&
                  fmk::CTAS_PER_SM * fmk::smem_bytes<64>() <= 227 * 1024,
              "core/fm_kernel_traits.h must match the sm80 kernel's launch bounds "
              "(2 CTAs of its shared memory fit an sm_90 SM)");

namespace fmk {

fm_status launch_sm80(const pass_launch &l, fm_err *err) {
  const fm_attn_problem *p = l.p;
  fwd_params fp;
  static_cast<fmd::attn_base &>(fp) = l.base;
  fp.q = (const __nv_bfloat16 *)p->q;
  fp.k = (const __nv_bfloat16 *)p->k;
  fp.v = (const __nv_bfloat16 *)p->v;
  fp.o = (__nv_bfloat16 *)p->o;
  fp.lse = p->lse;
  cudaError_t e = p->head_dim == 128 ? launch_fwd<128>(fp, (int)l.variant, l.instrumented, l.stream)
                                     : launch_fwd<64>(fp, (int)l.variant, l.instrumented, l.stream);
  if (e != cudaSuccess) return cuda_fail(err, e, "sm80 forward kernel launch");
  return FM_OK;
}

}  // namespace fmk
