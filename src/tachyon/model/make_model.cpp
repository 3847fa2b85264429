#include "tachyon/model/make_model.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <map>
#include <memory>
#include <numbers>
#include <set>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/model/architecture.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/safetensors.h"

namespace tachyon::model {
namespace {

constexpr int64_t kChunk = 1 << 16;  // elements drawn from one seeded stream

// splitmix64: tiny, fast and the same everywhere, which is all a weight generator needs.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
};

// How each tensor is drawn: mean + std * N(0, 1). Standard deviations are chosen so that a
// tiny random model has well-separated logits (greedy argmax is then stable under rounding).
struct Distribution {
  float mean = 0.0f;
  float std = 1.0f;
};

Distribution distribution_for(const std::string& name, const std::vector<int64_t>& shape) {
  if (name.ends_with("norm.weight")) return {1.0f, 0.1f};
  // DeepSeek's router score bias: on the sigmoid scores' scale, enough to change some choices.
  if (name.ends_with("e_score_correction_bias")) return {0.0f, 0.1f};
  if (name.ends_with(".bias")) return {0.0f, 0.1f};
  // Small next to the layer outputs, so that a tied LM head does not just echo the last token.
  if (name == "model.embed_tokens.weight") return {0.0f, 0.25f};
  return {0.0f, 1.0f / std::sqrt(static_cast<float>(shape.back()))};  // [out, in]: unit-variance outputs
}

// The name whose random stream a tensor is drawn from: its own, except an MTP module's embedding
// and head copies (model.layers.{L}.embed_tokens / shared_head.head), which DeepSeek-V3's
// checkpoint stores as copies of the main embedding and LM head and so draw the main ones' values.
std::string random_stream_name(const ModelConfig& c, const std::string& name) {
  if (!name.starts_with("model.layers.")) return name;
  const std::string main_head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  if (name.ends_with(".embed_tokens.weight")) return "model.embed_tokens.weight";
  if (name.ends_with(".shared_head.head.weight")) return main_head;
  return name;
}

// Fills `count` values; value i depends only on (seed, name, i), not on threads or order.
void fill_random(float* out, int64_t count, uint64_t seed, const std::string& name, Distribution dist) {
  const uint64_t tensor_seed = XXH64(name.data(), name.size(), seed);
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < (count + kChunk - 1) / kChunk; ++chunk) {
    SplitMix64 rng{tensor_seed ^ (static_cast<uint64_t>(chunk) * 0xd1b54a32d192ed03ull)};
    const int64_t end = std::min(count, (chunk + 1) * kChunk);
    for (int64_t i = chunk * kChunk; i < end; i += 2) {  // Box-Muller gives two normals per draw
      double radius = std::sqrt(-2.0 * std::log(rng.uniform()));
      double angle = 2.0 * std::numbers::pi * rng.uniform();
      out[i] = dist.mean + dist.std * static_cast<float>(radius * std::cos(angle));
      if (i + 1 < end) out[i + 1] = dist.mean + dist.std * static_cast<float>(radius * std::sin(angle));
    }
  }
}

// make-model's FP8 weights: the decoder layers' linear projections, as the FP8 releases quantize
// them (the indexer's weights_proj stays unquantized, as in DeepSeek-V3.2's).
bool is_quantized_linear(const std::string& name, const std::vector<int64_t>& shape) {
  static const std::set<std::string> kLinears = {"q_proj",    "k_proj",    "v_proj", "o_proj",    "q_a_proj",
                                                 "q_b_proj",  "kv_a_proj_with_mqa",  "kv_b_proj", "gate_proj",
                                                 "up_proj",   "down_proj", "w1",     "w2",        "w3",
                                                 "wq_b",      "wk"};
  if (shape.size() != 2 || !name.starts_with("model.layers.") || !name.ends_with(".weight")) return false;
  const std::string module = name.substr(0, name.size() - std::string_view(".weight").size());
  return kLinears.count(module.substr(module.rfind('.') + 1)) != 0;
}

