// MLA decode over the paged latent cache: one query token per sequence, split-KV flash-decoding.
// Test: tests/gpu/test_mla_kernels.cpp (build/tests/gpu_mla_kernels).
//
// Decode is a stream over latent rows (1152 bytes per token at DeepSeek's 512 + 64), so the one
// rule is that a row is read from HBM once per (sequence, KV split) for every head: a CTA takes
// all the heads of a sequence as the M rows of its tensor-core tiles (16 heads, or 32 per CTA
// from 32 heads up, where 128 heads take 4 CTAs that run side by side and share the tile in
// L2) and walks its split's 64-key tiles (mla_attention_core.cuh) with 8 warps at rank 512.
// Splits (mla_attention_splits.cuh, shared with sparse attention): up to 64 contiguous pieces
// of >= one tile, their count chosen on the host from max_context_len, the batch and the SM
// count by a small wave cost model, so batch 1 spreads over up to 64 SMs and a batch that
// already fills the SMs is not split into a ragged extra wave. Each sequence divides its own
// length over the splits it uses and the rest exit at once; a sequence that uses one split
// writes `out` directly, the others write f32 partials that merge_splits_kernel combines.
#include <atomic>

#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_attention_core.cuh"
#include "tachyon/kernels/cuda/mla_attention_splits.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::kernels::cuda {
namespace {

using namespace mla_detail;

// Warps of a decode CTA: 8 at rank 512 (64 output columns and one n8 key tile each), 4 below
// (the 64-wide value would leave a warp fewer than 16 columns).
template <int kVDim>
constexpr int kDecodeWarps = kVDim == 512 ? 8 : 4;

// grid (ceil(num_heads / kRows), num_seqs, num_splits), MlaTraits::kThreads threads, MlaTraits::kSmemBytes.
template <int kMTiles, int kVDim, bool kFp8>
__global__ void __launch_bounds__(MlaTraits<kMTiles, kVDim, kDecodeWarps<kVDim>, kFp8>::kThreads, 1)
    mla_decode_kernel(const MlaArgs a) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  using T = MlaTraits<kMTiles, kVDim, kDecodeWarps<kVDim>, kFp8>;
  constexpr int kRows = T::kRows;
  const int head0 = blockIdx.x * kRows, seq = blockIdx.y, split = blockIdx.z;
  MlaJob job;
  job.seq = seq;
  job.row0 = seq * a.num_heads + head0;
  job.rows = min(kRows, a.num_heads - head0);
  job.ctx = local_keys(a.dcp, a.context_lens[seq]);
  if (job.ctx <= 0) {  // graph padding (or, under DCP, no token of the sequence here yet): zeros, written once
    if (split == 0) {
      const int rank = a.cache.kv_lora_rank;
      bf16* dst = a.out + static_cast<size_t>(job.row0) * rank;
      for (int i = threadIdx.x; i < job.rows * rank; i += T::kThreads) dst[i] = __float2bfloat16(0.0f);
      if (a.lse != nullptr) {
        for (int i = threadIdx.x; i < job.rows; i += T::kThreads) a.lse[job.row0 + i] = -INFINITY;
      }
    }
    return;
  }
  const MlaSplit sp = mla_split(job.ctx, a.num_splits);
  if (split >= sp.n_active) return;
  assign_split(job, sp, split);
  mla_attend<MlaMode::kDecode, kMTiles, kVDim, kDecodeWarps<kVDim>, kFp8>(a, job);
}

template <int kMTiles, int kVDim, bool kFp8>
void launch_decode(const MlaArgs& a, cudaStream_t stream) {
  using T = MlaTraits<kMTiles, kVDim, kDecodeWarps<kVDim>, kFp8>;
  static std::atomic<uint64_t> smem_raised{0};
  raise_smem_limit_once(mla_decode_kernel<kMTiles, kVDim, kFp8>, T::kSmemBytes, smem_raised);
  const dim3 grid(ceil_div(a.num_heads, T::kRows), a.num_seqs, a.num_splits);
  launch_pdl(mla_decode_kernel<kMTiles, kVDim, kFp8>, grid, dim3(T::kThreads), T::kSmemBytes, stream, a);
  TACHYON_CUDA_CHECK_LAUNCH();
  launch_merge_splits<MlaMode::kDecode>(a, a.num_seqs, stream);
}

}  // namespace

size_t mla_decode_workspace_bytes(int32_t max_seqs, int32_t num_heads, int32_t kv_lora_rank, int32_t max_context_len) {
  return split_workspace_bytes(max_seqs, num_heads, kv_lora_rank, max_context_len);
}

void mla_decode_attention(bf16* out, const bf16* q, const PagedLatentView& cache, const int32_t* context_lens,
                          int32_t num_seqs, int32_t max_context_len, const MlaAttentionParams& params,
                          void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  TACHYON_CHECK(num_seqs >= 0 && max_context_len >= 0)
      << "mla_decode_attention: num_seqs " << num_seqs << " and max_context_len " << max_context_len
      << " must be >= 0";
  if (num_seqs == 0) return;
  check_mla_shapes(cache, params, "mla_decode_attention");
  TACHYON_CHECK(out != nullptr && q != nullptr && cache.block_tables != nullptr &&
                context_lens != nullptr)
      << "mla_decode_attention: out, q, cache, block_tables and context_lens must all be set";
  MlaArgs a{};
  a.out = out;
  a.q = q;
  a.cache = cache;
  a.context_lens = context_lens;
  a.num_seqs = num_seqs;
  a.num_heads = params.num_heads;
  a.scale_log2 = params.scale * kLog2e;
  a.dcp = params.dcp;
  a.lse = params.lse;
  a.num_splits = best_splits(params.num_heads, num_seqs, max_context_len, tachyon::cuda::multiprocessor_count());
  bind_split_workspace(a, num_seqs, workspace, workspace_bytes, "mla_decode_attention",
                       "mla_decode_workspace_bytes for this num_seqs and max_context_len");
  const bool wide = vdim_for_rank(cache.kv_lora_rank) == 512;
  dispatch_mla<1, 2>(mla_m_tiles(params.num_heads), wide, cache.fp8(), [&]<int kM, int kV, bool kF8>() {
    launch_decode<kM, kV, kF8>(a, stream);
  });
}

}  // namespace tachyon::kernels::cuda
