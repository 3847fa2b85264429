#include "tachyon/model/model_config.h"

#include "tachyon/model/architecture.h"

#include <algorithm>
#include <array>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"

namespace tachyon::model {
namespace {

// What DeepSeek-V3, DeepSeek-V3.2 and GLM-5 differ in: the defaults of the fields whose
// transformers config defaults differ between DeepSeek-V3(.2) (as read here: q_lora_rank absent
// means a plain q_proj) and GLM-5 (GlmMoeDsaConfig), and GLM-5's fixed interleaved rope (model and
// indexer) and per-layer indexer types. DeepSeek-V3.2 is V3 plus the sparse-attention indexer, and
// GLM-5 is V3.2 with these differences: every V3 field applies to all three.
struct LatentFamily {
  int64_t q_lora_rank, qk_nope_head_dim, v_head_dim, n_group, topk_group, index_n_heads;
  bool glm;
};
constexpr LatentFamily kDeepseekFamily{0, 128, 128, 8, 4, 64, false};
constexpr LatentFamily kGlmFamily{2048, 192, 256, 1, 1, 32, true};

std::string supported_list() {
  std::string out;
  for (const Architecture& a : architectures()) {
    if (!out.empty()) out += ", ";
    out += a.name;
  }
  return out;
}

// A required positive integer field, with an error naming the file and the field.
int64_t required_int(const nlohmann::json& json, const char* key, const std::string& source) {
  TACHYON_CHECK(json.contains(key) && json[key].is_number_integer())
      << source << ": field '" << key << "' is missing or not an integer";
  int64_t value = json[key].get<int64_t>();
  TACHYON_CHECK(value > 0) << source << ": field '" << key << "' must be positive, got " << value;
  return value;
}

template <typename T>
T optional_value(const nlohmann::json& json, const char* key, T fallback) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  return json[key].get<T>();
}

// An optional integer field of at least `minimum`, `fallback` when absent or null.
int64_t optional_int(const nlohmann::json& json, const char* key, int64_t fallback, int64_t minimum,
                     const std::string& source) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  TACHYON_CHECK(json[key].is_number_integer()) << source << ": field '" << key << "' must be an integer";
  const int64_t value = json[key].get<int64_t>();
  TACHYON_CHECK(value >= minimum) << source << ": field '" << key << "' must be at least " << minimum << ", got "
                                  << value;
  return value;
}

// Qwen3-MoE's expert fields. Absent ones take Qwen3MoeConfig's defaults (128 experts, top-8,
// 768 wide, no renormalization, every layer sparse), so we read a config as transformers does.
void parse_moe(const nlohmann::json& json, const std::string& source, ModelConfig& c) {
  c.num_experts = optional_int(json, "num_experts", 128, 0, source);
  c.num_experts_per_tok = optional_int(json, "num_experts_per_tok", 8, 1, source);
  c.moe_intermediate_size = optional_int(json, "moe_intermediate_size", 768, 1, source);
  c.decoder_sparse_step = optional_int(json, "decoder_sparse_step", 1, 1, source);
  if (json.contains("norm_topk_prob") && !json["norm_topk_prob"].is_null()) {
    TACHYON_CHECK(json["norm_topk_prob"].is_boolean()) << source << ": field 'norm_topk_prob' must be true or false";
    c.norm_topk_prob = json["norm_topk_prob"].get<bool>();
  }
  if (json.contains("mlp_only_layers") && !json["mlp_only_layers"].is_null()) {
    TACHYON_CHECK(json["mlp_only_layers"].is_array())
        << source << ": field 'mlp_only_layers' must be a list of layer indices";
    for (const auto& layer : json["mlp_only_layers"]) {
      TACHYON_CHECK(layer.is_number_integer() && layer.get<int64_t>() >= 0 &&
                    layer.get<int64_t>() < c.num_hidden_layers)
          << source << ": mlp_only_layers entry " << layer.dump() << " is not a layer index in [0, "
          << c.num_hidden_layers << ")";
      c.mlp_only_layers.push_back(layer.get<int64_t>());
    }
  }
  if (c.num_experts > 0) {
    TACHYON_CHECK(c.num_experts_per_tok <= c.num_experts)
        << source << ": num_experts_per_tok (" << c.num_experts_per_tok << ") exceeds num_experts (" << c.num_experts
        << ")";
  }
  TACHYON_CHECK(!optional_value<bool>(json, "use_sliding_window", false))
      << source << ": Qwen3-MoE use_sliding_window=true is not supported yet";
}

