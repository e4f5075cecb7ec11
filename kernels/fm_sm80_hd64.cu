/* Head dim 64 instantiations of the forward kernel (tile 128 x 64). */
#include "fm_sm80_launch.cuh"

namespace fmk {
template <> cudaError_t launch_fwd<64>(const fwd_params &p, int variant, bool instr, cudaStream_t s) {
  return launch_dispatch<64>(p, variant, instr, s);
}
}  // namespace fmk