// The quantization_config make-model writes for `format`.
QuantizationConfig quantization_for(WeightQuantization format, bool kv_cache_scales) {
  QuantizationConfig q;
  q.format = format;
  if (format != WeightQuantization::kFp8Block && format != WeightQuantization::kNone) q.not_quantized = {"lm_head"};
  // As NVIDIA's ModelOpt releases come: calibrated activation and KV-cache scales beside the weights.
  const bool modelopt = format == WeightQuantization::kModeloptFp8;
  q.static_activation_scales = modelopt;
  const bool compressed = format == WeightQuantization::kFp8Tensor || format == WeightQuantization::kFp8Channel;
  TACHYON_CHECK(!kv_cache_scales || compressed || modelopt)
      << "make-model: KV-cache scales go with fp8-tensor, fp8-channel or modelopt-fp8, not "
      << weight_quantization_name(format);
  q.kv_cache_scales = modelopt || kv_cache_scales;
  return q;
}

std::string resolve_arch(const std::string& arch) {
  std::optional<std::string> architecture = architecture_named(arch);
  TACHYON_CHECK(architecture) << "unknown --arch '" << arch << "' (supported: " << supported_model_types() << ")";
  return *architecture;
}

const ModelPreset& find_preset(const std::string& name) {
  std::string names;
  for (const auto& preset : model_presets()) {
    if (preset.name == name) return preset;
    names += (names.empty() ? "" : ", ") + preset.name;
  }
  TACHYON_FAIL() << "unknown --preset '" << name << "' (available: " << names << ")";
}

std::string token_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content")) return value["content"].get<std::string>();
  return "";
}

struct TokenizerFacts {
  int64_t vocab_size = 0;  // max id + 1 over the model vocab and added tokens
  std::optional<int64_t> bos_id, eos_id;
};

// Reads just what config.json needs from tokenizer.json and tokenizer_config.json.
TokenizerFacts read_tokenizer_facts(const std::filesystem::path& dir) {
  nlohmann::json tokenizer = read_json_file(dir / "tokenizer.json");
  std::map<std::string, int64_t> ids;
  TokenizerFacts facts;
  if (tokenizer.contains("model") && tokenizer["model"].contains("vocab")) {
    for (const auto& [token, id] : tokenizer["model"]["vocab"].items()) ids[token] = id.get<int64_t>();
  }
  if (tokenizer.contains("added_tokens")) {
    for (const auto& added : tokenizer["added_tokens"]) ids[added["content"].get<std::string>()] = added["id"].get<int64_t>();
  }
  for (const auto& [token, id] : ids) facts.vocab_size = std::max(facts.vocab_size, id + 1);
  TACHYON_CHECK(facts.vocab_size > 0) << (dir / "tokenizer.json").string() << ": no vocabulary found";
  if (std::filesystem::exists(dir / "tokenizer_config.json")) {
    nlohmann::json config = read_json_file(dir / "tokenizer_config.json");
    auto lookup = [&](const char* key) -> std::optional<int64_t> {
      if (!config.contains(key)) return std::nullopt;
      auto it = ids.find(token_text(config[key]));
      return it == ids.end() ? std::nullopt : std::optional<int64_t>(it->second);
    };
    facts.bos_id = lookup("bos_token");
    facts.eos_id = lookup("eos_token");
  }
  return facts;
}

}  // namespace

