// The model's weights on the GPU: bf16 (the projections of an FP8 run in E4M3 with their
// factors, model/fp8_projections.h), fused as the CPU reference fuses them ([q; k; v],
// [gate; up]), one device allocation per decoder layer and one for the rest, each carved into
// tensors, so the forward reads plain pointers. A layer goes up as soon as it is given
// (add_layer), so a loader can hand the layers over as it reads them and the host never holds
// the model: DeepSeek-V3's FP8 shards (~680 GB) exceed an 8-GPU node's host memory
// (model/gpu/stream_gpu_weights.h). Also holds the RoPE inverse frequencies and DeepSeek's
// router score bias in f32 (transformers keeps that bias in f32 whatever the model's dtype).
#pragma once

#include <cstdint>
#include <vector>

#include "tachyon/tensor/cuda/cuda_check.h"
#include "tachyon/model/fp8_projections.h"
#include "tachyon/model/gpu/linear_dispatch.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::model::gpu {

using kernels::cuda::bf16;

struct CudaLayerWeights {
  const bf16* input_norm = nullptr;          // [hidden]
  LinearWeight qkv;                        // [q_size + 2 * kv_size, hidden]
  const bf16* qkv_bias = nullptr;            // [q_size + 2 * kv_size] or nullptr
  const bf16* q_norm = nullptr;              // [head_dim] or nullptr (Qwen3)
  const bf16* k_norm = nullptr;              // [head_dim] or nullptr
  LinearWeight o_proj;                     // [hidden, q_size]
  const bf16* o_proj_bias = nullptr;         // [hidden] or nullptr
  const bf16* post_attention_norm = nullptr; // [hidden]
  LinearWeight gate_up;                    // [2 * intermediate, hidden]
  const bf16* gate_up_bias = nullptr;        // [2 * intermediate] or nullptr
  LinearWeight down;                       // [hidden, intermediate]
  const bf16* down_bias = nullptr;           // [hidden] or nullptr
  // Mixture-of-experts layers (model_weights.h); the dense MLP fields above are then null.
  const bf16* router = nullptr;              // [num_experts, hidden]
  // bf16 (values), or in an FP8 run E4M3 (fp8, with scale [rows, ceil(k / 128)]; no scale_by_block).
  LinearWeight experts_gate_up;            // [num_experts, 2 * moe_intermediate, hidden]
  LinearWeight experts_down;               // [num_experts, hidden, moe_intermediate]
  // DeepSeek-V3's MoE extras (I_shared = moe_intermediate * n_shared_experts).
  const float* router_bias = nullptr;        // [num_experts] f32 (e_score_correction_bias)
  LinearWeight shared_gate_up;             // [2 * I_shared, hidden]
  LinearWeight shared_down;                // [hidden, I_shared]
  // Multi-head latent attention (qk = qk_nope + qk_rope); qkv above is then null.
  LinearWeight q_a_proj;                   // [q_lora_rank, hidden] or nullptr (no q LoRA)
  const bf16* q_a_norm = nullptr;            // [q_lora_rank] or nullptr
  LinearWeight q_b_proj;                   // [heads * qk, q_lora_rank], or q_proj [heads * qk, hidden]
  LinearWeight kv_a_proj;                  // [kv_lora_rank + qk_rope, hidden]
  const bf16* kv_a_norm = nullptr;           // [kv_lora_rank]
  const bf16* kv_b_proj = nullptr;           // [heads * (qk_nope + v_head_dim), kv_lora_rank]
  // DeepSeek-V3.2's lightning indexer (H_I heads of D_I).
  const bf16* indexer_wq_b = nullptr;          // [H_I * D_I, q_lora_rank]
  const bf16* indexer_wk = nullptr;            // [D_I, hidden]
  const bf16* indexer_k_norm = nullptr;        // [D_I]
  const bf16* indexer_k_norm_bias = nullptr;   // [D_I]
  const bf16* indexer_weights_proj = nullptr;  // [H_I, hidden]
};

