// Prefill of DeepSeek's latent attention in the expanded form, on the GPU: the prompt's keys and
// values decompressed per head (kv_b_proj's W_uk and W_uv rows times each cached c_kv), then the
// dense causal prefill kernel (kernels/cuda/attention.h) over them.
// Why: the absorbed form (mla_attention.h) attends 576-wide keys and 512-wide values in every
// head, 1,088 multiply-adds per (query, key, head); decompressed, a head's key is nope + rope wide
// (DeepSeek: 192) and its value v wide (128): 320, or 384 with V padded as below, 2.8x fewer
// FLOPs (the latent prefill ran at 136 TFLOP/s, 14.5 of V2-Lite's 43.6 ms 2K prefill on an H100),
// the form peers prefill in. Decode keeps the absorbed form: one query reads each latent row once
// for all heads.
// The dense kernel takes one head width E for Q, K and V, so every row is padded to E with zeros
// (mla_expanded_head_dim: 192 at DeepSeek's widths): Q [q_nope | rope(q_pe) | 0], K [k_nope | k_pe
// | 0], V [v | 0]; the scores are those of the absorbed form (q_nope . (W_uk c_kv) + q_pe . k_pe)
// and the output's first v columns its values. The rows of each sequence's context are copied from
// the paged latent cache into scratch blocks of kMlaExpandedBlock rows, in sequence order, with a
// block table per sequence, so earlier chunks and prefix-cached blocks take part as in the
// absorbed kernel.
// CPU twin: kernels/mla_attention.h paged_mla_attention (the same attention, absorbed); test:
// tests/gpu/test_mla_kernels.cpp MlaExpandedPrefill (the whole expanded path against the CPU on
// the same inputs).
#pragma once

#include <algorithm>
#include <cstdint>

#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

inline constexpr int32_t kMlaExpandedBlock = 64;  // rows per scratch block

// The padded head width E of Q, K, V and the output: the dense prefill kernel's narrowest width
// (kPrefillHeadDims) that holds nope + rope and v (DeepSeek's 128 + 64 and 128: 192); 0 where
// they do not fit 256 or are not multiples of 8.
inline int32_t mla_expanded_head_dim(int32_t nope, int32_t rope, int32_t v) {
  if (nope % 8 != 0 || rope % 8 != 0 || v % 8 != 0) return 0;
  const int32_t widest = std::max(nope + rope, v);
  for (int32_t width : kPrefillHeadDims) {
    if (widest <= width) return width;
  }
  return 0;
}

// Scratch rows the context of `num_seqs` sequences holding `context_tokens` tokens in all can need
// (each sequence rounded up to whole scratch blocks).
inline int64_t mla_expanded_rows_bound(int64_t context_tokens, int64_t num_seqs) {
  return context_tokens + num_seqs * (kMlaExpandedBlock - 1);
}

// Scratch table entries per sequence for contexts of up to `max_context_len` tokens.
inline int32_t mla_expanded_table_stride(int32_t max_context_len) {
  return (max_context_len + kMlaExpandedBlock - 1) / kMlaExpandedBlock;
}

// Copies the context rows of sequences 0 .. num_seqs - 1 of `cache` (its block_tables and
// context_lens already offset to the first of them; an FP8 cache's c_kv as code x factor rounded
// to bf16, as the absorbed kernels expand it) into `rows` [max_rows, rank + rope], sequence s
// from row base_s = the sum of the earlier sequences' contexts, each rounded up to
// kMlaExpandedBlock; rows past a context and past the last sequence are zeros. Writes
// scratch_tables[s * scratch_stride + i] = base_s / kMlaExpandedBlock + i for each of s's blocks,
// and for every row r < max_rows its head slices of k and v past the GEMMs' columns:
//   k[r, h, nope : nope + rope] = rows[r, rank:] (k_pe, shared by the heads), k[r, h, nope + rope :] = 0
//   v[r, h, v_dim :] = 0
// k, v: [max_rows, heads, head_dim] bf16 (head_dim: mla_expanded_head_dim's E). max_rows >=
// mla_expanded_rows_bound(the contexts' sum, num_seqs) and a multiple of kMlaExpandedBlock;
// scratch_stride >= the blocks of the longest context (the device clamps nothing).
void mla_expanded_gather(bf16* rows, bf16* k, bf16* v, int32_t* scratch_tables, int32_t scratch_stride,
                         const PagedLatentView& cache, const int32_t* context_lens, int32_t num_seqs,
                         int32_t max_rows, int32_t heads, int32_t nope, int32_t v_dim, int32_t head_dim,
                         cudaStream_t stream);

// q_expanded[t, h] = [q[t, h, :nope] | q_absorbed[t, h, rank : rank + rope] | 0] for t in
// [first_row, num_rows): q is q_b_proj's output [T, heads, nope + rope], q_absorbed the absorbed
// query whose rope part mla_rope_queries wrote (the roped q_pe). q_expanded: [T, heads, head_dim].
void mla_expanded_queries(bf16* q_expanded, const bf16* q, const bf16* q_absorbed, int32_t first_row, int32_t num_rows,
                          int32_t heads, int32_t nope, int32_t rope, int32_t rank, int32_t head_dim,
                          cudaStream_t stream);

// attn[t, h * v_dim + d] = out[t, h, d] for t in [first_row, num_rows), d < v_dim: the attention
// output [T, heads, head_dim] into o_proj's input [T, heads * v_dim].
void mla_expanded_output(bf16* attn, const bf16* out, int32_t first_row, int32_t num_rows, int32_t heads,
                         int32_t v_dim, int32_t head_dim, cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
