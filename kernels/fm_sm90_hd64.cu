/* Head dim 64 instantiations of the sm90 forward kernel (tile 192 x 128: three consumer warpgroups). */
#include "fm_sm90_launch.cuh"

namespace fm90 {
template <>
cudaError_t launch<64>(const params &p, int variant, bool instr, int mode, int mask, int grid,
                        cudaStream_t s) {
  return launch_dispatch<64>(p, variant, instr, mode, mask, grid, s);
}
}  // namespace fm90
