// DeepSeek sparse attention (DSA) over the paged latent cache: each query row attends only the
// tokens its lightning indexer kept. Test: tests/gpu/test_mla_kernels.cpp.
//
// Every head of a query token attends the same kept list, so a CTA takes all the heads of one
// token (16 per CTA, or 32 from 32 heads up) and walks the list in tiles of 64 entries, gathering
// each listed token's latent row from its paged block (mla_attention_core.cuh); -1 entries load
// nothing and are masked, so a list padded with -1 (or a whole tile of them) costs no bytes.
// The kept list is at most index_topk (2048) long, so there are no KV splits: one CTA walks it.
#include <atomic>

#include "tachyon/kernels/cuda/mla_attention_core.cuh"
#include "tachyon/kernels/cuda/mla_attention.h"

namespace tachyon::kernels::cuda {
namespace {

using namespace mla_detail;

// grid (num_query_tokens, ceil(num_heads / kRows)), kThreads threads, MlaTraits::kSmemBytes.
template <int kMTiles, int kVDim>
__global__ void __launch_bounds__(kThreads, 1) sparse_mla_kernel(const MlaArgs a) {
  constexpr int kRows = MlaTraits<kMTiles, kVDim>::kRows;
  const int token = blockIdx.x, head0 = blockIdx.y * kRows;
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
  job.tile_begin = 0;
  job.tile_end = ceil_div(a.kept_width, kBlockN);
  mla_attend<MlaMode::kSparse, kMTiles, kVDim>(a, job);
}

template <int kMTiles, int kVDim>
void launch_sparse(const MlaArgs& a, int32_t num_query_tokens, cudaStream_t stream) {
  using T = MlaTraits<kMTiles, kVDim>;
  static std::atomic<uint64_t> smem_raised{0};
  raise_smem_limit_once(sparse_mla_kernel<kMTiles, kVDim>, T::kSmemBytes, smem_raised);
  const dim3 grid(num_query_tokens, ceil_div(a.num_heads, T::kRows));
  sparse_mla_kernel<kMTiles, kVDim><<<grid, kThreads, T::kSmemBytes, stream>>>(a);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void sparse_mla_attention(bf16* out, const bf16* q, const PagedLatentView& cache, const int32_t* kept,
                          int32_t kept_width, const int32_t* query_starts, int32_t num_seqs, int32_t num_query_tokens,
                          const MlaAttentionParams& params, cudaStream_t stream) {
  TACHYON_CHECK(num_seqs >= 0 && num_query_tokens >= 0)
      << "sparse_mla_attention: num_seqs " << num_seqs << " and num_query_tokens " << num_query_tokens
      << " must be >= 0";
  if (num_seqs == 0 || num_query_tokens == 0) return;
  check_mla_shapes(cache, params, "sparse_mla_attention");
  TACHYON_CHECK(kept_width >= 1) << "sparse_mla_attention: kept_width must be >= 1, not " << kept_width;
  TACHYON_CHECK(static_cast<int64_t>(num_query_tokens) * params.num_heads < (int64_t{1} << 31))
      << "sparse_mla_attention: " << num_query_tokens << " tokens x " << params.num_heads
      << " heads overflow the int32 row index; split the step";
  TACHYON_CHECK(out != nullptr && q != nullptr && cache.cache != nullptr && cache.block_tables != nullptr &&
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
  const bool wide = vdim_for_rank(cache.kv_lora_rank) == 512;
  if (params.num_heads < 32) {
    wide ? launch_sparse<1, 512>(a, num_query_tokens, stream) : launch_sparse<1, 64>(a, num_query_tokens, stream);
  } else {
    wide ? launch_sparse<2, 512>(a, num_query_tokens, stream) : launch_sparse<2, 64>(a, num_query_tokens, stream);
  }
}

}  // namespace tachyon::kernels::cuda
