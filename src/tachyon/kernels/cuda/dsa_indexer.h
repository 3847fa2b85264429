// DeepSeek-V3.2's lightning indexer (DSA) on the GPU: the index-key store (LayerNorm + rope ->
// the paged index-key cache), the index-query rope, the scores I(t, s) of every query row
// against its sequence's cached keys, and the top-k selection of the kept positions.
// CPU twins: kernels/dsa_indexer.h (scores, selection) and model/dsa_indexer.cpp (LayerNorm and
// the rope on the leading dims, through kernels/rope.h apply_rope).
//
// How close to the CPU:
// - Key store / query rope: LayerNorm in f32 (two-pass mean and centred variance; the CPU
//   accumulates in double), then ((x - mean) * inv_std) * weight + bias, rope a*c - b*s and
//   b*c + a*s without FMA contraction, as the CPU's loops; cos/sin from accurate sincosf of the
//   f32 angle (may differ from libm by an ulp). One rounding to bf16 at the end (the CPU keeps f32).
//   The FP8 store quantizes those f32 values as the CPU quantizes its f32 key (fp8_kv.cuh's codec),
//   so a code differs from the CPU's only where that ulp crosses a rounding boundary (one E4M3 step).
// - Scores: per (row, key) sum_h (weights[t,h] * weight_scale) * max(dot * scale, 0), the same
//   ops as the CPU loop, but the dot products run on the tensor cores (bf16 x bf16 products are
//   exact, the f32 sum is in another order) and the head sum is in another order, so scores
//   match to f32 rounding (~1e-6 relative), not bit for bit. -inf past the causal edge, as the CPU.
//   FP8 keys: the codes go to the tensor cores as bf16 (exact) and each key's dot is multiplied
//   by its factor before the scale, so the scores are the CPU's over the dequantized keys, again
//   to f32 rounding.
// - Selection: exact. It reads the given f32 scores and applies the CPU's rule (highest first,
//   ties to the earlier position; +0 and -0 compare equal), so for the same scores it returns
//   the CPU's kept arrays bit for bit. Scores must not be NaN.
//
// Every size that shapes a grid is a host argument; nothing reads device memory back, so all
// entry points are CUDA-graph capturable with bounds (num_query_tokens, max_context_len).
// Test: tests/gpu/test_dsa_kernels.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tachyon/kernels/dcp_layout.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

struct PagedIndexKeyView {
  const bf16* cache = nullptr;            // [num_blocks, block_size, head_dim] bf16, one index key per token
  const int32_t* block_tables = nullptr;  // [num_seqs, block_table_stride] int32 block ids
  int32_t block_table_stride = 0;
  int32_t block_size = 0;
  int32_t head_dim = 0;  // index_head_dim: 128 in DeepSeek-V3.2, 16 in the tiny model; multiple of 8
                         // (of 16 for FP8 keys), <= 128
  // --kv-cache-dtype fp8 (cache then null): [num_blocks, block_size, head_dim] E4M3 codes and
  // [num_blocks, block_size] f32 factors, one per key (amax / 448), as the CPU reference stores them.
  // Last, so the positional initializers of the bf16 view still compile.
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
};

// cache: [num_slots, head_dim] bf16 (the paged index-key cache viewed as rows, slot = block *
//   block_size + offset); row slots[t] receives token t's key; slots[t] < 0 skips the token.
// k_raw: [num_tokens, head_dim] bf16 (the wk projection); norm_weight, norm_bias: [head_dim] bf16.
// inv_freq: [rope_dim / 2] f32; positions, slots: [num_tokens] int32.
// Key = rope(LayerNorm(k_raw)) with eps 1e-6 and biased variance; the rotate-half rope acts on
// dims [0, rope_dim) with cos/sin(position * inv_freq[i]) * attention_scaling.
// head_dim a multiple of 8 and <= 512; rope_dim even and <= head_dim.
void dsa_store_index_keys(bf16* cache, const bf16* k_raw, const bf16* norm_weight, const bf16* norm_bias,
                          const float* inv_freq, float attention_scaling, const int32_t* positions, const int32_t* slots,
                          int64_t num_tokens, int32_t head_dim, int32_t rope_dim, cudaStream_t stream);

