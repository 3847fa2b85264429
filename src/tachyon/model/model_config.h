// ModelConfig: the typed form of a Hugging Face config.json for the decoder families
// (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral, DeepSeek-V3, DeepSeek-V3.2, GLM-5). Parsed and
// validated once; immutable afterwards. The architectures differ only in fields here (biases, q/k
// norm, sliding window, experts, latent attention, routing kind), so one forward serves them all;
// see dense_model.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tachyon/model/fp8_checkpoint.h"

namespace tachyon::model {

struct Architecture;

enum class RopeScalingType { kNone, kLinear, kLlama3, kYarn };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  // llama3 only: frequencies with wavelengths between original_max_position / high_freq_factor
  // and original_max_position / low_freq_factor are interpolated smoothly.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;  // llama3 and yarn
  // yarn only (rope.h): the ramp between beta_fast and beta_slow rotations over the original
  // context; mscale / mscale_all_dim (0: absent) set the cos/sin factor and, for DeepSeek's MLA,
  // the softmax scale; attention_factor (0: absent) overrides the cos/sin factor.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  double attention_factor = 0.0;
  bool truncate = true;  // round the ramp's ends to whole dimensions
};

// The layout of the rotary dims that DSA's indexer rotates (model/dsa_indexer.h). MLA's own layout
// is rope_interleave; the indexer's is the architecture's: DeepSeek-V3.2 rotate-half, GLM-5 interleaved.
enum class RopeLayout {
  kRotateHalf,  // dim i pairs with dim i + rope / 2 (transformers' apply_rotary_pos_emb)
  kInterleaved  // dims (2i, 2i + 1) pair (apply_rotary_pos_emb_interleave: de-interleaved, then rotate-half)
};

// How one DSA layer gets its top-k (GLM-5's indexer_types; DeepSeek-V3.2: every layer full).
enum class IndexerType {
  kFull,   // runs its own indexer over its own cached index keys
  kShared  // has no indexer (no weights, no index keys): attends the previous full layer's selection
};

// How a MoE layer picks its experts (moe.h).
enum class RouterKind {
  kSoftmaxTopK,         // Qwen3-MoE, Mixtral: softmax over the logits, top-k
  kSigmoidGroupLimited  // DeepSeek-V3: sigmoid, bias-corrected choice within the top groups, scaled
};

struct ModelConfig {
  std::string architecture;  // as in config.json "architectures"[0], e.g. "Qwen3ForCausalLM"
  std::string model_type;    // "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3",
                             // "deepseek_v32", "glm_moe_dsa"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  // config "head_dim" when given, else hidden_size / num_attention_heads; with MLA the query/key
  // head width qk_nope_head_dim + qk_rope_head_dim (transformers' qk_head_dim).
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;       // Qwen2 always; Llama/Qwen3 when attention_bias is true
  bool o_proj_bias = false;    // Llama/Qwen3 attention_bias covers o_proj too; Qwen2 never
  bool mlp_bias = false;       // Llama's mlp_bias
  bool qk_norm = false;        // Qwen3: RMSNorm over head_dim on q and k before RoPE
  std::optional<int64_t> sliding_window;  // Mistral, Mixtral: a query sees the last `sliding_window` keys
  std::string torch_dtype;     // informative: the dtype the checkpoint was saved in
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;

  // Multi-head latent attention (DeepSeek-V3; mla.h). kv_lora_rank == 0: ordinary attention.
  int64_t q_lora_rank = 0;        // 0 (config null): q_proj is one [heads * head_dim, hidden] linear
  int64_t kv_lora_rank = 0;       // width of the compressed kv latent
  int64_t qk_nope_head_dim = 0;   // per-head query/key dims without rotary embedding ...
  int64_t qk_rope_head_dim = 0;   // ... and with it (k's rope part is shared by every head)
  int64_t v_head_dim = 0;         // per-head value width; 0: head_dim
  bool rope_interleave = false;   // rope dims stored as interleaved pairs (de-interleaved first)
  int64_t num_nextn_predict_layers = 0;  // DeepSeek multi-token-prediction modules (mtp.h), stored after the layers

