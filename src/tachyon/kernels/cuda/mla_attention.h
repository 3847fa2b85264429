// DeepSeek MLA attention in the absorbed form over the paged latent cache, on the GPU: decode
// (one query per sequence, split-KV), ragged causal prefill / mixed steps, and DeepSeek sparse
// attention (DSA: each query row attends only the tokens its indexer kept; its list split
// across CTAs at small batch, as decode's context is).
// CPU twins: kernels/mla_attention.h `paged_mla_attention` and kernels/sparse_mla_attention.h
// `paged_sparse_mla_attention`, which these must match.
//
// The one non-obvious decision: the latent row [c_kv | k_pe] is the key of every head and c_kv
// its value, so this is multi-query attention with a 576-wide key and a 512-wide value. The
// kernels put all the heads of a token (decode, sparse) or the flattened (token, head) rows of a
// prompt block (prefill) into the M dimension of one tensor-core tile, so a latent tile read
// from HBM feeds every head at once; the 512-wide f32 accumulator is split by columns across
// the CTA's warps (mla_attention_core.cuh). Every size that shapes a grid is host-known and
// passed in, so nothing reads device memory back and the launches can be captured in a graph.
// Test: tests/gpu/test_mla_kernels.cpp (build/tests/gpu_mla_kernels, GPU machine only).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tachyon/kernels/dcp_layout.h"
#include "tachyon/kernels/fp8_latent_layout.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// The FP8 latent cache (--kv-cache-dtype fp8): the row of kernels/fp8_latent_layout.h in three
// planes indexed by slot (codes, factors, k_pe).
using kernels::fp8_latent_scale_stride;
using kernels::kFp8LatentGroup;

struct PagedLatentView {
  const bf16* cache = nullptr;            // [num_blocks, block_size, kv_lora_rank + rope_dim] bf16 rows [c_kv | k_pe]
  const int32_t* block_tables = nullptr;  // [num_seqs, block_table_stride] int32 block ids
  int32_t block_table_stride = 0;         // entries per row (>= blocks of the longest sequence)
  int32_t block_size = 0;                 // any value >= 1
  int32_t kv_lora_rank = 0;               // multiple of 8, <= 512 (DeepSeek: 512)
  int32_t rope_dim = 0;                   // multiple of 8, <= 64 (DeepSeek: 64)
  // An FP8 cache instead (cache then null; kv_lora_rank a multiple of 16):
  const uint8_t* codes = nullptr;         // [num_blocks, block_size, kv_lora_rank] E4M3 codes of c_kv
  const float* scales = nullptr;          // [num_blocks, block_size, fp8_latent_scale_stride(kv_lora_rank)] f32
  const bf16* rope = nullptr;             // [num_blocks, block_size, rope_dim] bf16 k_pe
  bool fp8() const { return codes != nullptr; }
};

struct MlaAttentionParams {
  int32_t num_heads = 0;  // query heads (all share the one latent row per token)
  float scale = 1.0f;     // the decompressed form's softmax scale (qk_head_dim^-0.5, times YaRN mscale^2)
  // Decode context parallelism (kernels/dcp_layout.h): the cache holds only this rank's tokens,
  // local token k of a sequence at block_tables[k / block_size] (the view's block size is the
  // engine's divided by dcp.size). A query attends the local tokens whose GLOBAL position is at
  // most its own: decode the first dcp.local_count(context_len), prefill row at position p the
  // first dcp.local_count(p + 1); sparse lists stay global positions and keep only those this
  // rank owns. The default (size 1) is every token, as without DCP.
  DcpLayout dcp{};
  // Optional: [rows] f32, rows = token * num_heads + head: the natural-log sum of exp(scaled
  // score) over the keys the row attended (the merge weight of DCP's partial outputs), -inf for a
  // row that attended none (its output is zeros).
  float* lse = nullptr;
};

