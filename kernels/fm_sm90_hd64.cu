/* Head dim 64 instantiations of the sm90 forward kernel (tile 192 x 128: three consumer warpgroups). */
#include "fm_sm90_launch.cuh"

namespace fm90 {
template <>
cudaError_t launch<64>(const params &p, int variant, bool instr, int mode, int mask, int grid,
                        cudaStream_t s) {
  return launch_dispatch<64>(p, variant, instr, mode, mask, grid, s);
}
template <>
cudaError_t launch_words<64>(const fmd::attn_base &d, int32_t nsets, uint32_t *words, cudaStream_t s) {
  return launch_words_dispatch<64>(d, nsets, words, s);
}
}  // namespace fm90
