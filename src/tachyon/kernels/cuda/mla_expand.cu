// The expanded form's data movement (mla_expand.h): one warp per scratch row (gather), per
// (token, head) of the queries, and per (token, head) of the output; lanes move 16-byte vectors.
// The gather's warp finds its row's sequence by walking the sequences' rounded contexts (a
// prefill step has few sequences; each lane reads the same context_lens, served by L1), so no
// offsets are staged on the host and the launch needs only the bound of rows.
#include "tachyon/kernels/cuda/mla_expand.h"

#include <cstdint>

#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"

namespace tachyon::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ uint4 zero_vec() { return make_uint4(0, 0, 0, 0); }

__global__ void expanded_gather_kernel(bf16* rows, bf16* k, bf16* v, int32_t* scratch_tables, int32_t scratch_stride,
                                       PagedLatentView cache, const int32_t* context_lens, int32_t num_seqs,
                                       int32_t max_rows, int32_t heads, int32_t nope, int32_t v_dim, int32_t E) {
  const int lane = threadIdx.x % 32;
  const int32_t r = static_cast<int32_t>(blockIdx.x) * kWarpsPerBlock + static_cast<int32_t>(threadIdx.x / 32);
  if (r >= max_rows) return;
  // The sequence whose scratch blocks hold row r, and the row's token index in it.
  int32_t slot = -1, base = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t context = context_lens[s];
    const int32_t rounded = (context + kMlaExpandedBlock - 1) / kMlaExpandedBlock * kMlaExpandedBlock;
    if (r < base + rounded) {
      const int32_t i = r - base;
      if (i < context) {
        const int32_t block = cache.block_tables[static_cast<size_t>(s) * cache.block_table_stride + i / cache.block_size];
        slot = block * cache.block_size + i % cache.block_size;
      }
      if (i % kMlaExpandedBlock == 0 && lane == 0) {
        scratch_tables[static_cast<size_t>(s) * scratch_stride + i / kMlaExpandedBlock] = r / kMlaExpandedBlock;
      }
      break;
    }
    base += rounded;
  }
  const int rank = cache.kv_lora_rank, width = rank + cache.rope_dim, rank_vecs = rank / kBf16PerVec;
  uint4* dst = reinterpret_cast<uint4*>(rows + static_cast<size_t>(r) * width);
  // The row's k_pe (bf16 in both caches), and its c_kv: copied, or the FP8 codes times their
  // group's factor rounded to bf16 (as the absorbed kernels expand an FP8 tile).
  const uint4* k_pe = nullptr;
  if (slot < 0) {
    for (int c = lane; c < width / kBf16PerVec; c += 32) dst[c] = zero_vec();
  } else if (cache.codes != nullptr) {  // the FP8 cache (PagedLatentView::fp8, a host function)
    const uint2* codes = reinterpret_cast<const uint2*>(cache.codes + static_cast<size_t>(slot) * rank);
    const float* factors = cache.scales + static_cast<size_t>(slot) * fp8_latent_scale_stride(rank);
    k_pe = reinterpret_cast<const uint4*>(cache.rope + static_cast<size_t>(slot) * cache.rope_dim);
    for (int c = lane; c < width / kBf16PerVec; c += 32) {
      dst[c] = c < rank_vecs ? fp8x8_to_bf16x8(codes[c], factors[c * kBf16PerVec / kFp8LatentGroup]) : k_pe[c - rank_vecs];
    }
  } else {
    const uint4* src = reinterpret_cast<const uint4*>(cache.cache + static_cast<size_t>(slot) * width);
    for (int c = lane; c < width / kBf16PerVec; c += 32) dst[c] = src[c];
    k_pe = src + rank_vecs;
  }
  // Each head's k_pe and zero padding of K, and the zero padding of V.
  const int rope_vecs = cache.rope_dim / kBf16PerVec, k_tail = (E - nope) / kBf16PerVec;
  const int v_tail = (E - v_dim) / kBf16PerVec;
  const size_t head_row = static_cast<size_t>(r) * heads * E;
  for (int item = lane; item < heads * k_tail; item += 32) {
    const int h = item / k_tail, c = item % k_tail;
    uint4* out = reinterpret_cast<uint4*>(k + head_row + static_cast<size_t>(h) * E + nope);
    out[c] = c < rope_vecs && k_pe != nullptr ? k_pe[c] : zero_vec();
  }
  for (int item = lane; item < heads * v_tail; item += 32) {
    const int h = item / v_tail, c = item % v_tail;
    reinterpret_cast<uint4*>(v + head_row + static_cast<size_t>(h) * E + v_dim)[c] = zero_vec();
  }
}

__global__ void expanded_queries_kernel(bf16* q_expanded, const bf16* q, const bf16* q_absorbed, int32_t first_row,
                                        int32_t num_rows, int32_t heads, int32_t nope, int32_t rope, int32_t rank,
                                        int32_t E) {
  const int lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;  // (row, head)
  const int64_t t = first_row + item / heads, h = item % heads;
  if (t >= num_rows) return;
  const int nope_vecs = nope / kBf16PerVec, rope_vecs = rope / kBf16PerVec;
  const uint4* q_nope = reinterpret_cast<const uint4*>(q + (t * heads + h) * (nope + rope));
  const uint4* q_pe = reinterpret_cast<const uint4*>(q_absorbed + (t * heads + h) * (rank + rope) + rank);
  uint4* out = reinterpret_cast<uint4*>(q_expanded + (t * heads + h) * E);
  for (int c = lane; c < E / kBf16PerVec; c += 32) {
    out[c] = c < nope_vecs ? q_nope[c] : c < nope_vecs + rope_vecs ? q_pe[c - nope_vecs] : zero_vec();
  }
}