// --- decode: one query token per sequence, at position context_lens[s] - 1 ---
// Scratch bytes for up to `max_seqs` sequences of up to `max_context_len` tokens on the current
// device: the f32 partials of the KV splits, [seqs, heads, splits, kv_lora_rank + 1] with at
// most 64 splits of >= 64 keys, and never more split CTAs than a few waves of the device's SMs
// (so it stays small at any length); 0 when max_context_len <= 64 (one split, the workspace
// may then be null).
size_t mla_decode_workspace_bytes(int32_t max_seqs, int32_t num_heads, int32_t kv_lora_rank, int32_t max_context_len);

// out: [num_seqs, num_heads, kv_lora_rank] bf16; q: [num_seqs, num_heads, kv_lora_rank + rope_dim]
// bf16, the absorbed query [q_nope @ W_uk | q_pe]; context_lens: [num_seqs] int32, tokens in the
// cache including this step's. max_context_len >= every context_lens[s] (host-known; it bounds
// the KV splits, so a graph captured with the model's maximum replays for any shorter context).
// context_lens[s] == 0 (graph padding) writes zeros. workspace: mla_decode_workspace_bytes(
// num_seqs or more, ...) bytes.
void mla_decode_attention(bf16* out, const bf16* q, const PagedLatentView& cache, const int32_t* context_lens,
                          int32_t num_seqs, int32_t max_context_len, const MlaAttentionParams& params,
                          void* workspace, size_t workspace_bytes, cudaStream_t stream);

// --- prefill / mixed: a ragged batch of query rows per sequence, causal ---
// out: [num_query_tokens, num_heads, kv_lora_rank] bf16; q: [num_query_tokens, num_heads,
// kv_lora_rank + rope_dim] bf16, sequences' rows contiguous in order. query_starts: [num_seqs + 1]
// int32 prefix offsets; context_lens: [num_seqs] int32. Row i of sequence s sits at position
// context_lens[s] - (query_starts[s+1] - query_starts[s]) + i and attends positions 0 .. that
// one (earlier chunks and prefix-cached blocks come from the cache). max_query_len >= every
// sequence's row count (host-known; shapes the grid).
void mla_prefill_attention(bf16* out, const bf16* q, const PagedLatentView& cache, const int32_t* query_starts,
                           const int32_t* context_lens, int32_t num_seqs, int32_t num_query_tokens,
                           int32_t max_query_len, const MlaAttentionParams& params, cudaStream_t stream);

// --- DeepSeek sparse attention (DSA) ---
// Scratch bytes for launches of up to `max_query_tokens` tokens with lists of up to `kept_width`
// entries on the current device: the f32 partials when few tokens split their lists across
// CTAs, [tokens, heads, splits, kv_lora_rank + 1], bounded like decode's (a few waves of split
// CTAs; steps with many tokens never split), so it does not grow with max_query_tokens; 0 when
// kept_width <= 64 (one tile, never split).
size_t sparse_mla_workspace_bytes(int32_t max_query_tokens, int32_t num_heads, int32_t kv_lora_rank,
                                  int32_t kept_width);

// out, q: as prefill's. kept: [num_query_tokens, kept_width] int32 token positions of query row
// t's sequence (found from query_starts: [num_seqs + 1]), ascending, -1 entries skipped, at least
// one valid; row t attends exactly those tokens. Listing every token 0 .. position gives the
// dense kernels' result. The split count depends only on num_query_tokens, num_heads,
// kept_width and the SM count (graph-capturable; the same sum order on every run). workspace:
// sparse_mla_workspace_bytes(num_query_tokens or more, ...) bytes (may be null when that is 0).
void sparse_mla_attention(bf16* out, const bf16* q, const PagedLatentView& cache, const int32_t* kept,
                          int32_t kept_width, const int32_t* query_starts, int32_t num_seqs, int32_t num_query_tokens,
                          const MlaAttentionParams& params, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
