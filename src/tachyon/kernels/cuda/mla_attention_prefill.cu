// MLA prefill (and mixed) attention over the paged latent cache: a ragged batch of query rows per
// sequence, causal. Test: tests/gpu/test_mla_kernels.cpp (build/tests/gpu_mla_kernels).
//
// All heads share the latent row, so a sequence's query rows and heads flatten into one M
// dimension (q is [tokens, heads, rank + rope], so row m = token * H + head is simply the m-th
// row of q): a CTA takes 32 consecutive flattened rows, i.e. 2 tokens x 16 heads, or a quarter
// of one token's 128 heads, and walks the 64-key tiles from position 0 to its last row's
// position, each row masked at its own position (mla_attention_core.cuh). The query rows of a
// sequence are the last n of its context, so one kernel serves whole prompts, chunked prefill
// and prompts behind prefix-cached blocks.
#include <algorithm>
#include <atomic>

#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_attention_core.cuh"

namespace tachyon::kernels::cuda {
namespace {

using namespace mla_detail;

constexpr int kPrefillMTiles = 2;  // 32 flattened rows per CTA: 128 f32 accumulators per thread at rank 512

// grid (ceil(max_query_len * num_heads / kRows), num_seqs), kThreads threads, MlaTraits::kSmemBytes.
template <int kVDim, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) mla_prefill_kernel(const MlaArgs a) {
  constexpr int kRows = MlaTraits<kPrefillMTiles, kVDim>::kRows;
  // The latest rows (most keys) of each sequence launch first.
  const int m_block = gridDim.x - 1 - blockIdx.x, seq = blockIdx.y;
  const int q_begin = a.query_starts[seq];
  const int n_rows = a.query_starts[seq + 1] - q_begin;
  const int flat_rows = n_rows * a.num_heads;
  MlaJob job;
  job.m0 = m_block * kRows;
  if (job.m0 >= flat_rows) return;
  job.seq = seq;
  job.rows = min(kRows, flat_rows - job.m0);
  job.row0 = q_begin * a.num_heads + job.m0;
  const int ctx = a.context_lens[seq];
  job.first_pos = ctx - n_rows;
  job.ctx = local_keys(a.dcp, ctx);
  const int pos_hi = job.first_pos + (job.m0 + job.rows - 1) / a.num_heads;
  job.tile_begin = 0;
  job.tile_end = ceil_div(local_keys(a.dcp, pos_hi + 1), kBlockN);  // 0 under DCP when no key is here yet
  mla_attend<MlaMode::kPrefill, kPrefillMTiles, kVDim, kWarps, kFp8>(a, job);
}

template <int kVDim, bool kFp8>
void launch_prefill(const MlaArgs& a, int32_t max_query_len, cudaStream_t stream) {
  using T = MlaTraits<kPrefillMTiles, kVDim, kWarps, kFp8>;
  static std::atomic<uint64_t> smem_raised{0};
  raise_smem_limit_once(mla_prefill_kernel<kVDim, kFp8>, T::kSmemBytes, smem_raised);
  const int64_t flat_rows = static_cast<int64_t>(max_query_len) * a.num_heads;
  const dim3 grid(static_cast<unsigned>((flat_rows + T::kRows - 1) / T::kRows), a.num_seqs);
  mla_prefill_kernel<kVDim, kFp8><<<grid, kThreads, T::kSmemBytes, stream>>>(a);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void mla_prefill_attention(bf16* out, const bf16* q, const PagedLatentView& cache, const int32_t* query_starts,
                           const int32_t* context_lens, int32_t num_seqs, int32_t num_query_tokens,
                           int32_t max_query_len, const MlaAttentionParams& params, cudaStream_t stream) {
  TACHYON_CHECK(num_seqs >= 0 && num_query_tokens >= 0 && max_query_len >= 0)
      << "mla_prefill_attention: num_seqs " << num_seqs << ", num_query_tokens " << num_query_tokens
      << " and max_query_len " << max_query_len << " must be >= 0";
  if (num_seqs == 0 || num_query_tokens == 0 || max_query_len == 0) return;
  check_mla_shapes(cache, params, "mla_prefill_attention");
  TACHYON_CHECK(static_cast<int64_t>(std::max(num_query_tokens, max_query_len)) * params.num_heads < (int64_t{1} << 31))
      << "mla_prefill_attention: " << std::max(num_query_tokens, max_query_len) << " tokens x " << params.num_heads
      << " heads overflow the int32 row index; split the step";
  TACHYON_CHECK(out != nullptr && q != nullptr && cache.block_tables != nullptr &&
                query_starts != nullptr && context_lens != nullptr)
      << "mla_prefill_attention: out, q, cache, block_tables, query_starts and context_lens must all be set";
  MlaArgs a{};
  a.out = out;
  a.q = q;
  a.cache = cache;
  a.context_lens = context_lens;
  a.query_starts = query_starts;
  a.num_seqs = num_seqs;
  a.num_heads = params.num_heads;
  a.scale_log2 = params.scale * kLog2e;
  a.dcp = params.dcp;
  a.lse = params.lse;
  const bool wide = vdim_for_rank(cache.kv_lora_rank) == 512;
  dispatch_mla<kPrefillMTiles, kPrefillMTiles>(kPrefillMTiles, wide, cache.fp8(), [&]<int kM, int kV, bool kF8>() {
    launch_prefill<kV, kF8>(a, max_query_len, stream);
  });
}

}  // namespace tachyon::kernels::cuda