// Mixtral's expert fields: every layer is MoE, each of num_local_experts experts is
// intermediate_size wide, and the router always renormalizes its top-k (MixtralTopKRouter: the
// kSoftmaxTopK router with norm_topk_prob). Absent fields take MixtralConfig's defaults (8
// experts, top-2). router_jitter_noise, router_aux_loss_coef and output_router_logits only act in
// training and are ignored; Mixtral's attention has no biases whatever attention_bias says.
void parse_mixtral(const nlohmann::json& json, const std::string& source, ModelConfig& c) {
  c.router = RouterKind::kSoftmaxTopK;
  c.norm_topk_prob = true;
  c.num_experts = optional_int(json, "num_local_experts", 8, 1, source);
  c.num_experts_per_tok = optional_int(json, "num_experts_per_tok", 2, 1, source);
  c.moe_intermediate_size = c.intermediate_size;
  TACHYON_CHECK(c.num_experts_per_tok <= c.num_experts)
      << source << ": num_experts_per_tok (" << c.num_experts_per_tok << ") exceeds num_local_experts ("
      << c.num_experts << ")";
  c.qkv_bias = false;
  c.o_proj_bias = false;
}

// DeepSeek-V3's latent attention and expert fields; absent ones take DeepseekV3Config's defaults.
// head_dim becomes the query/key head width (nope + rope): what attention and the KV cache see.
void parse_deepseek(const nlohmann::json& json, const std::string& source, ModelConfig& c, const LatentFamily& defaults) {
  c.q_lora_rank = json.contains("q_lora_rank") && json["q_lora_rank"].is_null()
                      ? 0  // null: plain q_proj
                      : optional_int(json, "q_lora_rank", defaults.q_lora_rank, 1, source);
  c.kv_lora_rank = optional_int(json, "kv_lora_rank", 512, 1, source);
  c.qk_nope_head_dim = optional_int(json, "qk_nope_head_dim", defaults.qk_nope_head_dim, 1, source);
  c.qk_rope_head_dim = optional_int(json, "qk_rope_head_dim", 64, 2, source);
  c.v_head_dim = optional_int(json, "v_head_dim", defaults.v_head_dim, 1, source);
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  TACHYON_CHECK(c.qk_rope_head_dim % 2 == 0) << source << ": qk_rope_head_dim must be even for RoPE, got "
                                             << c.qk_rope_head_dim;
  // transformers sets head_dim = qk_rope_head_dim and sizes the rotary embedding from it; another
  // value in the file would change the frequencies, so we refuse rather than guess.
  if (json.contains("head_dim") && !json["head_dim"].is_null()) {
    TACHYON_CHECK(json["head_dim"] == c.qk_rope_head_dim)
        << source << ": field 'head_dim' (" << json["head_dim"].dump() << ") must equal qk_rope_head_dim ("
        << c.qk_rope_head_dim << ") for " << c.model_type;
  }
  TACHYON_CHECK(c.num_key_value_heads == c.num_attention_heads)
      << source << ": " << c.model_type << " needs num_key_value_heads == num_attention_heads (MLA gives every head its own "
      << "keys), got " << c.num_key_value_heads << " and " << c.num_attention_heads;
  TACHYON_CHECK(!optional_value<bool>(json, "attention_bias", false))
      << source << ": " << c.model_type << " attention_bias=true is not supported";
  c.rope_interleave = optional_value<bool>(json, "rope_interleave", true);
  // GlmMoeDsaAttention always applies the interleaved rope and has no such field: a file that
  // says otherwise is not one transformers would run as it reads.
  TACHYON_CHECK(!defaults.glm || c.rope_interleave)
      << source << ": glm_moe_dsa always uses the interleaved rope layout; 'rope_interleave': false is not supported";
  // GLM-5's config.json also says "indexer_rope_interleave": true, which GlmMoeDsaIndexer assumes.
  TACHYON_CHECK(!defaults.glm || optional_value<bool>(json, "indexer_rope_interleave", true))
      << source << ": glm_moe_dsa's indexer always uses the interleaved rope layout; 'indexer_rope_interleave': "
      << "false is not supported";
  c.num_nextn_predict_layers = optional_int(json, "num_nextn_predict_layers", 0, 0, source);

  c.router = RouterKind::kSigmoidGroupLimited;
  c.num_experts = optional_int(json, "n_routed_experts", 256, 0, source);
  c.num_experts_per_tok = optional_int(json, "num_experts_per_tok", 8, 1, source);
  c.moe_intermediate_size = optional_int(json, "moe_intermediate_size", 2048, 1, source);
  c.n_shared_experts = optional_int(json, "n_shared_experts", 1, 0, source);
  c.n_group = optional_int(json, "n_group", defaults.n_group, 1, source);
  c.topk_group = optional_int(json, "topk_group", defaults.topk_group, 1, source);
  c.first_k_dense_replace = optional_int(json, "first_k_dense_replace", 3, 0, source);
  c.routed_scaling_factor = optional_value<double>(json, "routed_scaling_factor", 2.5);
  c.norm_topk_prob = optional_value<bool>(json, "norm_topk_prob", true);
  if (c.num_experts > 0) {
    TACHYON_CHECK(c.num_experts % c.n_group == 0 && c.num_experts / c.n_group >= 2)
        << source << ": n_routed_experts (" << c.num_experts << ") must split into n_group (" << c.n_group
        << ") groups of at least 2 experts (a group scores by its top 2)";
    TACHYON_CHECK(c.topk_group <= c.n_group)
        << source << ": topk_group (" << c.topk_group << ") exceeds n_group (" << c.n_group << ")";
    TACHYON_CHECK(c.num_experts_per_tok <= c.num_experts)
        << source << ": num_experts_per_tok (" << c.num_experts_per_tok << ") exceeds n_routed_experts ("
        << c.num_experts << ")";
  }
  const std::string scoring = optional_value<std::string>(json, "scoring_func", "sigmoid");
  TACHYON_CHECK(scoring == "sigmoid") << source << ": scoring_func '" << scoring << "' is not supported (sigmoid)";
}