ModelConfig make_model_config(const MakeModelOptions& options) {
  const ModelPreset& preset = find_preset(options.preset);
  ModelConfig c = preset.shape;
  if (options.num_layers) {
    const int64_t n = *options.num_layers;
    TACHYON_CHECK(n >= 1 && n <= c.num_hidden_layers)
        << "--num-layers " << n << " must be between 1 and " << c.num_hidden_layers << " (preset '" << preset.name
        << "' has " << c.num_hidden_layers << " layers)";
    c.num_hidden_layers = n;
    if (!c.indexer_types.empty()) c.indexer_types.resize(static_cast<size_t>(n));
    std::erase_if(c.mlp_only_layers, [n](int64_t layer) { return layer >= n; });
  }
  c.architecture = resolve_arch(options.arch);
  c.model_type = model_type_for(c.architecture);
  if (!preset.only_arch.empty()) {
    TACHYON_CHECK(c.model_type == preset.only_arch)
        << "preset '" << preset.name << "' is for --arch " << preset.only_arch << ", not " << options.arch;
  }
  // The architecture decides what the checkpoint holds; the preset cannot contradict it.
  const Architecture& family = c.family();
  if (family.qkv_bias_always) {
    c.qkv_bias = true;
    c.o_proj_bias = false;
  }
  c.qk_norm = family.qk_norm;
  const bool latent = family.attention == AttentionKind::kLatent;
  // The dense-attention expert families route by softmax top-k (Mixtral: checked below).
  TACHYON_CHECK(!family.experts || latent || family.experts_every_layer ||
                (c.is_moe() && c.router == RouterKind::kSoftmaxTopK))
      << "preset '" << preset.name << "' has no experts; --arch " << family.model_type
      << " needs a mixture-of-experts preset (" << family.presets << ")";
  // Mixtral's config.json has one width (intermediate_size, each expert's), no dense layer, no
  // shared expert and a renormalized softmax router: a preset must be exactly that.
  bool every_layer_moe = c.num_experts > 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) every_layer_moe = every_layer_moe && c.is_moe_layer(l);
  TACHYON_CHECK(!family.experts_every_layer ||
                (every_layer_moe && c.router == RouterKind::kSoftmaxTopK && c.norm_topk_prob &&
                 c.n_shared_experts == 0 && c.moe_intermediate_size == c.intermediate_size))
      << "preset '" << preset.name << "' is not a Mixtral shape; --arch " << family.model_type
      << " needs a mixture-of-experts preset with every layer MoE (" << family.presets << ")";
  TACHYON_CHECK(latent == c.is_mla())
      << "preset '" << preset.name << "' and --arch " << options.arch << " disagree: --arch deepseek_v3 needs a "
      << "DeepSeek preset (" << architecture_of("deepseek_v3").presets << ") and those need it";
  TACHYON_CHECK(family.sparse_indexer == c.has_sparse_attention())
      << "preset '" << preset.name << "' and --arch " << options.arch << " disagree: --arch deepseek_v32 and "
      << "glm_moe_dsa need a sparse-attention preset (tiny-dsa, deepseek-v32-reduced; tiny-glm-dsa, glm-5-reduced) "
      << "and those need it";
  TACHYON_CHECK(family.shared_indexer_layers || c.indexer_types.empty())
      << "preset '" << preset.name << "' shares top-k across layers (indexer_types), which only --arch glm_moe_dsa has";
  c.torch_dtype = options.dtype.value_or(preset.dtype) == DType::kF32   ? "float32"
                  : options.dtype.value_or(preset.dtype) == DType::kF16 ? "float16"
                                                                        : "bfloat16";
  if (options.tokenizer_dir) {
    TokenizerFacts facts = read_tokenizer_facts(*options.tokenizer_dir);
    // Tiny presets take the tokenizer's vocabulary; real ones keep their (padded) size if larger.
    c.vocab_size = preset.only_arch.empty() ? facts.vocab_size : std::max(c.vocab_size, facts.vocab_size);
    if (facts.bos_id) c.bos_token_id = facts.bos_id;
    if (facts.eos_id) c.eos_token_id = facts.eos_id;
  }
  c.quantization = quantization_for(options.quantization, options.kv_cache_scales);
  // Round-trip through JSON so that what we write is exactly what a loader reads back.
  return ModelConfig::from_json(c.to_json(), "make-model config");
}

