// The weights of a decoder in f32 (the CPU reference) or as bf16 bit patterns (what the
// GPU runs on), loaded from a HF safetensors checkpoint with every
// tensor's name, shape and presence checked against the config. q/k/v and gate/up are fused
// at load ([q; k; v] and [gate; up] rows) so each block runs one matrix product.
// A mixture-of-experts layer (ModelConfig::is_moe_layer) holds its experts the same way, fused
// per expert and stacked in one contiguous array per layer ([E, 2 * I_moe, hidden] and
// [E, hidden, I_moe], transformers 5's own Qwen3MoeExperts layout), so that a grouped GEMM can
// address expert e at a fixed stride; its dense MLP fields are then empty. Mixtral checkpoints
// name the same tensors block_sparse_moe.gate and block_sparse_moe.experts.{e}.w1 (gate), w3 (up),
// w2 (down); one table in model_weights.cpp holds each architecture's names.
// DeepSeek-V3's latent attention (ModelConfig::is_mla) keeps its projections unfused, as named
// in the checkpoint (mla.h); qkv is then empty. Its MoE layers add the router's score bias and one
// shared expert, fused [gate; up] like the dense MLP. DeepSeek-V3.2 adds each layer's indexer.
// FP8 checkpoints (config.quantization, fp8_checkpoint.h) are dequantized as each tensor is read,
// with its companion scale; both loaders then hold ordinary f32 / bf16 weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include "tachyon/model/model_config.h"
#include "tachyon/model/safetensors.h"

namespace tachyon::model {

template <typename T>
struct BasicLayerWeights {
  std::vector<T> input_norm;          // [hidden]
  std::vector<T> qkv;                 // [q_size + 2 * kv_size, hidden]
  std::vector<T> qkv_bias;            // [q_size + 2 * kv_size] or empty
  std::vector<T> q_norm;              // [head_dim] or empty (Qwen3)
  std::vector<T> k_norm;              // [head_dim] or empty (Qwen3)
  std::vector<T> o_proj;              // [hidden, q_size]
  std::vector<T> o_proj_bias;         // [hidden] or empty
  std::vector<T> post_attention_norm; // [hidden]
  std::vector<T> gate_up;             // [2 * intermediate, hidden]
  std::vector<T> gate_up_bias;        // [2 * intermediate] or empty
  std::vector<T> down;                // [hidden, intermediate]
  std::vector<T> down_bias;           // [hidden] or empty
  // Mixture of experts; all empty when the layer is dense (and the dense MLP above empty when not).
  std::vector<T> router;              // [num_experts, hidden] (mlp.gate.weight; Mixtral: block_sparse_moe.gate.weight)
  std::vector<T> experts_gate_up;     // [num_experts, 2 * moe_intermediate, hidden]: expert e's [gate; up]
  std::vector<T> experts_down;        // [num_experts, hidden, moe_intermediate]
  // DeepSeek-V3 MoE extras; empty otherwise. I_shared = moe_intermediate * n_shared_experts.
  std::vector<T> router_bias;         // [num_experts] (mlp.gate.e_score_correction_bias)
  std::vector<T> shared_gate_up;      // [2 * I_shared, hidden]
  std::vector<T> shared_down;         // [hidden, I_shared]
  // Multi-head latent attention (DeepSeek-V3); empty otherwise. qk = qk_nope + qk_rope = head_dim.
  std::vector<T> q_a_proj;            // [q_lora_rank, hidden], empty without q LoRA
  std::vector<T> q_a_norm;            // [q_lora_rank], empty without q LoRA
  std::vector<T> q_b_proj;            // [heads * qk, q_lora_rank] with q LoRA, else q_proj [heads * qk, hidden]
  std::vector<T> kv_a_proj;           // [kv_lora_rank + qk_rope, hidden] (kv_a_proj_with_mqa)
  std::vector<T> kv_a_norm;           // [kv_lora_rank]
  std::vector<T> kv_b_proj;           // [heads * (qk_nope + v_head_dim), kv_lora_rank]
  // o_proj above is [hidden, heads * v_head_dim] under MLA.
  // DeepSeek-V3.2's lightning indexer (self_attn.indexer.*, model/dsa_indexer.h); empty otherwise,
  // and on GLM-5's "shared" layers (ModelConfig::has_indexer). H_I = index_n_heads, D_I = index_head_dim.
  std::vector<T> indexer_wq_b;          // [H_I * D_I, q_lora_rank]
  std::vector<T> indexer_wk;            // [D_I, hidden]
  std::vector<T> indexer_k_norm;        // [D_I] LayerNorm weight
  std::vector<T> indexer_k_norm_bias;   // [D_I] LayerNorm bias
  std::vector<T> indexer_weights_proj;  // [H_I, hidden]
  // The same matrices as qkv, o_proj, gate_up and down above, as the bf16 bit patterns a bf16
  // checkpoint stores, when the CPU model holds them so (Bf16MatrixHolding::kKeepBf16); the f32
  // fields are then empty. Always empty in Bf16ModelWeights, whose every field is bf16 already.
  std::vector<uint16_t> qkv_bf16;      // [q_size + 2 * kv_size, hidden]
  std::vector<uint16_t> o_proj_bf16;   // [hidden, q_size] (MLA: [hidden, heads * v_head_dim])
  std::vector<uint16_t> gate_up_bf16;  // [2 * intermediate, hidden]
  std::vector<uint16_t> down_bf16;     // [hidden, intermediate]