// The MLP pattern of DeepseekV32Config / GlmMoeDsaConfig: "mlp_layer_types" (["dense" | "sparse"]
// per layer) overrides first_k_dense_replace when given. We hold the pattern as
// first_k_dense_replace, so a list must be dense layers then sparse ones; it then sets it.
void parse_mlp_layer_types(const nlohmann::json& json, const std::string& source, ModelConfig& c) {
  if (!json.contains("mlp_layer_types") || json["mlp_layer_types"].is_null()) return;
  const nlohmann::json& types = json["mlp_layer_types"];
  TACHYON_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == c.num_hidden_layers)
      << source << ": field 'mlp_layer_types' must list 'dense' or 'sparse' for each of the " << c.num_hidden_layers
      << " layers";
  int64_t dense = 0;
  for (size_t layer = 0; layer < types.size(); ++layer) {
    TACHYON_CHECK(types[layer] == "dense" || types[layer] == "sparse")
        << source << ": mlp_layer_types entry " << types[layer].dump() << " is not 'dense' or 'sparse'";
    if (types[layer] == "sparse") continue;
    TACHYON_CHECK(dense == static_cast<int64_t>(layer))
        << source << ": mlp_layer_types " << types.dump() << " has a dense layer after a sparse one; only dense "
        << "layers first, then sparse ones (first_k_dense_replace) are supported";
    ++dense;
  }
  c.first_k_dense_replace = dense;
}