ModelConfig make_model(const MakeModelOptions& options) {
  TACHYON_CHECK(!options.out_dir.empty()) << "make-model needs --out";
  const ModelPreset& preset = find_preset(options.preset);
  ModelConfig config = make_model_config(options);
  const DType dtype = options.dtype.value_or(preset.dtype);
  std::filesystem::create_directories(options.out_dir);
  write_file(options.out_dir / "config.json", config.to_json().dump(2) + "\n");
  std::filesystem::remove(options.out_dir / kModeloptSideFile);
  if (config.quantization.format == WeightQuantization::kModeloptFp8) {
    write_file(options.out_dir / kModeloptSideFile, modelopt_side_file(config.quantization).dump(2) + "\n");
  }

  std::map<std::string, TensorSource> tensors;
  for (auto& [name, shape] : expected_tensors(config)) {
    const std::string stream = random_stream_name(config, name);
    const uint64_t seed = options.seed;
    auto draw = [stream, shape = shape, seed] {
      int64_t count = 1;
      for (int64_t d : shape) count *= d;
      std::vector<float> values(static_cast<size_t>(count));
      fill_random(values.data(), count, seed, stream, distribution_for(stream, shape));
      return values;
    };
    if (config.quantization.quantized() && is_quantized_linear(name, shape)) {
      // The weight and its scale are separate tensors, written one after the other (names sort
      // "X.weight" before "X.weight_scale"): whichever is written first draws and quantizes, the
      // other takes the result, and the second releases it (drawing is most of make-model's time).
      struct Parts {
        std::optional<Fp8QuantizedWeight> weight;
        int written = 0;
      };
      auto parts = std::make_shared<Parts>();
      auto write_part = [parts, draw, q = config.quantization, shape = shape](auto&& copy) {
        if (!parts->weight) parts->weight = quantize_fp8_weight(q, draw(), shape[0], shape[1]);
        copy(*parts->weight);
        if (++parts->written % 2 == 0) parts->weight.reset();
      };
      tensors.emplace(name, TensorSource{DType::kF8E4M3, shape, [write_part](std::byte* out) {
                                           write_part([out](const Fp8QuantizedWeight& w) {
                                             std::memcpy(out, w.data.data(), w.data.size());
                                           });
                                         }});
      const std::vector<int64_t> scale_shape = fp8_scale_shape(config.quantization, shape[0], shape[1]);
      tensors.emplace(config.quantization.scale_name(name),
                      TensorSource{DType::kF32, scale_shape, [write_part](std::byte* out) {
                                     write_part([out](const Fp8QuantizedWeight& w) {
                                       std::memcpy(out, w.scale.data(), w.scale.size() * sizeof(float));
                                     });
                                   }});
      // The calibrated scales the loader skips: a scalar each, of no consequence here.
      for (const std::string& scale : calibration_scale_names(config.quantization, name)) {
        tensors.emplace(scale, TensorSource{DType::kF32, {}, [](std::byte* out) {
                                              const float one = 1.0f;
                                              std::memcpy(out, &one, sizeof(one));
                                            }});
      }
      continue;
    }
    tensors.emplace(name, TensorSource{dtype, shape, [draw, dtype](std::byte* out) {
                                         const std::vector<float> values = draw();
                                         convert_from_f32(values.data(), values.size(), dtype, out);
                                       }});
  }
  const size_t shard_bytes = options.shard_bytes ? options.shard_bytes : preset.shard_bytes;
  std::filesystem::remove(options.out_dir / "model.safetensors");
  std::filesystem::remove(options.out_dir / "model.safetensors.index.json");
  if (shard_bytes == 0) {
    write_safetensors(options.out_dir / "model.safetensors", tensors);
  } else {
    write_safetensors_sharded(options.out_dir, tensors, shard_bytes);
  }

  if (options.tokenizer_dir) {
    for (const char* file : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
      auto source = *options.tokenizer_dir / file;
      if (std::filesystem::exists(source)) {
        std::filesystem::copy_file(source, options.out_dir / file, std::filesystem::copy_options::overwrite_existing);
      }
    }
  }
  return config;
}

}  // namespace tachyon::model