  // DeepSeek sparse attention (DeepSeek-V3.2, GLM-5; model/dsa_indexer.h). index_topk == 0: none.
  // Each layer's lightning indexer scores the previous tokens with index_n_heads heads of
  // index_head_dim and MLA attends the index_topk best of them only.
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;  // one token's index key (cached beside the MLA latent)
  int64_t index_topk = 0;
  RopeLayout index_rope_layout = RopeLayout::kRotateHalf;  // of the indexer's rope dims; from the architecture
  // GLM-5: per layer, kFull or kShared (cross-layer top-k sharing); layer 0 is always full.
  // Empty: every layer full. has_indexer() is the one place that reads it.
  std::vector<IndexerType> indexer_types;

  // Mixture of experts (Qwen3-MoE, Mixtral, DeepSeek-V3; moe.h). num_experts == 0: every layer is dense.
  // Missing fields take the architecture's transformers config defaults. Mixtral: every layer MoE,
  // moe_intermediate_size = intermediate_size, norm_topk_prob always true.
  int64_t num_experts = 0;            // routed experts per MoE layer (DeepSeek's n_routed_experts,
                                      // Mixtral's num_local_experts)
  int64_t num_experts_per_tok = 0;    // k: experts each token runs
  int64_t moe_intermediate_size = 0;  // one expert's intermediate width
  bool norm_topk_prob = false;        // divide the k routing weights by their sum
  int64_t decoder_sparse_step = 1;    // every decoder_sparse_step-th layer is MoE ...
  std::vector<int64_t> mlp_only_layers;  // ... except these, which keep the dense MLP (intermediate_size)
  int64_t first_k_dense_replace = 0;  // DeepSeek: layers below this keep the dense MLP
  RouterKind router = RouterKind::kSoftmaxTopK;
  // kSigmoidGroupLimited only: experts form n_group groups, tokens choose within topk_group of them.
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;  // multiplies the routing weights
  int64_t n_shared_experts = 0;        // one shared MLP of moe_intermediate_size * n_shared_experts, every token

  // config.json's quantization_config: how the checkpoint's FP8 weights are scaled
  // (fp8_checkpoint.h); kNone for a plain checkpoint. The loader dequantizes, so nothing else reads it.
  QuantizationConfig quantization;

  int64_t q_size() const { return num_attention_heads * head_dim; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }  // one token's keys
  int64_t value_head_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  int64_t v_size() const { return num_key_value_heads * value_head_dim(); }  // one token's values
  // The row of the architecture table (architecture.h) this config's family is.
  const Architecture& family() const;
  bool is_mla() const { return kv_lora_rank > 0; }
  // Layers carry a lightning indexer and attend a top-k subset of the tokens (DeepSeek-V3.2).
  bool has_sparse_attention() const { return index_topk > 0; }
  // Layer `layer` runs its own indexer (and caches index keys): DSA and not a "shared" layer.
  // Layers past indexer_types (DeepSeek's MTP modules, stored after the main layers) are full.
  bool has_indexer(int64_t layer) const;
  // Dimensions of a head that RoPE rotates (the rope part under MLA, else all of them).
  int64_t rope_dim() const { return is_mla() ? qk_rope_head_dim : head_dim; }
  // Layer `layer` runs the mixture of experts instead of the dense MLP (transformers'
  // Qwen3MoeDecoderLayer rule: experts exist, (layer + 1) % decoder_sparse_step == 0, and the
  // layer is not in mlp_only_layers; DeepseekV3DecoderLayer's: layer >= first_k_dense_replace;
  // Mixtral's: every layer, which the defaults of those fields give).
  bool is_moe_layer(int64_t layer) const;
  // At least one layer is MoE.
  bool is_moe() const;

  // Parses config.json content; `source` names the file in error messages.
  static ModelConfig from_json(const nlohmann::json& json, const std::string& source = "config.json");
  static ModelConfig from_dir(const std::filesystem::path& model_dir);
  // The config.json a HF model directory would carry for this config (inverse of from_json).
  nlohmann::json to_json() const;
};

// True for the architectures this build can load (the config.json "architectures" names).
bool is_supported_architecture(const std::string& architecture);
// "llama" for LlamaForCausalLM etc.; throws Error listing the supported ones otherwise.
std::string model_type_for(const std::string& architecture);
// The architecture a name stands for: a model_type ("qwen3") or an architecture name
// ("Qwen3ForCausalLM"); nullopt when unsupported.
std::optional<std::string> architecture_named(const std::string& name);
// "llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v3, ...": the model types, for messages.
std::string supported_model_types();

}  // namespace tachyon::model