// GLM-5's per-layer indexer mode, read as GlmMoeDsaConfig does: "indexer_types" (["full" |
// "shared"] per layer), else "index_topk_pattern" ("FSS..." or such a list), else the schedule of
// index_topk_freq (default 1) and index_skip_topk_offset (default 2): layer i is full when
// max(i - offset + 1, 0) % freq == 0, so by default every layer is. A shared layer reuses the
// previous full layer's selection, so layer 0 must be full.
void parse_indexer_types(const nlohmann::json& json, const std::string& source, ModelConfig& c) {
  std::vector<std::string> names;
  if (json.contains("indexer_types") && !json["indexer_types"].is_null()) {
    TACHYON_CHECK(json["indexer_types"].is_array()) << source << ": field 'indexer_types' must be a list";
    for (const auto& type : json["indexer_types"]) names.push_back(type.is_string() ? type.get<std::string>() : "?");
  } else if (json.contains("index_topk_pattern") && !json["index_topk_pattern"].is_null()) {
    const nlohmann::json& pattern = json["index_topk_pattern"];
    if (pattern.is_string()) {
      for (char letter : pattern.get<std::string>()) {
        names.push_back(letter == 'F' ? "full" : letter == 'S' ? "shared" : std::string(1, letter));
      }
    } else {
      TACHYON_CHECK(pattern.is_array()) << source << ": field 'index_topk_pattern' must be a string or a list";
      for (const auto& type : pattern) names.push_back(type.is_string() ? type.get<std::string>() : "?");
    }
  } else {
    const int64_t freq = std::max<int64_t>(optional_value<int64_t>(json, "index_topk_freq", 1), 1);
    const int64_t offset = optional_value<int64_t>(json, "index_skip_topk_offset", 2);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      names.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? "full" : "shared");
    }
  }
  TACHYON_CHECK(static_cast<int64_t>(names.size()) == c.num_hidden_layers)
      << source << ": the indexer types (indexer_types / index_topk_pattern) list " << names.size()
      << " layers, the model has " << c.num_hidden_layers;
  c.indexer_types.clear();
  for (const std::string& name : names) {
    TACHYON_CHECK(name == "full" || name == "shared")
        << source << ": indexer type '" << name << "' is not 'full' or 'shared' (F or S in index_topk_pattern)";
    c.indexer_types.push_back(name == "full" ? IndexerType::kFull : IndexerType::kShared);
  }
  TACHYON_CHECK(c.indexer_types.empty() || c.indexer_types[0] == IndexerType::kFull)
      << source << ": layer 0's indexer type is 'shared', but a shared layer reuses the previous full layer's top-k "
      << "and layer 0 has none before it";
}

// The indexer fields of DeepSeek-V3.2 and GLM-5; absent ones take DeepseekV32Config's defaults
// (64 heads of 128, top-2048) or GlmMoeDsaConfig's (32 heads). transformers builds the indexer's
// query from the q LoRA latent, so it needs one.
void parse_sparse_attention(const nlohmann::json& json, const std::string& source, ModelConfig& c,
                            const LatentFamily& family) {
  c.index_n_heads = optional_int(json, "index_n_heads", family.index_n_heads, 1, source);
  c.index_head_dim = optional_int(json, "index_head_dim", 128, 1, source);
  c.index_topk = optional_int(json, "index_topk", 2048, 1, source);
  TACHYON_CHECK(c.q_lora_rank > 0) << source << ": " << c.model_type << " needs q_lora_rank (the indexer's query "
                                   << "reads the q LoRA latent); got null";
  parse_mlp_layer_types(json, source, c);
  if (family.glm) {
    c.index_rope_layout = RopeLayout::kInterleaved;  // GlmMoeDsaIndexer: apply_rotary_pos_emb_interleave
    parse_indexer_types(json, source, c);
  }
  TACHYON_CHECK(c.index_head_dim >= c.qk_rope_head_dim)
      << source << ": index_head_dim (" << c.index_head_dim << ") must hold the qk_rope_head_dim ("
      << c.qk_rope_head_dim << ") rotary dims of the index query and key";
}

void deepseek_to_json(const ModelConfig& c, nlohmann::json& j) {
  j["q_lora_rank"] = c.q_lora_rank > 0 ? nlohmann::json(c.q_lora_rank) : nlohmann::json(nullptr);
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["rope_interleave"] = c.rope_interleave;
  if (c.num_nextn_predict_layers > 0) j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["n_routed_experts"] = c.num_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["n_shared_experts"] = c.n_shared_experts;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["attention_dropout"] = 0.0;
  if (c.has_sparse_attention()) {
    j["index_n_heads"] = c.index_n_heads;
    j["index_head_dim"] = c.index_head_dim;
    j["index_topk"] = c.index_topk;
  }
  if (!c.indexer_types.empty()) {
    nlohmann::json& types = j["indexer_types"] = nlohmann::json::array();
    for (IndexerType type : c.indexer_types) types.push_back(type == IndexerType::kFull ? "full" : "shared");
  }
}

