// Decode context parallelism's attention math (dcp_layout.h): each rank attends only the latent
// rows it holds and returns, beside its partial output, the log-sum-exp of its scores; the
// partials of the DCP group then merge exactly into what one softmax over every row gives:
//   partial r:  m_r = max_t s_t,  d_r = sum_t exp(s_t - m_r),  o_r = sum_t exp(s_t - m_r) / d_r * v_t,
//               lse_r = m_r + log(d_r)           (-inf and o_r = 0 when rank r holds no row)
//   merged:     M = max_r lse_r,  w_r = exp(lse_r - M),  o = sum_r w_r * o_r / sum_r w_r
// In exact arithmetic o equals the unsplit softmax(s) . v; in f32 it differs by rounding (the
// sums run in another order), so DCP runs are compared within an f32 tolerance, not bit for bit.
// The scores are the absorbed MLA kernel's (kernels/mla_attention.h) over the listed rows.
// Tests: tests/unit/test_dcp_merge.cpp (against one softmax over every row).
#pragma once

#include <cstdint>
#include <span>

#include "tachyon/kernels/mla_attention.h"

namespace tachyon::model {

// One query token's heads over the latent rows in `rows` (cache row indices, any order; empty
// allowed): out: [num_heads, kv_lora_rank], lse: [num_heads]; q: [num_heads, kv_lora_rank +
// rope_dim]; latent_cache: [rows, kv_lora_rank + rope_dim]. shape gives num_heads, the widths and
// the scale (num_queries and first_position are ignored).
void partial_latent_attention(float* out, float* lse, const float* q, const float* latent_cache,
                              std::span<const int64_t> rows, const kernels::cpu::MlaAttentionShape& shape);

// Merges `sources` partials of the same tokens: partial_out: [sources, n, all_heads, width],
// partial_lse: [sources, n, all_heads], as the group's exchange lays them out; out: [n, heads,
// width] for heads [head_begin, head_begin + heads) of all_heads (a TP rank's own heads).
struct PartialsShape {
  int64_t sources = 1;
  int64_t num_tokens = 0;
  int64_t all_heads = 0;
  int64_t head_begin = 0;
  int64_t heads = 0;
  int64_t width = 0;
};
void merge_attention_partials(float* out, const float* partial_out, const float* partial_lse, const PartialsShape& shape);

}  // namespace tachyon::model
