// ModelConfig: the typed form of a Hugging Face config.json for the decoder families
// (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE). Parsed and validated once; immutable afterwards. The
// architectures differ only in fields here (biases, q/k norm, sliding window, experts), so one
// forward serves them all; see dense_model.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tachyon::model {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  // llama3 only: frequencies with wavelengths between original_max_position / high_freq_factor
  // and original_max_position / low_freq_factor are interpolated smoothly.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture;  // as in config.json "architectures"[0], e.g. "Qwen3ForCausalLM"
  std::string model_type;    // "llama", "mistral", "qwen2", "qwen3", "qwen3_moe"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // config "head_dim" when given, else hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;       // Qwen2 always; Llama/Qwen3 when attention_bias is true
  bool o_proj_bias = false;    // Llama/Qwen3 attention_bias covers o_proj too; Qwen2 never
  bool mlp_bias = false;       // Llama's mlp_bias
  bool qk_norm = false;        // Qwen3: RMSNorm over head_dim on q and k before RoPE
  std::optional<int64_t> sliding_window;  // Mistral: a query sees the last `sliding_window` keys
  std::string torch_dtype;     // informative: the dtype the checkpoint was saved in
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;

  // Mixture of experts (Qwen3-MoE; moe.h). num_experts == 0: every layer is dense. Missing
  // fields take Qwen3MoeConfig's defaults, as transformers does.
  int64_t num_experts = 0;            // routed experts per MoE layer (no shared expert)
  int64_t num_experts_per_tok = 0;    // k: experts each token runs
  int64_t moe_intermediate_size = 0;  // one expert's intermediate width
  bool norm_topk_prob = false;        // divide the k routing weights by their sum
  int64_t decoder_sparse_step = 1;    // every decoder_sparse_step-th layer is MoE ...
  std::vector<int64_t> mlp_only_layers;  // ... except these, which keep the dense MLP (intermediate_size)

  int64_t q_size() const { return num_attention_heads * head_dim; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }
  // Layer `layer` runs the mixture of experts instead of the dense MLP (transformers'
  // Qwen3MoeDecoderLayer rule: experts exist, (layer + 1) % decoder_sparse_step == 0, and the
  // layer is not in mlp_only_layers).
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
// "llama, mistral, qwen2, qwen3, qwen3_moe": the model types, for messages.
std::string supported_model_types();

}  // namespace tachyon::model