// The family hooks of the architecture table below.
void parse_deepseek_v3(const nlohmann::json& json, const std::string& source, ModelConfig& c) {
  parse_deepseek(json, source, c, kDeepseekFamily);
}
void parse_deepseek_v32(const nlohmann::json& json, const std::string& source, ModelConfig& c) {
  parse_deepseek(json, source, c, kDeepseekFamily);
  parse_sparse_attention(json, source, c, kDeepseekFamily);
}
void parse_glm_moe_dsa(const nlohmann::json& json, const std::string& source, ModelConfig& c) {
  parse_deepseek(json, source, c, kGlmFamily);
  parse_sparse_attention(json, source, c, kGlmFamily);
}
void parse_qwen2(const nlohmann::json& json, const std::string& source, ModelConfig&) {
  TACHYON_CHECK(!optional_value<bool>(json, "use_sliding_window", false))
      << source << ": Qwen2 use_sliding_window=true is not supported yet";
}

void write_qwen2(const ModelConfig&, nlohmann::json& j) {
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
}
void write_mixtral(const ModelConfig& c, nlohmann::json& j) {  // every field MixtralConfig reads; intermediate_size is each expert's width
  j["num_local_experts"] = c.num_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = 0.001;  // training only, as the next two; written so the file reads like a real one
  j["router_jitter_noise"] = 0.0;
  j["attention_dropout"] = 0.0;
}
void write_qwen3_moe(const ModelConfig& c, nlohmann::json& j) {  // every field Qwen3MoeConfig reads, so no default of its decides
  j["num_experts"] = c.num_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["decoder_sparse_step"] = c.decoder_sparse_step;
  j["mlp_only_layers"] = c.mlp_only_layers;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = 0.001;  // training only; written so the file reads like a real one
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
}

constexpr ConfigDefaults kCommonDefaults{1e-6, 4096, 10000.0};
constexpr MoeTensorNames kMlpExperts{};
constexpr const char* kDeepseekPresets = "tiny-deepseek, tiny-deepseek-mtp, tiny-deepseek-noqlora, deepseek-v3-reduced";

// The table (architecture.h). Latent families' parse_family runs before the common fields (it
// sets head_dim, which they derive); dense families' after them (Mixtral overrides the biases).
constexpr Architecture kArchitectures[] = {
    {.name = "LlamaForCausalLM", .model_type = "llama", .mlp_bias_field = true, .defaults = kCommonDefaults},
    {.name = "MistralForCausalLM", .model_type = "mistral", .sliding_window_field = true, .defaults = kCommonDefaults},
    {.name = "Qwen2ForCausalLM", .model_type = "qwen2", .qkv_bias_always = true, .defaults = kCommonDefaults,
     .parse_family = parse_qwen2, .write_family = write_qwen2},
    {.name = "Qwen3ForCausalLM", .model_type = "qwen3", .qk_norm = true, .defaults = kCommonDefaults},
    {.name = "Qwen3MoeForCausalLM", .model_type = "qwen3_moe", .experts = true, .qk_norm = true,
     .defaults = kCommonDefaults, .moe_names = kMlpExperts, .parse_family = parse_moe, .write_family = write_qwen3_moe,
     .presets = "tiny-moe, tiny-moe-nonorm, qwen3-30b-a3b"},
    {.name = "MixtralForCausalLM", .model_type = "mixtral", .experts = true, .experts_every_layer = true,
     .sliding_window_field = true,
     .defaults = {1e-5, 4096 * 32, 1e6}, .moe_names = {"block_sparse_moe", "w1", "w3", "w2"},  // w1 gate, w3 up, w2 down
     .parse_family = parse_mixtral, .write_family = write_mixtral,
     .presets = "tiny-mixtral, tiny-gpu-mixtral, tiny-gpu-mixtral-all, mixtral-8x7b"},
    {.name = "DeepseekV3ForCausalLM", .model_type = "deepseek_v3", .attention = AttentionKind::kLatent, .experts = true,
     .defaults = kCommonDefaults, .moe_names = kMlpExperts, .parse_family = parse_deepseek_v3,
     .write_family = deepseek_to_json, .presets = kDeepseekPresets},
    {.name = "DeepseekV32ForCausalLM", .model_type = "deepseek_v32", .attention = AttentionKind::kLatent,
     .sparse_indexer = true, .experts = true, .defaults = kCommonDefaults, .moe_names = kMlpExperts,
     .parse_family = parse_deepseek_v32, .write_family = deepseek_to_json, .presets = "tiny-dsa, deepseek-v32-reduced"},
    {.name = "GlmMoeDsaForCausalLM", .model_type = "glm_moe_dsa", .attention = AttentionKind::kLatent,
     .sparse_indexer = true, .experts = true, .shared_indexer_layers = true, .defaults = {1e-5, 202752, 10000.0}, .moe_names = kMlpExperts,
     .parse_family = parse_glm_moe_dsa, .write_family = deepseek_to_json, .presets = "tiny-glm-dsa, glm-5-reduced"},
};

