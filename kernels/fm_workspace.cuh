/* fm_workspace.cuh — where the attention kernels' scratch memory comes from.
 *
 * Every stream-ordered workspace of the attention passes (the tile bounds of
 * fm_attn.cu, the sm90 forward's work list, the sm90 backward's LSE/D and fp32
 * dQ accumulator) is taken from one CUDA memory pool per device that this
 * library owns, with an unlimited release threshold: memory freed back to the
 * pool (cudaFreeAsync) stays reserved across stream, event and device
 * synchronizations, so the next call does not map it again. CUDA's default
 * pool has a release threshold of 0 and returns its reservations to the driver
 * at every synchronization; a caller that synchronizes between calls (a
 * training step that reads its loss, a timing harness's idle pause) then paid
 * for mapping the backward's accumulator again on every call: 2 GiB at S 8K,
 * B 16, H 32, D 128, the likely cause of the backward's 2.4-3.9 ms burst
 * penalty on the H200 (bench/results/sm90-vs-peers-h200.md, "The backward's
 * burst figures"; not yet measured with this pool).
 * The price: the pool keeps as much as the largest call needed until
 * fm_attn_trim_workspace (kernels/fm_attn.h) gives it back. Another CUDA
 * runtime user (PyTorch's caching allocator) does not see this memory.
 *
 * fm_ws_alloc allocates on the current device on stream s; free with
 * cudaFreeAsync(p, s). Defined in fm_attn.cu. */
#ifndef FM_WORKSPACE_CUH
#define FM_WORKSPACE_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>

cudaError_t fm_ws_alloc(void **p, size_t bytes, cudaStream_t s);

#endif