// The same key into the FP8 cache (--kv-cache-dtype fp8): codes: [num_slots, head_dim] E4M3 (4-byte
// aligned), scales: [num_slots] f32. The key's f32 values (never rounded to bf16) are quantized
// with one factor per key, amax / 448 (1 for an all-zero key), code = RNE(x / factor) saturated
// at +-448: tensor/fp8.h's fp8_block_round_trip of the row, as the CPU reference stores it.
void dsa_store_index_keys_fp8(uint8_t* codes, float* scales, const bf16* k_raw, const bf16* norm_weight,
                              const bf16* norm_bias, const float* inv_freq, float attention_scaling,
                              const int32_t* positions, const int32_t* slots, int64_t num_tokens,
                              int32_t head_dim, int32_t rope_dim, cudaStream_t stream);

// q: [num_tokens, num_heads, head_dim] bf16, in place: the same rope on each head's first rope_dim dims.
void dsa_rope_index_queries(bf16* q, const float* inv_freq, float attention_scaling, const int32_t* positions,
                            int64_t num_tokens, int32_t num_heads, int32_t head_dim, int32_t rope_dim,
                            cudaStream_t stream);

struct DsaIndexerParams {
  int32_t num_heads = 0;       // index_n_heads, 1..256 (padded to 16 inside)
  int32_t head_dim = 0;        // index_head_dim, equal to the key view's
  int32_t topk = 0;            // index_topk
  float scale = 1.0f;          // index_head_dim^-0.5, multiplies q . k before the relu
  float weight_scale = 1.0f;   // index_n_heads^-0.5, multiplies each head weight (f32 product)
  // Decode context parallelism (kernels/dcp_layout.h): the key cache holds only this rank's
  // tokens, column j being local token j (at global position dcp.global_position(j)), and a row
  // at position p scores the dcp.local_count(p + 1) local keys at or before it (-inf after).
  // Size 1 (the default): every token, column j at position j.
  DcpLayout dcp{};
};

// scores: [num_query_tokens, scores_stride] f32. Query rows of sequence s are
// query_starts[s] .. query_starts[s+1] - 1; its row i sits at position
// p = context_lens[s] - rows_s + i and gets
//   scores[t, j] = sum_h (weights[t, h] * weight_scale) * relu(scale * q[t, h] . key[j])  for j <= p,
//   -inf for p < j < max_context_len.
// q: [num_query_tokens, num_heads, head_dim] bf16 (roped); weights: [num_query_tokens, num_heads] f32.
// query_starts: [num_seqs + 1], context_lens: [num_seqs] int32, context_lens[s] <= max_context_len.
// Rows past query_starts[num_seqs] (graph padding) are not written. q, the cache and
// max_context_len <= scores_stride as the shapes say; q and the cache (or the codes) 16-byte aligned.
// FP8 keys (keys.codes set): key[j] = factor_j * code_j; the factor multiplies the tensor-core
// dot of q with the codes (exact bf16 products) before the scale, so no key is rounded to bf16.
void dsa_index_scores(float* scores, int64_t scores_stride, const bf16* q, const float* weights,
                      const PagedIndexKeyView& keys, const int32_t* query_starts, const int32_t* context_lens,
                      int32_t num_seqs, int32_t num_query_tokens, int32_t max_context_len,
                      const DsaIndexerParams& params, cudaStream_t stream);

// Scratch of dsa_select_topk for any launch with at most these rows and this max_context_len:
// few long rows are split across CTAs (dsa_topk.cu), whose per-chunk candidates live here. It
// grows with rows only up to a fixed cap (16 MiB at topk 2048), never with rows x context; 0
// when nothing can be split, max_context_len < 2 * max(4096, 4 * topk) or topk > 24576
// (workspace may then be null).
size_t dsa_topk_workspace_bytes(int32_t max_query_tokens, int32_t max_context_len, int32_t topk);

// kept: [num_query_tokens, topk] int32: per row (at position p, as above), the positions of the
// topk largest scores among columns 0 .. min(p, max_context_len - 1), ascending, -1 after the
// min(topk, p + 1) kept; ties at the threshold go to the earlier position
// (kernels::cpu::dsa_select_topk's rule). scores as dsa_index_scores writes them.
// Rows past query_starts[num_seqs] get all -1. workspace: dsa_topk_workspace_bytes(num_query_tokens,
// max_context_len, topk) bytes or more (checked), any contents; launches one kernel, or two when
// the rows are split; nothing is read back, so it is graph capturable.
// dcp: as DsaIndexerParams::dcp, so a row at position p selects among its first
// dcp.local_count(p + 1) columns and `kept` holds local indices (default: every token).
void dsa_select_topk(int32_t* kept, const float* scores, int64_t scores_stride, const int32_t* query_starts,
                     const int32_t* context_lens, int32_t num_seqs, int32_t num_query_tokens, int32_t max_context_len,
                     int32_t topk, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                     const DcpLayout& dcp = {});

}  // namespace tachyon::kernels::cuda