__global__ void expanded_output_kernel(bf16* attn, const bf16* out, int32_t first_row, int32_t num_rows, int32_t heads,
                                       int32_t v_dim, int32_t E) {
  const int lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int64_t t = first_row + item / heads, h = item % heads;
  if (t >= num_rows) return;
  const uint4* src = reinterpret_cast<const uint4*>(out + (t * heads + h) * E);
  uint4* dst = reinterpret_cast<uint4*>(attn + (t * heads + h) * v_dim);
  for (int c = lane; c < v_dim / kBf16PerVec; c += 32) dst[c] = src[c];
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned warp_blocks(int64_t items) { return static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void mla_expanded_gather(bf16* rows, bf16* k, bf16* v, int32_t* scratch_tables, int32_t scratch_stride,
                         const PagedLatentView& cache, const int32_t* context_lens, int32_t num_seqs,
                         int32_t max_rows, int32_t heads, int32_t nope, int32_t v_dim, int32_t head_dim,
                         cudaStream_t stream) {
  if (cache.fp8()) {
    TACHYON_CHECK(cache.cache == nullptr && cache.scales != nullptr && cache.rope != nullptr &&
                  cache.kv_lora_rank % 16 == 0 && aligned16(cache.codes) && aligned16(cache.rope))
        << "mla_expanded_gather: an FP8 latent cache takes codes, factors and k_pe planes (16-byte aligned) and a "
           "rank that is a multiple of 16, got rank "
        << cache.kv_lora_rank;
  } else {
    TACHYON_CHECK(cache.cache != nullptr && aligned16(cache.cache))
        << "mla_expanded_gather: a bf16 latent cache must be given, 16-byte aligned";
  }
  TACHYON_CHECK(cache.kv_lora_rank % kBf16PerVec == 0 && head_dim >= 8 &&
                head_dim == mla_expanded_head_dim(nope, cache.rope_dim, v_dim))
      << "mla_expanded_gather: rank " << cache.kv_lora_rank << ", rope " << cache.rope_dim << ", nope " << nope << ", v "
      << v_dim << ", head_dim " << head_dim << " (multiples of 8; head_dim mla_expanded_head_dim's)";
  TACHYON_CHECK(max_rows >= 0 && max_rows % kMlaExpandedBlock == 0 && num_seqs >= 0 && heads >= 1 && scratch_stride >= 1)
      << "mla_expanded_gather: max_rows " << max_rows << " (a multiple of " << kMlaExpandedBlock << "), num_seqs "
      << num_seqs << ", heads " << heads << ", scratch_stride " << scratch_stride;
  TACHYON_CHECK(aligned16(rows) && aligned16(k) && aligned16(v))
      << "mla_expanded_gather: rows, k and v must be 16-byte aligned";
  if (max_rows == 0) return;
  expanded_gather_kernel<<<warp_blocks(max_rows), kWarpsPerBlock * 32, 0, stream>>>(
      rows, k, v, scratch_tables, scratch_stride, cache, context_lens, num_seqs, max_rows, heads, nope, v_dim, head_dim);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void mla_expanded_queries(bf16* q_expanded, const bf16* q, const bf16* q_absorbed, int32_t first_row, int32_t num_rows,
                          int32_t heads, int32_t nope, int32_t rope, int32_t rank, int32_t head_dim,
                          cudaStream_t stream) {
  TACHYON_CHECK(nope % kBf16PerVec == 0 && rope % kBf16PerVec == 0 && rank % kBf16PerVec == 0 &&
                prefill_head_dim_supported(head_dim) && nope + rope <= head_dim && heads >= 1 && first_row >= 0)
      << "mla_expanded_queries: nope " << nope << ", rope " << rope << ", rank " << rank << ", head_dim " << head_dim
      << ", heads " << heads << ", first_row " << first_row;
  TACHYON_CHECK(aligned16(q_expanded) && aligned16(q) && aligned16(q_absorbed))
      << "mla_expanded_queries: buffers must be 16-byte aligned";
  if (num_rows <= first_row) return;
  const int64_t items = static_cast<int64_t>(num_rows - first_row) * heads;
  expanded_queries_kernel<<<warp_blocks(items), kWarpsPerBlock * 32, 0, stream>>>(q_expanded, q, q_absorbed, first_row,
                                                                                  num_rows, heads, nope, rope, rank,
                                                                                  head_dim);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void mla_expanded_output(bf16* attn, const bf16* out, int32_t first_row, int32_t num_rows, int32_t heads,
                         int32_t v_dim, int32_t head_dim, cudaStream_t stream) {
  TACHYON_CHECK(v_dim % kBf16PerVec == 0 && prefill_head_dim_supported(head_dim) && v_dim <= head_dim && heads >= 1 &&
                first_row >= 0)
      << "mla_expanded_output: v " << v_dim << ", head_dim " << head_dim << ", heads " << heads << ", first_row "
      << first_row;
  TACHYON_CHECK(aligned16(attn) && aligned16(out)) << "mla_expanded_output: buffers must be 16-byte aligned";
  if (num_rows <= first_row) return;
  const int64_t items = static_cast<int64_t>(num_rows - first_row) * heads;
  expanded_output_kernel<<<warp_blocks(items), kWarpsPerBlock * 32, 0, stream>>>(attn, out, first_row, num_rows, heads,
                                                                                 v_dim, head_dim);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