class CudaDenseWeights {
 public:
  // Uploads `weights` (bf16 bit patterns) and `inv_freq` ([head_dim / 2] f32).
  CudaDenseWeights(const Bf16ModelWeights& weights, const std::vector<float>& inv_freq);
  // An FP8 run: `weights.fp8`'s projections in FP8, the rest from `weights.bf16`.
  CudaDenseWeights(const Fp8GpuWeights& weights, const std::vector<float>& inv_freq);
  // Empty weights of config.num_hidden_layers layers (`fp8`: an FP8 run's), filled by add_layer
  // for every layer and add_rest once, in any order, on the calling thread's current device.
  CudaDenseWeights(const ModelConfig& config, bool fp8);
  CudaDenseWeights(CudaDenseWeights&&) = default;
  CudaDenseWeights& operator=(CudaDenseWeights&&) = default;
  // Uploads decoder layer i (bf16; an FP8 run also its FP8 projections, whose bf16 fields are
  // then empty). Copies synchronously: the host layer may go as soon as this returns.
  void add_layer(int64_t i, const BasicLayerWeights<uint16_t>& layer, const Fp8LayerProjections* fp8 = nullptr);
  // Uploads the embeddings, final norm and LM head of `rest` (its layers are not read) and the
  // RoPE inverse frequencies.
  void add_rest(const Bf16ModelWeights& rest, const std::vector<float>& inv_freq);
  // Every layer and the rest are up (the runners check it before their first step).
  bool complete() const;
  // Rows of the embedding table (the vocabulary, or a tensor-parallel rank's share of it).
  int64_t embed_rows() const { return embed_rows_; }

  const ModelConfig& config() const { return config_; }
  const std::vector<CudaLayerWeights>& layers() const { return layers_; }
  const bf16* embed_tokens() const { return embed_tokens_; }  // [vocab, hidden]
  const bf16* final_norm() const { return final_norm_; }      // [hidden]
  const bf16* lm_head() const { return lm_head_; }            // [vocab, hidden] (embed_tokens when tied)
  const float* inv_freq() const { return inv_freq_; }         // [head_dim / 2]
  size_t bytes() const;
  bool fp8() const { return fp8_; }
  // The most weight values of one FP8 projection (n * k): the bf16 scratch a product of more
  // rows than fp8_gemv serves dequantizes into; 0 without FP8.
  int64_t largest_fp8_projection() const { return largest_fp8_projection_; }
  // The widest input (k) of an FP8 projection: the row width its quantized activations take.
  int64_t largest_fp8_input() const { return largest_fp8_input_; }
  // The most outputs (n) of an FP8 projection: the row width of a padded product's staged output.
  int64_t largest_fp8_output() const { return largest_fp8_output_; }
  // Whether some dense FP8 projection has one factor per row (LinearWeight::scale_by_row: per-channel
  // and per-tensor checkpoints), and whether some has factors per 128 columns (the block formats,
  // online FP8): which forms of FP8 product start-up tunes.
  bool fp8_per_row() const { return fp8_per_row_; }
  bool fp8_by_block() const { return fp8_by_block_; }

 private:
  // The whole-model constructors size the layers by their weights (an MTP module's is one).
  CudaDenseWeights(const ModelConfig& config, bool fp8, int64_t num_layers);

  ModelConfig config_;
  std::vector<cuda::DeviceBuffer> layer_storage_;  // per layer; empty until its add_layer
  cuda::DeviceBuffer rest_storage_;                // the embeddings, final norm, head, inv_freq
  std::vector<CudaLayerWeights> layers_;
  int64_t embed_rows_ = 0;
  const bf16* embed_tokens_ = nullptr;
  const bf16* final_norm_ = nullptr;
  const bf16* lm_head_ = nullptr;
  const float* inv_freq_ = nullptr;
  bool fp8_ = false;
  int64_t largest_fp8_projection_ = 0;
  int64_t largest_fp8_input_ = 0;
  int64_t largest_fp8_output_ = 0;
  bool fp8_per_row_ = false;
  bool fp8_by_block_ = false;
};

}  // namespace tachyon::model::gpu
