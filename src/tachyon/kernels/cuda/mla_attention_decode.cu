// MLA decode over the paged latent cache: one query token per sequence, split-KV flash-decoding.
// Test: tests/gpu/test_mla_kernels.cpp (build/tests/gpu_mla_kernels).
//
// Decode is a stream over latent rows (1152 bytes per token at DeepSeek's 512 + 64), so the one
// rule is that a row is read from HBM once per (sequence, KV split) for every head: a CTA takes
// all the heads of a sequence as the M rows of its tensor-core tiles (16 heads, or 32 per CTA
// from 32 heads up, where 128 heads take 4 CTAs that run side by side and share the tile in
// L2) and walks its split's 64-key tiles (mla_attention_core.cuh). Splits as in
// attention_decode.cu: up to kMaxSplits contiguous pieces of >= kSplitTokens keys, the count
// host-known (max_context_len, batch, SM count); each sequence divides its own length over the
// splits it uses and the rest exit at once; a sequence that uses one split writes `out`
// directly, the others write f32 partials that merge_splits_kernel combines.
#include <algorithm>
#include <atomic>

#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_attention_core.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::kernels::cuda {
namespace {

using namespace mla_detail;

constexpr int kSplitTokens = 256;    // fewest keys worth a split of their own
constexpr int kMaxSplits = 64;       // bounds the grid and the workspace for any max_context_len
constexpr int kCtasPerSmTarget = 2;  // splits are added until the grid has this many CTAs per SM

// How one sequence's tiles are split: split z covers tiles [z * tiles_per_split, +tiles_per_split)
// of n_tiles, for z < n_active.
struct MlaDecodeSplit {
  int n_tiles = 0;
  int tiles_per_split = 1;
  int n_active = 0;  // 0 for an empty sequence
};

__device__ __forceinline__ MlaDecodeSplit mla_decode_split(int ctx, int num_splits) {
  MlaDecodeSplit sp;
  if (ctx <= 0) return sp;
  sp.n_tiles = ceil_div(ctx, kBlockN);
  const int wanted = min(num_splits, ceil_div(ctx, kSplitTokens));
  sp.tiles_per_split = ceil_div(sp.n_tiles, wanted);
  sp.n_active = ceil_div(sp.n_tiles, sp.tiles_per_split);
  return sp;
}

// grid (ceil(num_heads / kRows), num_seqs, num_splits), kThreads threads, MlaTraits::kSmemBytes.
template <int kMTiles, int kVDim>
__global__ void __launch_bounds__(kThreads, 1) mla_decode_kernel(const MlaArgs a) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  constexpr int kRows = MlaTraits<kMTiles, kVDim>::kRows;
  const int head0 = blockIdx.x * kRows, seq = blockIdx.y, split = blockIdx.z;
  MlaJob job;
  job.seq = seq;
  job.row0 = seq * a.num_heads + head0;
  job.rows = min(kRows, a.num_heads - head0);
  job.ctx = a.context_lens[seq];
  if (job.ctx <= 0) {  // graph padding: zeros, written once
    if (split == 0) {
      const int rank = a.cache.kv_lora_rank;
      bf16* dst = a.out + static_cast<size_t>(job.row0) * rank;
      for (int i = threadIdx.x; i < job.rows * rank; i += kThreads) dst[i] = __float2bfloat16(0.0f);
    }
    return;
  }
  const MlaDecodeSplit sp = mla_decode_split(job.ctx, a.num_splits);
  if (split >= sp.n_active) return;
  job.tile_begin = split * sp.tiles_per_split;
  job.tile_end = min(sp.n_tiles, job.tile_begin + sp.tiles_per_split);
  job.split = split;
  job.partial = sp.n_active > 1;
  mla_attend<MlaMode::kDecode, kMTiles, kVDim>(a, job);
}

