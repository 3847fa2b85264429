// Attention over the paged KV cache on the GPU: a decode kernel (one query per sequence,
// split-KV flash-decoding, GQA-aware so each K/V block is read once for all the query heads
// that share it) and a prefill kernel (ragged batches of query rows per sequence, causal,
// flash-attention style, reading earlier chunks and prefix-cached blocks from the cache).
// CPU twin: kernels/attention.h `paged_attention`, which both must match.
//
// Contract shared by both: the step's K/V rows are already in the cache (rope_store_kv ran);
// every size that shapes the grid is host-known and passed in, so nothing reads device memory
// back and a CUDA graph captured with a bound stays valid for any plan within it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// The head widths the prefill kernel is built for (paged_prefill_attention), narrowest first; 192
// serves latent attention's expanded form (mla_expand.h).
inline constexpr int32_t kPrefillHeadDims[] = {64, 128, 192, 256};
inline bool prefill_head_dim_supported(int32_t head_dim) {
  for (int32_t width : kPrefillHeadDims) {
    if (width == head_dim) return true;
  }
  return false;
}

struct PagedKvView {
  const bf16* k_cache = nullptr;     // [num_blocks, block_size, num_kv_heads, head_dim] bf16
  const bf16* v_cache = nullptr;     // same layout
  const int32_t* block_tables = nullptr;  // [num_seqs, block_table_stride] int32 block ids
  int32_t block_table_stride = 0;    // entries per row (>= blocks of the longest sequence)
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;              // 64, 128 or 256 (prefill also 192: latent attention expanded)
  // An FP8 cache (--kv-cache-dtype fp8) when fp8.k is set: k_cache and v_cache are then unused,
  // fp8.k and fp8.v hold E4M3 codes in their layout and fp8.k_scale / fp8.v_scale one f32 factor
  // per (slot, kv head) ([num_blocks * block_size, num_kv_heads]); a key's value is code * factor.
  // Prefill rounds it to bf16 as the tile is loaded; decode runs the codes through the tensor
  // cores in f16 (exact) and applies the factors to S and P (attention_decode_fp8.cuh).
  struct Fp8 {
    const uint8_t* k = nullptr;
    const uint8_t* v = nullptr;
    const float* k_scale = nullptr;
    const float* v_scale = nullptr;
  } fp8;
};

struct AttentionParams {
  int32_t num_heads = 0;     // query heads; a multiple of num_kv_heads
  float scale = 1.0f;        // usually 1 / sqrt(head_dim)
  int32_t sliding_window = 0;  // 0: full causal; else the query at p sees keys in (p - window, p]
};

// --- decode: one query token per sequence, at position context_lens[s] - 1 ---
// Scratch bytes the decode kernel needs for up to `max_seqs` sequences of up to
// `max_context_len` tokens (partial results of the KV splits): f32 [seqs, heads, splits,
// head_dim + 1] with at most 64 splits of >= 256 keys; 0 when max_context_len <= 256 (one split,
// nothing to merge, the workspace may then be null).
size_t paged_decode_workspace_bytes(int32_t max_seqs, int32_t num_heads, int32_t head_dim, int32_t max_context_len);

// out, q: [num_seqs, num_heads, head_dim] bf16; context_lens: [num_seqs] int32, tokens in the
// cache for each sequence including this step's. max_context_len >= every context_lens[s]
// (host-known; it fixes the number of KV splits, so a graph captured with the model's maximum
// replays for any shorter one). A sequence with context_lens[s] == 0 (graph padding) writes
// zeros. workspace: paged_decode_workspace_bytes(num_seqs, ...) bytes or more.
// Any block_size works (the kernels gather key by key); head_dim 64, 128 or 256.
void paged_decode_attention(bf16* out, const bf16* q, const PagedKvView& kv, const int32_t* context_lens,
                            int32_t num_seqs, int32_t max_context_len, const AttentionParams& params,
                            void* workspace, size_t workspace_bytes, cudaStream_t stream);

// --- prefill / mixed: any number of query tokens per sequence ---
// out, q: [num_query_tokens, num_heads, head_dim] bf16, sequences' rows contiguous in order.
// query_starts: [num_seqs + 1] int32 prefix offsets of each sequence's rows in q.
// context_lens: [num_seqs] int32, tokens in the cache for the sequence including this step's;
// its query row i sits at position context_lens[s] - (query_starts[s+1] - query_starts[s]) + i.
// max_query_len >= every sequence's row count (host-known; shapes the grid). head_dim 64, 128,
// 192 (the expanded form of latent attention, mla_expand.h) or 256.
void paged_prefill_attention(bf16* out, const bf16* q, const PagedKvView& kv, const int32_t* query_starts,
                             const int32_t* context_lens, int32_t num_seqs, int32_t num_query_tokens,
                             int32_t max_query_len, const AttentionParams& params, cudaStream_t stream);

// Throws unless an FP8 view has all four of its pointers, the codes 16-byte aligned (cp.async).
void check_fp8_kv_view(const PagedKvView& kv);

}  // namespace tachyon::kernels::cuda
