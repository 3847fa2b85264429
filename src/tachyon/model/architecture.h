// The architecture table: one row per Hugging Face architecture this build loads, the one place
// that says how a family differs (model_config.cpp holds the rows beside the parsers they name).
// Everything that used to compare model_type strings asks the row instead: config parsing and
// defaults, the config.json fields written back, the checkpoint's MoE tensor names, which
// make-model presets fit, and the layer kinds (attention, MLP, indexer) a model's layers take.
// Adding a dense-variant family is a row here, a preset (model_presets.cpp) and its goldens.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tachyon::model {

struct ModelConfig;

enum class AttentionKind { kDense, kLatent };  // q/k/v heads, or DeepSeek's multi-head latent attention
enum class MlpKind { kDense, kExperts };       // per layer: gated MLP, or a mixture of experts

// How a family's checkpoints name a MoE layer's tensors: the block's module, and one expert's
// gate, up and down projections under "{block}.experts.{e}.".
struct MoeTensorNames {
  const char* block = "mlp";
  const char* gate = "gate_proj";
  const char* up = "up_proj";
  const char* down = "down_proj";
};

// Fallbacks of the fields every family reads, as the family's transformers config has them.
struct ConfigDefaults {
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 4096;
  double rope_theta = 10000.0;
};

struct Architecture {
  const char* name;        // config.json "architectures"[0], e.g. "Qwen3ForCausalLM"
  const char* model_type;  // e.g. "qwen3"
  AttentionKind attention = AttentionKind::kDense;
  bool sparse_indexer = false;       // DeepSeek sparse attention's indexer (V3.2, GLM-5)
  bool experts = false;              // its layers may be mixtures of experts
  bool experts_every_layer = false;  // every layer is, each expert intermediate_size wide (Mixtral)
  bool shared_indexer_layers = false;  // layers may reuse an earlier layer's top-k (GLM-5's indexer_types)
  bool qkv_bias_always = false;      // q/k/v biases by construction, o_proj none (Qwen2)
  bool qk_norm = false;              // per-head q/k RMSNorm (Qwen3)
  bool mlp_bias_field = false;       // config.json's mlp_bias applies (Llama)
  bool sliding_window_field = false; // config.json's sliding_window applies (Mistral, Mixtral)
  ConfigDefaults defaults;
  MoeTensorNames moe_names;
  // The family's own config.json fields: read into / written from a ModelConfig whose common
  // fields are already set. Null: none.
  void (*parse_family)(const nlohmann::json& json, const std::string& source, ModelConfig& config) = nullptr;
  void (*write_family)(const ModelConfig& config, nlohmann::json& json) = nullptr;
  const char* presets = "";  // the make-model presets of its shape, for messages ("" : any dense preset)
};

// Every row, in the order `--arch` lists them.
std::span<const Architecture> architectures();
// The row of an architecture name or a model_type; nullptr when this build has none.
const Architecture* find_architecture(const std::string& name);
// The row of a supported architecture name; throws Error listing the supported ones otherwise.
const Architecture& architecture_of(const std::string& name);

}  // namespace tachyon::model