// Combines the splits of each (sequence, head): out = sum_z 2^(lse_z - max) o_z / sum_z 2^(lse_z - max).
// grid (num_heads, num_seqs), kv_lora_rank / 4 threads, each owning 4 columns. Sequences that
// used one split (or none) were written by the split kernel.
__global__ void __launch_bounds__(kMaxRank / 4) merge_splits_kernel(const MlaArgs a) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  const int head = blockIdx.x, seq = blockIdx.y;
  const MlaDecodeSplit sp = mla_decode_split(a.context_lens[seq], a.num_splits);
  if (sp.n_active <= 1) return;
  const int rank = a.cache.kv_lora_rank;
  const size_t head_row = static_cast<size_t>(seq) * a.num_heads + head;
  const float* lse = a.part_lse + head_row * a.num_splits;
  float mx = -INFINITY;
  for (int z = 0; z < sp.n_active; ++z) mx = fmaxf(mx, lse[z]);
  float sum = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const int d = threadIdx.x * 4;
  for (int z = 0; z < sp.n_active; ++z) {
    const float weight = fast_exp2(lse[z] - mx);
    const float4 part = *reinterpret_cast<const float4*>(a.part_out + (head_row * a.num_splits + z) * rank + d);
    sum += weight;
    acc.x += weight * part.x;
    acc.y += weight * part.y;
    acc.z += weight * part.z;
    acc.w += weight * part.w;
  }
  const float inv = 1.0f / sum;
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(a.out + head_row * rank + d);
  dst[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  dst[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

// Splits allowed by the longest context, before the occupancy rule.
int splits_for_length(int32_t max_context_len) {
  return std::clamp(ceil_div(std::max(max_context_len, 1), kSplitTokens), 1, kMaxSplits);
}

template <int kMTiles, int kVDim>
void launch_decode(const MlaArgs& a, cudaStream_t stream) {
  using T = MlaTraits<kMTiles, kVDim>;
  static std::atomic<uint64_t> smem_raised{0};
  raise_smem_limit_once(mla_decode_kernel<kMTiles, kVDim>, T::kSmemBytes, smem_raised);
  const dim3 grid(ceil_div(a.num_heads, T::kRows), a.num_seqs, a.num_splits);
  launch_pdl(mla_decode_kernel<kMTiles, kVDim>, grid, dim3(kThreads), T::kSmemBytes, stream, a);
  TACHYON_CUDA_CHECK_LAUNCH();
  if (a.num_splits > 1) {
    launch_pdl(merge_splits_kernel, dim3(a.num_heads, a.num_seqs), dim3(a.cache.kv_lora_rank / 4), 0, stream, a);
    TACHYON_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

size_t mla_decode_workspace_bytes(int32_t max_seqs, int32_t num_heads, int32_t kv_lora_rank, int32_t max_context_len) {
  const int splits = splits_for_length(max_context_len);
  if (splits <= 1) return 0;
  return static_cast<size_t>(max_seqs) * num_heads * splits * (kv_lora_rank + 1) * sizeof(float);
}

void mla_decode_attention(bf16* out, const bf16* q, const PagedLatentView& cache, const int32_t* context_lens,
                          int32_t num_seqs, int32_t max_context_len, const MlaAttentionParams& params,
                          void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  TACHYON_CHECK(num_seqs >= 0 && max_context_len >= 0)
      << "mla_decode_attention: num_seqs " << num_seqs << " and max_context_len " << max_context_len
      << " must be >= 0";
  if (num_seqs == 0) return;
  check_mla_shapes(cache, params, "mla_decode_attention");
  TACHYON_CHECK(out != nullptr && q != nullptr && cache.cache != nullptr && cache.block_tables != nullptr &&
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
  const int m_tiles = params.num_heads >= 32 ? 2 : 1;
  const int ctas_per_split = ceil_div(params.num_heads, 16 * m_tiles) * num_seqs;
  const int by_occupancy = ceil_div(kCtasPerSmTarget * tachyon::cuda::multiprocessor_count(), ctas_per_split);
  a.num_splits = std::max(1, std::min(splits_for_length(max_context_len), by_occupancy));
  if (a.num_splits > 1) {
    const size_t part_rows = static_cast<size_t>(num_seqs) * params.num_heads * a.num_splits;
    const size_t needed = part_rows * (cache.kv_lora_rank + 1) * sizeof(float);
    TACHYON_CHECK(workspace != nullptr && workspace_bytes >= needed)
        << "mla_decode_attention: workspace of " << workspace_bytes << " bytes, " << needed
        << " needed (size it with mla_decode_workspace_bytes for this num_seqs and max_context_len)";
    a.part_out = static_cast<float*>(workspace);
    a.part_lse = a.part_out + part_rows * cache.kv_lora_rank;
  }
  const bool wide = vdim_for_rank(cache.kv_lora_rank) == 512;
  if (m_tiles == 1) {
    wide ? launch_decode<1, 512>(a, stream) : launch_decode<1, 64>(a, stream);
  } else {
    wide ? launch_decode<2, 512>(a, stream) : launch_decode<2, 64>(a, stream);
  }
}

}  // namespace tachyon::kernels::cuda