std::optional<int64_t> optional_token_id(const nlohmann::json& json, const char* key) {
  if (!json.contains(key) || json[key].is_null()) return std::nullopt;
  const auto& value = json[key];
  if (value.is_array()) {  // some configs list several eos ids; the first is the canonical one
    if (value.empty()) return std::nullopt;
    return value[0].get<int64_t>();
  }
  return value.get<int64_t>();
}

// Checkpoints written by transformers 5 carry "rope_parameters" (type and theta together);
// older ones carry "rope_scaling" beside "rope_theta". Both spell the fields the same way.
const nlohmann::json* rope_parameters(const nlohmann::json& json) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (json.contains(key) && json[key].is_object()) return &json[key];
  }
  return nullptr;
}

// yarn_allowed: only DeepSeek-V3's forward applies YaRN's cos/sin and softmax factors so far.
RopeScaling parse_rope_scaling(const nlohmann::json& json, const std::string& source, bool yarn_allowed) {
  RopeScaling scaling;
  const nlohmann::json* parameters = rope_parameters(json);
  if (parameters == nullptr) return scaling;
  const auto& rs = *parameters;
  std::string type = rs.contains("rope_type") ? rs["rope_type"].get<std::string>()
                     : rs.contains("type")    ? rs["type"].get<std::string>()
                                              : "default";
  if (type == "default") return scaling;
  TACHYON_CHECK(rs.contains("factor")) << source << ": rope_scaling '" << type << "' needs 'factor'";
  scaling.factor = rs["factor"].get<double>();
  if (type == "linear") {
    scaling.type = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    scaling.type = RopeScalingType::kLlama3;
    scaling.low_freq_factor = optional_value<double>(rs, "low_freq_factor", 1.0);
    scaling.high_freq_factor = optional_value<double>(rs, "high_freq_factor", 4.0);
    scaling.original_max_position_embeddings =
        optional_value<int64_t>(rs, "original_max_position_embeddings", 8192);
    TACHYON_CHECK(scaling.high_freq_factor > scaling.low_freq_factor)
        << source << ": llama3 rope_scaling needs high_freq_factor > low_freq_factor";
  } else if (type == "yarn" && yarn_allowed) {
    // Absent or null fields take transformers' defaults (beta_fast 32, beta_slow 1, the model's
    // max_position_embeddings as the original context, truncation on).
    scaling.type = RopeScalingType::kYarn;
    scaling.original_max_position_embeddings = optional_value<int64_t>(
        rs, "original_max_position_embeddings", optional_value<int64_t>(json, "max_position_embeddings", 4096));
    scaling.beta_fast = optional_value<double>(rs, "beta_fast", 32.0);
    scaling.beta_slow = optional_value<double>(rs, "beta_slow", 1.0);
    scaling.mscale = optional_value<double>(rs, "mscale", 0.0);
    scaling.mscale_all_dim = optional_value<double>(rs, "mscale_all_dim", 0.0);
    scaling.attention_factor = optional_value<double>(rs, "attention_factor", 0.0);
    scaling.truncate = optional_value<bool>(rs, "truncate", true);
    TACHYON_CHECK(scaling.original_max_position_embeddings > 0)
        << source << ": yarn rope_scaling needs a positive original_max_position_embeddings";
  } else {
    TACHYON_FAIL() << source << ": unsupported rope_scaling type '" << type
                   << "' (supported: default, linear, llama3; yarn for deepseek_v3, deepseek_v32 and glm_moe_dsa)";
  }
  return scaling;
}

}  // namespace

std::span<const Architecture> architectures() { return kArchitectures; }

const Architecture* find_architecture(const std::string& name) {
  for (const Architecture& a : kArchitectures) {
    if (name == a.name || name == a.model_type) return &a;
  }
  return nullptr;
}

