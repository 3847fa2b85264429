// The activation buffers of the GPU decoder, carved from one allocation at start-up. The buffers
// that pass a layer's data from block to block (residual, normed, proj, attn) are the decoder's;
// each block adds the ones only it uses (MoE routing, latent queries, the indexer's scores) in
// its plan_workspace(), sized for the limits, so a model pays only for the blocks it has.
// Shapes in [rows, features]; T = GpuLimits::max_tokens, S = GpuLimits::max_seqs,
// R = GpuLimits::max_logits_rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tachyon/kernels/cuda/sampling.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::model::gpu {

using kernels::cuda::bf16;

struct Workspace {
  // The decoder's.
  bf16* residual = nullptr;   // [T, hidden] the residual stream
  bf16* normed = nullptr;     // [T, hidden] input of the next projection
  bf16* attn = nullptr;       // [T, max(q_size, heads * v_head_dim)] attention output (o_proj's input)
  bf16* proj = nullptr;       // [T, hidden] o_proj / down output (joins the residual in the next norm)
  bf16* selected = nullptr;   // [R, hidden] final-normed rows whose logits are computed
  float* logits = nullptr;    // [R, vocab] f32
  float* local_logits = nullptr;     // TP: [R, vocab_rows] f32, this rank's vocab slice
  float* gathered_logits = nullptr;  // TP: [tp, R, vocab_rows] f32, every rank's slice
  // Dense attention.
  bf16* qkv = nullptr;        // [T, q_size + 2 * kv_size]
  bf16* q = nullptr;          // [T, q_size] normed + rotated q
  void* decode_scratch = nullptr;
  size_t decode_scratch_bytes = 0;
  // Dense MLP.
  bf16* gate_up = nullptr;    // [T, 2 * intermediate]
  bf16* act = nullptr;        // [T, intermediate]
  // Mixture-of-experts layers (T tokens, k experts each: T * k pairs).
  float* router_logits = nullptr;     // [T, num_experts] f32
  int32_t* topk_ids = nullptr;        // [T, k]
  float* topk_weights = nullptr;      // [T, k]
  int32_t* sorted_rows = nullptr;     // [moe_sorted_capacity(T * k)]
  int32_t* block_expert = nullptr;    // [moe_sorted_capacity(T * k) / kMoeBlockM]
  bf16* expert_gate_up = nullptr;     // [T * k, 2 * moe_intermediate]
  bf16* expert_act = nullptr;         // [T * k, moe_intermediate]
  bf16* expert_down = nullptr;        // [T * k, hidden]
  // E4M3 routed experts above the decode sizes (moe_grouped_gemm_fp8): the GEMM's input rows in
  // E4M3 with their factors per row and 128 columns (the tokens' rows for gate_up, then the pairs'
  // activations for down); FP8 runs only.
  uint8_t* expert_in_fp8 = nullptr;   // [max(T * hidden, T * k * moe_intermediate)]
  float* expert_in_scale = nullptr;   // [max(T * ceil(hidden / 128), T * k * ceil(moe_intermediate / 128))]
  // DeepSeek's shared expert (I_shared = moe_intermediate * n_shared_experts).
  bf16* shared_gate_up = nullptr;     // [T, 2 * I_shared]
  bf16* shared_act = nullptr;         // [T, I_shared]
  bf16* shared_out = nullptr;         // [T, hidden]
  // Data-parallel attention (D ranks in the expert group, moe_mlp.h): the routing buffers above
  // are sized for D * T tokens, and these hold every rank's rows.
  bf16* expert_group_rows = nullptr;  // [D * T, hidden] every rank's MLP input rows, rank by rank
  bf16* expert_group_sums = nullptr;  // [D * T, hidden] this rank's experts' sums, then the group's
  float* unit_weights = nullptr;      // [T] f32 1.0: the combine that copies this rank's rows back
  // Multi-head latent attention (qk = qk_nope + qk_rope, qa = kv_lora_rank + qk_rope).
  bf16* q_lora = nullptr;             // [T, q_lora_rank] q_a_layernorm(q_a_proj(x)), normed in place
  bf16* q_full = nullptr;             // [T, heads * qk] q_b_proj / q_proj output
  bf16* kv_a = nullptr;               // [T, kv_lora_rank + qk_rope] kv_a_proj_with_mqa output
  bf16* q_absorbed = nullptr;         // [T, heads * qa] [q_nope @ W_uk | rope(q_pe)]
  bf16* attn_latent = nullptr;        // [T, heads * kv_lora_rank] attended latents
  // Prefill in the expanded form (kernels/cuda/mla_expand.h; E its padded head width, R scratch rows).
  bf16* mla_expanded_q = nullptr;        // [T, heads, E] [q_nope | rope(q_pe) | 0]
  bf16* mla_expanded_out = nullptr;      // [T, heads, E] the dense prefill kernel's output
  bf16* mla_expanded_rows = nullptr;     // [R, kv_lora_rank + qk_rope] the contexts' latent rows
  bf16* mla_expanded_k = nullptr;        // [R, heads, E] [W_uk c_kv | k_pe | 0]
  bf16* mla_expanded_v = nullptr;        // [R, heads, E] [W_uv c_kv | 0]
  int32_t* mla_expanded_tables = nullptr;  // [max_seqs, mla_expanded_table_stride(max_model_len)]
  // f32 partials of the split latent-attention kernels: dense decode and DSA's sparse attention
  // (one buffer: each launch checks its own size, and they run one after another on one stream).
  void* mla_split_scratch = nullptr;
  size_t mla_split_scratch_bytes = 0;
  // DeepSeek-V3.2's indexer (H_I heads of D_I, top-k K, scores over max_model_len columns).
  bf16* index_q = nullptr;            // [T, H_I * D_I]
  float* index_weights = nullptr;     // [T, H_I] f32
  bf16* index_k = nullptr;            // [T, D_I] wk output before its norm and rope
  float* index_scores = nullptr;      // [T, max_model_len] f32
  int32_t* kept = nullptr;            // [T, K] positions each token attends
  void* topk_scratch = nullptr;
  size_t topk_scratch_bytes = 0;
  // Decode context parallelism over N ranks of H heads each (latent_attention.h): the group's
  // queries, this rank's partials of every head and the partials of its own heads from the group.
  int32_t* dcp_slots = nullptr;       // [T] this rank's cache slots of the step's tokens, -1: another rank's
  bf16* dcp_q_gathered = nullptr;     // [N, T, H * qa] the all-gather's rank order
  bf16* dcp_q_group = nullptr;        // [T, N * H, qa] every head of the group per token
  bf16* dcp_attn_group = nullptr;     // [T, N * H, kv_lora_rank] partial outputs over the local rows
  float* dcp_lse_group = nullptr;     // [T, N * H] their log-sum-exp
  bf16* dcp_send_out = nullptr;       // [N, T, H, kv_lora_rank] rank r's heads' partials, for rank r
  float* dcp_send_lse = nullptr;      // [N, T, H]
  bf16* dcp_recv_out = nullptr;       // [N, T, H, kv_lora_rank] every rank's partials of this rank's heads
  float* dcp_recv_lse = nullptr;      // [N, T, H]
  void* dcp_candidates = nullptr;     // DSA: [T, K] this rank's top-k as (score, global position)
  void* dcp_gathered_candidates = nullptr;  // DSA: [N, T, K] the group's
  // Prefill context parallelism: every row of a split step, gathered in the group's rank order.
  bf16* pcp_kv_a = nullptr;           // [T, kv_lora_rank + qk_rope] kv_a_proj_with_mqa outputs
  bf16* pcp_index_k = nullptr;        // DSA: [T, D_I] wk outputs before their norm and rope
};

// Collects (pointer, bytes) pairs, then points each into one allocation, 256-byte aligned.
class WorkspacePlan {
 public:
  template <typename T>
  void add(T** slot, size_t bytes) {
    entries_.push_back({reinterpret_cast<void**>(slot), bytes});
  }
  size_t bytes() const;       // the allocation the entries need
  void assign(void* base);    // points every slot into [base, base + bytes())

 private:
  struct Entry {
    void** slot;
    size_t bytes;
  };
  std::vector<Entry> entries_;
};

}  // namespace tachyon::model::gpu
