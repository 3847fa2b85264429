// DeepSeek sparse attention (DSA) over the paged latent cache: each query row attends only the
// tokens its lightning indexer kept. Test: tests/gpu/test_mla_kernels.cpp.
//
// Every head of a query token attends the same kept list, so a CTA takes all the heads of one
// token (16 per CTA, or 32 from 32 heads up) and walks the list in tiles of 64 entries, gathering
// each listed token's latent row from its paged block (mla_attention_core.cuh); -1 entries load
// nothing and are masked, so a list padded with -1 (or a whole tile of them) costs no bytes.
// The list is short (index_topk = 2048: 32 tiles) but a decode step has few tokens: at batch 1
// and 128 heads one CTA per head group would walk all 32 tiles on 4 of 132 SMs. So each token's
// tiles are split like dense decode's context (mla_attention_splits.cuh, the same cost model
// and merge): on an H200, batch 1 takes 32 one-tile splits, and a step whose tokens already
// fill the SMs (32 tokens of 128 heads, a long prefill chunk) takes one split and writes `out`
// directly, as before, with no workspace. A split whose entries are all -1 writes an empty
// partial (lse -inf) that the merge weighs 0.
#include <atomic>

#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_attention_core.cuh"
#include "tachyon/kernels/cuda/mla_attention_splits.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::kernels::cuda {
namespace {

using namespace mla_detail;

// grid (num_query_tokens, ceil(num_heads / kRows), num_splits), kThreads threads, MlaTraits::kSmemBytes.
template <int kMTiles, int kVDim, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) sparse_mla_kernel(const MlaArgs a) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  constexpr int kRows = MlaTraits<kMTiles, kVDim>::kRows;
  const int token = blockIdx.x, head0 = blockIdx.y * kRows, split = blockIdx.z;
  const MlaSplit sp = mla_split(a.kept_width, a.num_splits);
  if (split >= sp.n_active) return;
  // The sequence of `token`: the last s with query_starts[s] <= token (empty sequences skipped).
  int lo = 0, hi = a.num_seqs;  // query_starts[lo] <= token < query_starts[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (a.query_starts[mid] <= token) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  MlaJob job;
  job.seq = lo;
  job.row0 = token * a.num_heads + head0;
  job.rows = min(kRows, a.num_heads - head0);
  job.kept = a.kept + static_cast<size_t>(token) * a.kept_width;
  assign_split(job, sp, split);
  mla_attend<MlaMode::kSparse, kMTiles, kVDim, kWarps, kFp8>(a, job);
}

template <int kMTiles, int kVDim, bool kFp8>
void launch_sparse(const MlaArgs& a, int32_t num_query_tokens, cudaStream_t stream) {
  using T = MlaTraits<kMTiles, kVDim, kWarps, kFp8>;
  static std::atomic<uint64_t> smem_raised{0};
  raise_smem_limit_once(sparse_mla_kernel<kMTiles, kVDim, kFp8>, T::kSmemBytes, smem_raised);
  const dim3 grid(num_query_tokens, ceil_div(a.num_heads, T::kRows), a.num_splits);
  launch_pdl(sparse_mla_kernel<kMTiles, kVDim, kFp8>, grid, dim3(kThreads), T::kSmemBytes, stream, a);
  TACHYON_CUDA_CHECK_LAUNCH();
  launch_merge_splits<MlaMode::kSparse>(a, num_query_tokens, stream);
}

}  // namespace

size_t sparse_mla_workspace_bytes(int32_t max_query_tokens, int32_t num_heads, int32_t kv_lora_rank,
                                  int32_t kept_width) {
  return split_workspace_bytes(max_query_tokens, num_heads, kv_lora_rank, kept_width);
}

void sparse_mla_attention(bf16* out, const bf16* q, const PagedLatentView& cache, const int32_t* kept,
                          int32_t kept_width, const int32_t* query_starts, int32_t num_seqs, int32_t num_query_tokens,
                          const MlaAttentionParams& params, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream) {
  TACHYON_CHECK(num_seqs >= 0 && num_query_tokens >= 0)
      << "sparse_mla_attention: num_seqs " << num_seqs << " and num_query_tokens " << num_query_tokens
      << " must be >= 0";
  if (num_seqs == 0 || num_query_tokens == 0) return;
  check_mla_shapes(cache, params, "sparse_mla_attention");
  TACHYON_CHECK(kept_width >= 1) << "sparse_mla_attention: kept_width must be >= 1, not " << kept_width;
  TACHYON_CHECK(static_cast<int64_t>(num_query_tokens) * params.num_heads < (int64_t{1} << 31))
      << "sparse_mla_attention: " << num_query_tokens << " tokens x " << params.num_heads
      << " heads overflow the int32 row index; split the step";
  TACHYON_CHECK(out != nullptr && q != nullptr && cache.block_tables != nullptr &&
                kept != nullptr && query_starts != nullptr)
      << "sparse_mla_attention: out, q, cache, block_tables, kept and query_starts must all be set";
  MlaArgs a{};
  a.out = out;
  a.q = q;
  a.cache = cache;
  a.query_starts = query_starts;
  a.kept = kept;
  a.kept_width = kept_width;
  a.num_seqs = num_seqs;
  a.num_heads = params.num_heads;
  a.scale_log2 = params.scale * kLog2e;
  a.dcp = params.dcp;
  a.lse = params.lse;
  a.num_splits = best_splits(params.num_heads, num_query_tokens, kept_width, tachyon::cuda::multiprocessor_count());
  bind_split_workspace(a, num_query_tokens, workspace, workspace_bytes, "sparse_mla_attention",
                       "sparse_mla_workspace_bytes for this num_query_tokens and kept_width");
  const bool wide = vdim_for_rank(cache.kv_lora_rank) == 512;
  dispatch_mla<1, 2>(mla_m_tiles(params.num_heads), wide, cache.fp8(), [&]<int kM, int kV, bool kF8>() {
    launch_sparse<kM, kV, kF8>(a, num_query_tokens, stream);
  });
}

}  // namespace tachyon::kernels::cuda
