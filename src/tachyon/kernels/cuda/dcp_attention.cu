// DCP's kernels around latent attention (dcp_attention.h). All are small: a step's slots, a
// [rows, width] merge that reads each partial once, and per token a merge of sources x topk
// candidates by counting (every candidate's rank in the total order is the number that come
// before it, so no sort and no data-dependent control flow between threads).
#include "tachyon/kernels/cuda/dcp_attention.h"

#include <atomic>
#include <cmath>

#include "tachyon/base/check.h"
#include "tachyon/kernels/cuda/attention_common.cuh"

namespace tachyon::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSources = 64;  // ranks of a DCP group whose partials one merge weighs
// Shared memory a top-k merge may take (as dsa_topk.cu's stages): a fixed cap, so no launch asks
// the driver; 16,384 candidates, a group of 8 ranks at DeepSeek's top-2048.
constexpr size_t kMaxMergeTopkSmem = 192 * 1024;

__global__ void local_slots_kernel(int32_t* local, const int32_t* slots, int64_t n, DcpLayout dcp, int32_t block_size) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= n) return;
  const int32_t slot = slots[t];
  local[t] = slot >= 0 && dcp.owns(slot % block_size) ? static_cast<int32_t>(dcp.local_slot(slot, block_size)) : -1;
}

// grid (rows), kThreads: the row's weights once, in shared memory, then every column.
__global__ void merge_partials_kernel(bf16* out, const bf16* partial_out, const float* partial_lse, int32_t sources,
                                      int64_t rows, int32_t width) {
  __shared__ float s_weight[kMaxSources];
  const int64_t row = blockIdx.x;
  if (threadIdx.x == 0) {
    float max_lse = -INFINITY;
    for (int r = 0; r < sources; ++r) max_lse = fmaxf(max_lse, partial_lse[r * rows + row]);
    float total = 0.0f;
    for (int r = 0; r < sources; ++r) {
      const float lse = partial_lse[r * rows + row];
      s_weight[r] = lse == -INFINITY ? 0.0f : expf(lse - max_lse);
      total += s_weight[r];
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;  // no source attended: zeros
    for (int r = 0; r < sources; ++r) s_weight[r] *= inv;
  }
  __syncthreads();
  for (int d = 2 * threadIdx.x; d < width; d += 2 * kThreads) {
    float x = 0.0f, y = 0.0f;
    for (int r = 0; r < sources; ++r) {
      const float w = s_weight[r];
      if (w == 0.0f) continue;
      const float2 p = __bfloat1622float2(
          *reinterpret_cast<const __nv_bfloat162*>(partial_out + (r * rows + row) * width + d));
      x = fmaf(w, p.x, x);
      y = fmaf(w, p.y, y);
    }
    *reinterpret_cast<__nv_bfloat162*>(out + row * width + d) = __floats2bfloat162_rn(x, y);
  }
}

__global__ void topk_candidates_kernel(DcpCandidate* out, const int32_t* kept, const float* scores,
                                       int64_t scores_stride, int64_t n, int32_t topk, DcpLayout dcp) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  const int64_t t = i / topk;
  const int32_t local = kept[i];
  out[i] = local < 0 ? DcpCandidate{0.0f, -1}
                     : DcpCandidate{scores[t * scores_stride + local], static_cast<int32_t>(dcp.global_position(local))};
}

// model::candidate_before: higher score first, then the earlier position.
__device__ __forceinline__ bool before(const DcpCandidate& a, const DcpCandidate& b) {
  return a.score > b.score || (a.score == b.score && a.position < b.position);
}