const Architecture& architecture_of(const std::string& name) {
  const Architecture* a = find_architecture(name);
  TACHYON_CHECK(a != nullptr) << "unknown architecture '" << name << "' (supported: " << supported_list() << ")";
  return *a;
}

const Architecture& ModelConfig::family() const { return architecture_of(architecture); }

bool is_supported_architecture(const std::string& architecture) {
  const Architecture* a = find_architecture(architecture);
  return a != nullptr && architecture == a->name;
}

std::optional<std::string> architecture_named(const std::string& name) {
  const Architecture* a = find_architecture(name);
  if (a == nullptr) return std::nullopt;
  return std::string(a->name);
}

std::string supported_model_types() {
  std::string out;
  for (const Architecture& a : kArchitectures) out += std::string(out.empty() ? "" : ", ") + a.model_type;
  return out;
}

std::string model_type_for(const std::string& architecture) { return architecture_of(architecture).model_type; }

ModelConfig ModelConfig::from_json(const nlohmann::json& json, const std::string& source) {
  TACHYON_CHECK(json.is_object()) << source << ": expected a JSON object";
  ModelConfig c;
  TACHYON_CHECK(json.contains("architectures") && json["architectures"].is_array() &&
                !json["architectures"].empty())
      << source << ": field 'architectures' is missing";
  c.architecture = json["architectures"][0].get<std::string>();
  TACHYON_CHECK(is_supported_architecture(c.architecture))
      << source << ": unknown architecture '" << c.architecture << "' (supported: " << supported_list()
      << ")";
  const Architecture& family = architecture_of(c.architecture);
  c.model_type = family.model_type;

  c.vocab_size = required_int(json, "vocab_size", source);
  c.hidden_size = required_int(json, "hidden_size", source);
  c.intermediate_size = required_int(json, "intermediate_size", source);
  c.num_hidden_layers = required_int(json, "num_hidden_layers", source);
  c.num_attention_heads = required_int(json, "num_attention_heads", source);
  c.num_key_value_heads = json.contains("num_key_value_heads") && !json["num_key_value_heads"].is_null()
                              ? required_int(json, "num_key_value_heads", source)
                              : c.num_attention_heads;
  TACHYON_CHECK(c.num_attention_heads % c.num_key_value_heads == 0)
      << source << ": num_attention_heads (" << c.num_attention_heads
      << ") must be a multiple of num_key_value_heads (" << c.num_key_value_heads << ")";
  if (family.attention == AttentionKind::kLatent) {
    family.parse_family(json, source, c);  // head_dim = qk_nope_head_dim + qk_rope_head_dim
  } else if (json.contains("head_dim") && !json["head_dim"].is_null()) {
    c.head_dim = required_int(json, "head_dim", source);
  } else {
    TACHYON_CHECK(c.hidden_size % c.num_attention_heads == 0)
        << source << ": hidden_size (" << c.hidden_size << ") is not divisible by num_attention_heads ("
        << c.num_attention_heads << ") and no head_dim is given";
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  TACHYON_CHECK(c.is_mla() || c.head_dim % 2 == 0) << source << ": head_dim must be even for RoPE, got " << c.head_dim;
  const ConfigDefaults& defaults = family.defaults;
  c.max_position_embeddings =
      optional_value<int64_t>(json, "max_position_embeddings", defaults.max_position_embeddings);
  c.rms_norm_eps = optional_value<double>(json, "rms_norm_eps", defaults.rms_norm_eps);
  c.rope_theta = optional_value<double>(json, "rope_theta", defaults.rope_theta);
  if (const nlohmann::json* parameters = rope_parameters(json); parameters && parameters->contains("rope_theta")) {
    c.rope_theta = (*parameters)["rope_theta"].get<double>();
  }
  c.rope_scaling = parse_rope_scaling(json, source, family.attention == AttentionKind::kLatent);
  c.tie_word_embeddings = optional_value<bool>(json, "tie_word_embeddings", false);
  c.torch_dtype = optional_value<std::string>(json, "torch_dtype", optional_value<std::string>(json, "dtype", ""));
  c.bos_token_id = optional_token_id(json, "bos_token_id");
  c.eos_token_id = optional_token_id(json, "eos_token_id");

  bool attention_bias = optional_value<bool>(json, "attention_bias", false);
  if (family.qkv_bias_always) {
    c.qkv_bias = true;  // Qwen2 has q/k/v biases by construction, o_proj none
  } else {
    c.qkv_bias = attention_bias;
    c.o_proj_bias = attention_bias;
  }
  c.mlp_bias = family.mlp_bias_field && optional_value<bool>(json, "mlp_bias", false);
  c.qk_norm = family.qk_norm;
  if (family.attention == AttentionKind::kDense && family.parse_family != nullptr) family.parse_family(json, source, c);
  if (family.sliding_window_field && json.contains("sliding_window") && !json["sliding_window"].is_null()) {
    c.sliding_window = required_int(json, "sliding_window", source);
  }
  if (json.contains("hidden_act")) {
    std::string act = json["hidden_act"].get<std::string>();
    TACHYON_CHECK(act == "silu") << source << ": hidden_act '" << act << "' is not supported (only silu)";
  }
  c.quantization = parse_quantization_config(json, source);
  return c;
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  const bool dense_only = std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end();
  return num_experts > 0 && layer >= first_k_dense_replace && (layer + 1) % decoder_sparse_step == 0 && !dense_only;
}

bool ModelConfig::has_indexer(int64_t layer) const {
  if (!has_sparse_attention()) return false;
  return layer < 0 || layer >= static_cast<int64_t>(indexer_types.size()) ||
         indexer_types[static_cast<size_t>(layer)] == IndexerType::kFull;
}

bool ModelConfig::is_moe() const {
  for (int64_t layer = 0; layer < num_hidden_layers; ++layer) {
    if (is_moe_layer(layer)) return true;
  }
  return false;
}

ModelConfig ModelConfig::from_dir(const std::filesystem::path& model_dir) {
  auto path = model_dir / "config.json";
  TACHYON_CHECK(std::filesystem::exists(path)) << "no config.json in " << model_dir.string();
  nlohmann::json json = read_json_file(path);
  std::string source = path.string();
  // ModelOpt's older exports say how they are quantized in a file of their own (fp8_checkpoint.h).
  const auto side_file = model_dir / kModeloptSideFile;
  if ((!json.contains("quantization_config") || json["quantization_config"].is_null()) &&
      std::filesystem::exists(side_file)) {
    json["quantization_config"] = quantization_config_from_side_file(read_json_file(side_file), side_file.string());
    source += " with " + side_file.string();
  }
  return from_json(json, source);
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j;
  j["architectures"] = {architecture};
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  if (!is_mla()) j["head_dim"] = head_dim;  // DeepseekV3Config derives its own from qk_rope_head_dim
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["torch_dtype"] = torch_dtype.empty() ? "float32" : torch_dtype;
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_id) j["eos_token_id"] = *eos_token_id;
  switch (rope_scaling.type) {
    case RopeScalingType::kNone: j["rope_scaling"] = nullptr; break;
    case RopeScalingType::kLinear:
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
      break;
    case RopeScalingType::kLlama3:
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", rope_scaling.factor},
                           {"low_freq_factor", rope_scaling.low_freq_factor},
                           {"high_freq_factor", rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
      break;
    case RopeScalingType::kYarn: {
      nlohmann::json& rs = j["rope_scaling"];
      rs = {{"rope_type", "yarn"},
            {"factor", rope_scaling.factor},
            {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings},
            {"beta_fast", rope_scaling.beta_fast},
            {"beta_slow", rope_scaling.beta_slow}};
      if (rope_scaling.mscale != 0.0) rs["mscale"] = rope_scaling.mscale;
      if (rope_scaling.mscale_all_dim != 0.0) rs["mscale_all_dim"] = rope_scaling.mscale_all_dim;
      if (rope_scaling.attention_factor != 0.0) rs["attention_factor"] = rope_scaling.attention_factor;
      if (!rope_scaling.truncate) rs["truncate"] = false;
      break;
    }
  }
  const Architecture& a = family();
  if (!a.qkv_bias_always) j["attention_bias"] = qkv_bias;
  if (a.mlp_bias_field) j["mlp_bias"] = mlp_bias;
  if (a.sliding_window_field) {
    j["sliding_window"] = sliding_window ? nlohmann::json(*sliding_window) : nlohmann::json(nullptr);
  }
  if (a.write_family != nullptr) a.write_family(*this, j);
  if (quantization.quantized()) j["quantization_config"] = quantization_config_to_json(quantization);
  return j;
}

}  // namespace tachyon::model