  bool operator==(const BasicLayerWeights&) const = default;
};

template <typename T>
struct BasicModelWeights {
  ModelConfig config;
  std::vector<T> embed_tokens;  // [vocab, hidden]
  std::vector<BasicLayerWeights<T>> layers;
  std::vector<T> final_norm;    // [hidden]
  std::vector<T> lm_head;       // [vocab, hidden]; empty when tied to embed_tokens
  std::vector<uint16_t> lm_head_bf16;  // [vocab, hidden]: lm_head held as bf16 (see qkv_bf16), lm_head then empty

  // The LM head's f32 matrix: lm_head, or embed_tokens when the head is tied to it. Empty when an
  // untied head is held as bf16 (lm_head_bf16): a reader of f32 alone then fails on its size
  // instead of taking the embedding for the head.
  const std::vector<T>& output_embedding() const {
    static const std::vector<T> held_as_bf16;
    if (!lm_head_bf16.empty()) return held_as_bf16;
    return lm_head.empty() ? embed_tokens : lm_head;
  }
};

using LayerWeights = BasicLayerWeights<float>;
using ModelWeights = BasicModelWeights<float>;
using Bf16ModelWeights = BasicModelWeights<uint16_t>;  // bf16 bit patterns (round to nearest even)

// DeepSeek-V3's multi-token-prediction module k, stored in the checkpoint as layer
// num_hidden_layers + k (model/mtp.h runs it). f32 only: it serves the CPU reference.
struct MtpWeights {
  int64_t checkpoint_layer = 0;     // num_hidden_layers + k
  std::vector<float> enorm;         // [hidden] RMSNorm of the next token's embedding
  std::vector<float> hnorm;         // [hidden] RMSNorm of the previous hidden state
  std::vector<float> eh_proj;       // [hidden, 2 * hidden], input columns [enorm(emb) | hnorm(h)]
  std::vector<float> embed_tokens;  // [vocab, hidden] (model.embed_tokens.weight when the module has none)
  LayerWeights layer;               // one MoE decoder layer of the main model's shapes
  std::vector<float> head_norm;     // [hidden] shared_head.norm
  std::vector<float> head;          // [vocab, hidden] shared_head.head (the main LM head when it has none)
  bool embed_from_main = false;     // the checkpoint had no embed_tokens copy for this module
  bool head_from_main = false;      // the checkpoint had no shared_head.head for this module
};

// Every tensor a checkpoint of this config must hold, with its shape, in HF naming. With
// num_nextn_predict_layers > 0 the MTP modules' tensors follow the main model's; of these the
// embed_tokens and shared_head.head copies may be absent (load_mtp_weights falls back).
std::vector<std::pair<std::string, std::vector<int64_t>>> expected_tensors(const ModelConfig& config);

// Where the f32 loader puts a bf16 checkpoint's dense matrices (qkv, o_proj, gate_up, down, an
// untied lm_head; each one whose every part is stored in bf16).
enum class Bf16MatrixHolding {
  // Widened to f32 in their f32 fields, like every other tensor: what every CPU forward reads.
  kWidenToF32,
  // Kept as bf16 in their *_bf16 fields, f32 fields empty: half the bytes, the same logits bit
  // for bit (kernels/linear.h widens them exactly in the product). Only DenseModel's forward
  // reads them; tensor-parallel shards (tp_shard.h), online FP8 (online_fp8.h) and the FP8
  // projections read the f32 fields, so their callers load with kWidenToF32.
  kKeepBf16,
};

// Checks the checkpoint against expected_tensors (missing, unexpected, wrong shape) and
// converts to f32 (bf16 matrices as `holding` says). Errors name the tensor and its file.
ModelWeights load_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                          Bf16MatrixHolding holding = Bf16MatrixHolding::kWidenToF32);
// The same checks and values as load_weights (kWidenToF32), read one decoder layer at a time:
// each layer goes to `take_layer` as soon as it is read, before the next one is, and the returned
// weights' layers are left empty; the embedding, final norm and LM head come back in bf16, as
// load_weights_bf16 reads them (the form its callers keep them in). A loader that turns each
// layer into another form (the FP8 GPU form, fp8_projections.h) so holds one layer in f32 beside
// what it keeps, not the whole model in f32 (Llama-3.1-8B: 0.9 GB instead of 32 GB; DeepSeek-V3:
// 45 GB instead of 2.7 TB).
using TakeLayer = std::function<void(int64_t layer, LayerWeights&& weights)>;
Bf16ModelWeights load_weights_by_layer(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                       const TakeLayer& take_layer);
// The same with the embedding, final norm and LM head in f32 too, as load_weights reads them (the
// CPU ranks' shards, tp_shard_loader.h).
ModelWeights load_weights_f32_by_layer(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                       const TakeLayer& take_layer);
// The same for load_weights_bf16: each layer in bf16 as it is read.
using TakeBf16Layer = std::function<void(int64_t layer, BasicLayerWeights<uint16_t>&& weights)>;
Bf16ModelWeights load_weights_bf16_by_layer(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                            const TakeBf16Layer& take_layer);
// The same checks, converting to bf16 (a bf16 checkpoint is copied as is).
Bf16ModelWeights load_weights_bf16(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint);

// Whether any matrix is held as bf16 (Bf16MatrixHolding::kKeepBf16), its f32 field then empty.
bool holds_bf16_matrices(const ModelWeights& weights);
// For the code that reads only the f32 fields (tensor-parallel shards, online FP8, the FP8
// projections): throws Error naming `reader` when the weights hold bf16 matrices, which it would
// otherwise take for absent ones.
void check_f32_matrices(const ModelWeights& weights, const char* reader);

// The main model's weights skip the MTP modules' tensors (the main forward never runs them);
// this reads them, one MtpWeights per module, with the same name and shape checks. A module's
// embed_tokens / shared_head.head copy is taken when the checkpoint has that tensor and the main
// model's otherwise; any other missing tensor fails naming it, and a tensor of the module's layer
// that nothing reads fails as unexpected.
std::vector<MtpWeights> load_mtp_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint);

}  // namespace tachyon::model