// grid (num_tokens), kThreads, sources * topk * (8 + 4) bytes of shared memory.
__global__ void merge_topk_kernel(int32_t* kept, const DcpCandidate* gathered, int32_t sources, int32_t num_tokens,
                                  int32_t topk) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int t = blockIdx.x, m = sources * topk;
  DcpCandidate* s_c = reinterpret_cast<DcpCandidate*>(smem_raw);  // [m]
  int32_t* s_keep = reinterpret_cast<int32_t*>(s_c + m);           // [m] 1: among the kept
  __shared__ int s_valid;
  if (threadIdx.x == 0) s_valid = 0;
  __syncthreads();
  int valid = 0;
  for (int i = threadIdx.x; i < m; i += kThreads) {
    const int r = i / topk, j = i % topk;
    s_c[i] = gathered[(static_cast<int64_t>(r) * num_tokens + t) * topk + j];
    valid += s_c[i].position >= 0 ? 1 : 0;
  }
  atomicAdd(&s_valid, valid);
  __syncthreads();
  // A candidate is kept when fewer than topk valid candidates come before it.
  for (int i = threadIdx.x; i < m; i += kThreads) {
    const DcpCandidate c = s_c[i];
    int ahead = 0;
    if (c.position >= 0) {
      for (int k = 0; k < m && ahead < topk; ++k) ahead += s_c[k].position >= 0 && before(s_c[k], c) ? 1 : 0;
    }
    s_keep[i] = c.position >= 0 && ahead < topk ? 1 : 0;
  }
  __syncthreads();
  // Ascending positions: a kept candidate's slot is the number of kept ones at earlier positions.
  int32_t* row = kept + static_cast<int64_t>(t) * topk;
  for (int i = threadIdx.x; i < m; i += kThreads) {
    if (!s_keep[i]) continue;
    const int32_t position = s_c[i].position;
    int slot = 0;
    for (int k = 0; k < m; ++k) slot += s_keep[k] && s_c[k].position < position ? 1 : 0;
    row[slot] = position;
  }
  for (int i = min(topk, s_valid) + static_cast<int>(threadIdx.x); i < topk; i += kThreads) row[i] = -1;
}

size_t merge_topk_smem_bytes(int32_t sources, int32_t topk) {
  return static_cast<size_t>(sources) * topk * (sizeof(DcpCandidate) + sizeof(int32_t));
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void dcp_local_slots(int32_t* local, const int32_t* slots, int64_t num_tokens, DcpLayout dcp, int32_t block_size,
                     cudaStream_t stream) {
  TACHYON_CHECK(dcp.size >= 1 && dcp.rank >= 0 && dcp.rank < dcp.size && dcp.interleave >= 1 &&
                block_size % (dcp.size * dcp.interleave) == 0)
      << "dcp_local_slots: block size " << block_size << " is not a multiple of " << dcp.size << " ranks x interleave "
      << dcp.interleave << " (or rank " << dcp.rank << " is outside the group)";
  if (num_tokens == 0) return;
  local_slots_kernel<<<blocks_for(num_tokens), kThreads, 0, stream>>>(local, slots, num_tokens, dcp, block_size);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void dcp_merge_partials(bf16* out, const bf16* partial_out, const float* partial_lse, int32_t sources, int64_t rows,
                        int32_t width, cudaStream_t stream) {
  TACHYON_CHECK(sources >= 1 && sources <= kMaxSources && rows >= 0 && rows < (int64_t{1} << 31) && width >= 2 &&
                width % 2 == 0)
      << "dcp_merge_partials: " << sources << " sources of " << rows << " rows x " << width
      << " (1 to " << kMaxSources << " sources, width a positive multiple of 2)";
  if (rows == 0) return;
  merge_partials_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(out, partial_out, partial_lse, sources,
                                                                              rows, width);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void dcp_topk_candidates(DcpCandidate* out, const int32_t* kept, const float* scores, int64_t scores_stride,
                         int32_t num_tokens, int32_t topk, DcpLayout dcp, cudaStream_t stream) {
  TACHYON_CHECK(num_tokens >= 0 && topk >= 1) << "dcp_topk_candidates: " << num_tokens << " tokens, topk " << topk;
  const int64_t n = static_cast<int64_t>(num_tokens) * topk;
  if (n == 0) return;
  topk_candidates_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, kept, scores, scores_stride, n, topk, dcp);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void dcp_merge_topk(int32_t* kept, const DcpCandidate* gathered, int32_t sources, int32_t num_tokens, int32_t topk,
                    cudaStream_t stream) {
  static_assert(sizeof(DcpCandidate) == 8, "candidates travel as 8 bytes each");
  const size_t smem = merge_topk_smem_bytes(sources, topk);
  TACHYON_CHECK(sources >= 1 && topk >= 1 && num_tokens >= 0 && smem <= kMaxMergeTopkSmem)
      << "dcp_merge_topk: " << sources << " sources x topk " << topk << " candidates need " << smem
      << " bytes of shared memory, more than the " << kMaxMergeTopkSmem << " a merge may take";
  if (num_tokens == 0) return;
  static std::atomic<uint64_t> smem_raised{0};
  attention_detail::raise_smem_limit_once(merge_topk_kernel, kMaxMergeTopkSmem, smem_raised);
  merge_topk_kernel<<<static_cast<unsigned>(num_tokens), kThreads, smem, stream>>>(kept, gathered, sources, num_tokens,
                                                                                 topk);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
