#include "tachyon/model/model_weights.h"

#include "tachyon/base/huge_pages.h"

#include "tachyon/model/architecture.h"
#include "tachyon/model/load_progress.h"

#include <array>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <type_traits>
#include <set>

#include <fmt/format.h>

#include "tachyon/base/check.h"

namespace tachyon::model {
namespace {

using Shape = std::vector<int64_t>;

std::string layer_name(int64_t layer, const char* suffix) { return fmt::format("model.layers.{}.{}", layer, suffix); }
std::string layer_name(int64_t layer, const std::string& suffix) { return layer_name(layer, suffix.c_str()); }

// How the family's checkpoints name a MoE layer's tensors: its row of the architecture table.
// Whatever the names, the loader stacks them alike (model_weights.h).
using MoeNames = MoeTensorNames;
const MoeNames& moe_names(const ModelConfig& c) { return c.family().moe_names; }

// "{block}.{suffix}" in layer l: the router ("gate.weight") and DeepSeek's extras.
std::string moe_name(const MoeNames& names, int64_t layer, const char* suffix) {
  return layer_name(layer, fmt::format("{}.{}", names.block, suffix));
}

// "{block}.experts.{e}.{proj}.weight" in layer l: one expert's projection.
std::string expert_name(const MoeNames& names, int64_t layer, int64_t expert, const char* proj) {
  return layer_name(layer, fmt::format("{}.experts.{}.{}.weight", names.block, expert, proj));
}

std::string shape_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Tensors some checkpoints carry that the forward recomputes or ignores.
bool is_ignorable(const std::string& name) { return name.ends_with("rotary_emb.inv_freq"); }

// DeepSeek-V3's multi-token-prediction module is stored as layers num_hidden_layers ..
// num_hidden_layers + num_nextn_predict_layers - 1. The main model's forward never reads them
// (transformers skips them on load too), so load_weights leaves them in the file and
// load_mtp_weights reads them only for a caller that runs the module (mtp.h): serving without
// speculative decoding does not pay for a whole extra MoE layer, embedding and head.
bool is_mtp_layer_tensor(const ModelConfig& c, const std::string& name) {
  for (int64_t i = 0; i < c.num_nextn_predict_layers; ++i) {
    if (name.starts_with(fmt::format("model.layers.{}.", c.num_hidden_layers + i))) return true;
  }
  return false;
}

class WeightReader {
 public:
  WeightReader(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
               Bf16MatrixHolding holding = Bf16MatrixHolding::kWidenToF32)
      : checkpoint_(checkpoint),
        quantization_(config.quantization),
        holding_(holding),
        progress_(make_progress(config, checkpoint)) {
    for (auto& [name, shape] : expected_tensors(config)) expected_.emplace(name, shape);
  }

  // Reads one expected tensor as f32 or bf16 bits, appending to `out` (so fused weights are
  // concatenations). The one place a tensor's stored values become the model's: an FP8 weight is
  // dequantized here with its companion scale (fp8_checkpoint.h), for both loaders alike.
  template <typename T>
  void read_into(const std::string& name, std::vector<T>& out) {
    auto expected = expected_.find(name);
    TACHYON_CHECK(expected != expected_.end()) << "internal: tensor '" << name << "' is not in the expected set";
    TACHYON_CHECK(checkpoint_.contains(name)) << "missing tensor '" << name << "' " << shape_string(expected->second)
                                              << " in the checkpoint";
    const TensorView& view = checkpoint_.at(name);
    TACHYON_CHECK(view.shape == expected->second)
        << view.file << ": tensor '" << name << "' has shape " << shape_string(view.shape) << " but the config needs "
        << shape_string(expected->second);
    size_t offset = out.size();
    reserve_huge(out, offset + static_cast<size_t>(view.numel()));  // before the fill touches it
    out.resize(offset + static_cast<size_t>(view.numel()));
    const size_t count = static_cast<size_t>(view.numel());
    if constexpr (std::is_same_v<T, float>) {
      to_f32(view, out.data() + offset);
    } else if (view.dtype == DType::kBF16) {
      std::memcpy(out.data() + offset, view.data, count * sizeof(uint16_t));
    } else {
      std::vector<float> f32(count);
      to_f32(view, f32.data());
      convert_from_f32(f32.data(), count, DType::kBF16, out.data() + offset);
    }
    read_.insert(name);
    progress_.add(view.numel() * static_cast<int64_t>(dtype_size(view.dtype)));
  }

  // Reserves room for the parts of a fused matrix that the checkpoint holds, before their
  // read_into calls: one allocation, advised for huge pages, and no copy as it grows.
  template <typename T>
  void reserve_parts(std::initializer_list<std::string> parts, std::vector<T>& out) const {
    size_t count = 0;
    for (const std::string& part : parts) {
      if (checkpoint_.contains(part)) count += static_cast<size_t>(checkpoint_.at(part).numel());
    }
    reserve_huge(out, out.size() + count);
  }

  // Reserves room for `count` more elements before a series of read_into calls, so that a large
  // fused array (a layer's experts) is allocated once instead of growing by copies.
  template <typename T>
  static void reserve_more(std::vector<T>& out, int64_t count) {
    reserve_huge(out, out.size() + static_cast<size_t>(count));
  }

  template <typename T>
  std::vector<T> read(const std::string& name) {
    std::vector<T> out;
    read_into(name, out);
    return out;
  }

  bool has(const std::string& name) const { return checkpoint_.contains(name); }

  // Whether the matrix fused from `parts` goes to its *_bf16 field: the holding asks for it and
  // every part is stored in bf16 (an f32 or f16 part would not survive bf16: that matrix widens).
  bool keeps_bf16(std::initializer_list<std::string> parts) const {
    if (holding_ != Bf16MatrixHolding::kKeepBf16) return false;
    for (const std::string& part : parts) {
      if (!checkpoint_.contains(part) || checkpoint_.at(part).dtype != DType::kBF16) return false;
    }
    return true;
  }

  // A checkpoint tensor that is not a weight of the forward: an ignorable one or an activation scale.
  bool skippable(const std::string& name) const {
    return is_ignorable(name) || is_ignorable_quantization_tensor(quantization_, name);
  }

  // Every checkpoint tensor under `prefix` (one MTP module's layer) must have been read.
  void check_all_read(const std::string& prefix) const {
    for (const auto& [name, view] : checkpoint_.tensors()) {
      TACHYON_CHECK(!name.starts_with(prefix) || read_.count(name) || skippable(name))
          << view.file << ": unexpected tensor '" << name << "' in the multi-token-prediction module";
    }
  }

  // Every checkpoint tensor must have been read, or be one the config allows to be ignored.
  void check_no_unexpected(const ModelConfig& config) const {
    for (const auto& [name, view] : checkpoint_.tensors()) {
      if (read_.count(name) || skippable(name) || is_mtp_layer_tensor(config, name)) continue;
      if (name == "lm_head.weight" && config.tie_word_embeddings) continue;  // tied: duplicate of embed_tokens
      TACHYON_FAIL() << view.file << ": unexpected tensor '" << name << "' for " << config.architecture
                     << " with this config.json (is the config from the same checkpoint?)";
    }
  }

 private:
  // The tensor's values in f32: decoded, and for an FP8 weight multiplied by its scale.
  void to_f32(const TensorView& view, float* out) {
    if (view.dtype != DType::kF8E4M3) {
      convert_to_f32(view.data, view.dtype, static_cast<size_t>(view.numel()), out);
      return;
    }
    TACHYON_CHECK(quantization_.quantized()) << view.file << ": tensor '" << view.name << "' is F8_E4M3 but "
                                             << "config.json has no quantization_config saying how it is scaled";
    const std::string scale = quantization_.scale_name(view.name);
    TACHYON_CHECK(checkpoint_.contains(scale)) << view.file << ": FP8 weight '" << view.name << "' has no scale tensor '"
                                               << scale << "' (" << weight_quantization_name(quantization_.format) << ")";
    dequantize_fp8_weight(quantization_, view, checkpoint_.at(scale), out);
    read_.insert(scale);
  }

  // Progress over the checkpoint's tensors that the config expects (the ones read_into reads).
  static LoadProgress make_progress(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint) {
    int64_t bytes = 0, tensors = 0;
    for (const auto& [name, shape] : expected_tensors(config)) {
      if (!checkpoint.contains(name)) continue;
      const TensorView& view = checkpoint.at(name);
      bytes += view.numel() * static_cast<int64_t>(dtype_size(view.dtype));
      ++tensors;
    }
    return LoadProgress(bytes, tensors);
  }

  const SafetensorsCheckpoint& checkpoint_;
  const QuantizationConfig quantization_;
  const Bf16MatrixHolding holding_;
  std::map<std::string, Shape> expected_;
  std::set<std::string> read_;
  LoadProgress progress_;
};

using TensorList = std::vector<std::pair<std::string, Shape>>;

// q/k/v/o projections of the Llama family (and their biases and Qwen3's q/k norms).
void attention_tensors(const ModelConfig& c, int64_t l, TensorList& out) {
  const int64_t h = c.hidden_size;
  out.push_back({layer_name(l, "self_attn.q_proj.weight"), {c.q_size(), h}});
  out.push_back({layer_name(l, "self_attn.k_proj.weight"), {c.kv_size(), h}});
  out.push_back({layer_name(l, "self_attn.v_proj.weight"), {c.kv_size(), h}});
  if (c.qkv_bias) {
    out.push_back({layer_name(l, "self_attn.q_proj.bias"), {c.q_size()}});
    out.push_back({layer_name(l, "self_attn.k_proj.bias"), {c.kv_size()}});
    out.push_back({layer_name(l, "self_attn.v_proj.bias"), {c.kv_size()}});
  }
  if (c.qk_norm) {
    out.push_back({layer_name(l, "self_attn.q_norm.weight"), {c.head_dim}});
    out.push_back({layer_name(l, "self_attn.k_norm.weight"), {c.head_dim}});
  }
  out.push_back({layer_name(l, "self_attn.o_proj.weight"), {h, c.q_size()}});
  if (c.o_proj_bias) out.push_back({layer_name(l, "self_attn.o_proj.bias"), {h}});
}

// DeepSeek-V3's latent attention (no biases: attention_bias is refused at parse).
void mla_tensors(const ModelConfig& c, int64_t l, TensorList& out) {
  const int64_t h = c.hidden_size, heads = c.num_attention_heads;
  if (c.q_lora_rank > 0) {
    out.push_back({layer_name(l, "self_attn.q_a_proj.weight"), {c.q_lora_rank, h}});
    out.push_back({layer_name(l, "self_attn.q_a_layernorm.weight"), {c.q_lora_rank}});
    out.push_back({layer_name(l, "self_attn.q_b_proj.weight"), {heads * c.head_dim, c.q_lora_rank}});
  } else {
    out.push_back({layer_name(l, "self_attn.q_proj.weight"), {heads * c.head_dim, h}});
  }
  out.push_back({layer_name(l, "self_attn.kv_a_proj_with_mqa.weight"), {c.kv_lora_rank + c.qk_rope_head_dim, h}});
  out.push_back({layer_name(l, "self_attn.kv_a_layernorm.weight"), {c.kv_lora_rank}});
  out.push_back(
      {layer_name(l, "self_attn.kv_b_proj.weight"), {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}});
  out.push_back({layer_name(l, "self_attn.o_proj.weight"), {h, heads * c.v_head_dim}});
}

// DeepSeek-V3.2's lightning indexer, as DeepseekV32Indexer names its modules (GLM-5's too; its
// "shared" layers have none: ModelConfig::has_indexer).
void indexer_tensors(const ModelConfig& c, int64_t l, TensorList& out) {
  const int64_t dim = c.index_head_dim;
  out.push_back({layer_name(l, "self_attn.indexer.wq_b.weight"), {c.index_n_heads * dim, c.q_lora_rank}});
  out.push_back({layer_name(l, "self_attn.indexer.wk.weight"), {dim, c.hidden_size}});
  out.push_back({layer_name(l, "self_attn.indexer.k_norm.weight"), {dim}});
  out.push_back({layer_name(l, "self_attn.indexer.k_norm.bias"), {dim}});
  out.push_back({layer_name(l, "self_attn.indexer.weights_proj.weight"), {c.index_n_heads, c.hidden_size}});
}

// One decoder layer's tensors (layer index l in the checkpoint; c.is_moe_layer(l) picks the MLP).
void layer_tensors(const ModelConfig& c, int64_t l, TensorList& out) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  out.push_back({layer_name(l, "input_layernorm.weight"), {h}});
  if (c.is_mla()) {
    mla_tensors(c, l, out);
    if (c.has_indexer(l)) indexer_tensors(c, l, out);
  } else {
    attention_tensors(c, l, out);
  }
  out.push_back({layer_name(l, "post_attention_layernorm.weight"), {h}});
  if (c.is_moe_layer(l)) {
    const int64_t moe_inter = c.moe_intermediate_size;
    const MoeNames& names = moe_names(c);
    out.push_back({moe_name(names, l, "gate.weight"), {c.num_experts, h}});
    if (c.router == RouterKind::kSigmoidGroupLimited) {
      out.push_back({moe_name(names, l, "gate.e_score_correction_bias"), {c.num_experts}});
    }
    if (c.n_shared_experts > 0) {
      const int64_t shared = moe_inter * c.n_shared_experts;
      out.push_back({moe_name(names, l, "shared_experts.gate_proj.weight"), {shared, h}});
      out.push_back({moe_name(names, l, "shared_experts.up_proj.weight"), {shared, h}});
      out.push_back({moe_name(names, l, "shared_experts.down_proj.weight"), {h, shared}});
    }
    for (int64_t e = 0; e < c.num_experts; ++e) {
      out.push_back({expert_name(names, l, e, names.gate), {moe_inter, h}});
      out.push_back({expert_name(names, l, e, names.up), {moe_inter, h}});
      out.push_back({expert_name(names, l, e, names.down), {h, moe_inter}});
    }
    return;  // no dense MLP in this layer
  }
  out.push_back({layer_name(l, "mlp.gate_proj.weight"), {inter, h}});
  out.push_back({layer_name(l, "mlp.up_proj.weight"), {inter, h}});
  out.push_back({layer_name(l, "mlp.down_proj.weight"), {h, inter}});
  if (c.mlp_bias) {
    out.push_back({layer_name(l, "mlp.gate_proj.bias"), {inter}});
    out.push_back({layer_name(l, "mlp.up_proj.bias"), {inter}});
    out.push_back({layer_name(l, "mlp.down_proj.bias"), {h}});
  }
}

// DeepSeek-V3's MTP module k, stored as layer num_hidden_layers + k: its own norms and eh_proj, a
// full MoE decoder layer, the shared head's norm, and copies of the embedding and LM head (which
// some checkpoints leave out; load_mtp_weights then uses the main ones).
void mtp_tensors(const ModelConfig& c, int64_t k, TensorList& out) {
  const int64_t h = c.hidden_size, l = c.num_hidden_layers + k;
  out.push_back({layer_name(l, "enorm.weight"), {h}});
  out.push_back({layer_name(l, "hnorm.weight"), {h}});
  out.push_back({layer_name(l, "eh_proj.weight"), {h, 2 * h}});
  out.push_back({layer_name(l, "embed_tokens.weight"), {c.vocab_size, h}});
  layer_tensors(c, l, out);
  out.push_back({layer_name(l, "shared_head.norm.weight"), {h}});
  out.push_back({layer_name(l, "shared_head.head.weight"), {c.vocab_size, h}});
}

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> expected_tensors(const ModelConfig& c) {
  std::vector<std::pair<std::string, Shape>> out;
  const int64_t h = c.hidden_size;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) layer_tensors(c, l, out);
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  for (int64_t k = 0; k < c.num_nextn_predict_layers; ++k) mtp_tensors(c, k, out);
  return out;
}

namespace {

// Appends the checkpoint's tensor `name` (one part of a fused matrix) to `bf16` when the matrix is
// kept as bf16 (WeightReader::keeps_bf16), else to `values`.
template <typename T>
void read_matrix_part(WeightReader& reader, const std::string& name, bool keep_bf16, std::vector<T>& values,
                      std::vector<uint16_t>& bf16) {
  if (keep_bf16) {
    reader.read_into(name, bf16);
  } else {
    reader.read_into(name, values);
  }
}

// Room for a fused matrix's `parts` in the vector read_matrix_part fills, before they are read.
template <typename T>
void reserve_matrix_parts(const WeightReader& reader, std::initializer_list<std::string> parts, bool keep_bf16,
                          std::vector<T>& values, std::vector<uint16_t>& bf16) {
  if (keep_bf16) {
    reader.reserve_parts(parts, bf16);
  } else {
    reader.reserve_parts(parts, values);
  }
}

// A matrix of one tensor, into `bf16` or `values` likewise.
template <typename T>
void read_matrix(WeightReader& reader, const std::string& name, std::vector<T>& values, std::vector<uint16_t>& bf16) {
  read_matrix_part(reader, name, reader.keeps_bf16({name}), values, bf16);
}

// A MoE layer's router and experts: expert e's gate and up rows appended in turn make
// [E, 2 * I_moe, hidden], its down appended makes [E, hidden, I_moe].
template <typename T>
void read_experts(WeightReader& reader, const ModelConfig& c, int64_t l, BasicLayerWeights<T>& lw) {
  const int64_t h = c.hidden_size, moe_inter = c.moe_intermediate_size, experts = c.num_experts;
  const MoeNames& names = moe_names(c);
  lw.router = reader.template read<T>(moe_name(names, l, "gate.weight"));
  if (c.router == RouterKind::kSigmoidGroupLimited) {
    lw.router_bias = reader.template read<T>(moe_name(names, l, "gate.e_score_correction_bias"));
  }
  if (c.n_shared_experts > 0) {
    const std::string gate = moe_name(names, l, "shared_experts.gate_proj.weight");
    const std::string up = moe_name(names, l, "shared_experts.up_proj.weight");
    reader.reserve_parts({gate, up}, lw.shared_gate_up);
    reader.read_into(gate, lw.shared_gate_up);
    reader.read_into(up, lw.shared_gate_up);
    lw.shared_down = reader.template read<T>(moe_name(names, l, "shared_experts.down_proj.weight"));
  }
  WeightReader::reserve_more(lw.experts_gate_up, experts * 2 * moe_inter * h);
  WeightReader::reserve_more(lw.experts_down, experts * h * moe_inter);
  for (int64_t e = 0; e < experts; ++e) {
    reader.read_into(expert_name(names, l, e, names.gate), lw.experts_gate_up);
    reader.read_into(expert_name(names, l, e, names.up), lw.experts_gate_up);
    reader.read_into(expert_name(names, l, e, names.down), lw.experts_down);
  }
}

// q/k/v fused into one [q; k; v] matrix, o_proj, and the optional biases and q/k norms.
template <typename T>
void read_attention(WeightReader& reader, const ModelConfig& config, int64_t l, BasicLayerWeights<T>& lw) {
  const auto weight = [l](const char* proj) { return layer_name(l, fmt::format("self_attn.{}.weight", proj)); };
  const bool qkv_bf16 = reader.keeps_bf16({weight("q_proj"), weight("k_proj"), weight("v_proj")});
  reserve_matrix_parts(reader, {weight("q_proj"), weight("k_proj"), weight("v_proj")}, qkv_bf16, lw.qkv, lw.qkv_bf16);
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
    read_matrix_part(reader, weight(proj), qkv_bf16, lw.qkv, lw.qkv_bf16);
    if (config.qkv_bias) reader.read_into(layer_name(l, fmt::format("self_attn.{}.bias", proj).c_str()), lw.qkv_bias);
  }
  if (config.qk_norm) {
    lw.q_norm = reader.template read<T>(layer_name(l, "self_attn.q_norm.weight"));
    lw.k_norm = reader.template read<T>(layer_name(l, "self_attn.k_norm.weight"));
  }
  read_matrix(reader, weight("o_proj"), lw.o_proj, lw.o_proj_bf16);
  if (config.o_proj_bias) lw.o_proj_bias = reader.template read<T>(layer_name(l, "self_attn.o_proj.bias"));
}

// DeepSeek-V3's latent attention projections, unfused (the forward applies norms between them),
// and DeepSeek-V3.2's indexer (on the layers that have one).
template <typename T>
void read_mla(WeightReader& reader, const ModelConfig& config, int64_t l, BasicLayerWeights<T>& lw) {
  if (config.q_lora_rank > 0) {
    lw.q_a_proj = reader.template read<T>(layer_name(l, "self_attn.q_a_proj.weight"));
    lw.q_a_norm = reader.template read<T>(layer_name(l, "self_attn.q_a_layernorm.weight"));
    lw.q_b_proj = reader.template read<T>(layer_name(l, "self_attn.q_b_proj.weight"));
  } else {
    lw.q_b_proj = reader.template read<T>(layer_name(l, "self_attn.q_proj.weight"));
  }
  lw.kv_a_proj = reader.template read<T>(layer_name(l, "self_attn.kv_a_proj_with_mqa.weight"));
  lw.kv_a_norm = reader.template read<T>(layer_name(l, "self_attn.kv_a_layernorm.weight"));
  lw.kv_b_proj = reader.template read<T>(layer_name(l, "self_attn.kv_b_proj.weight"));
  read_matrix(reader, layer_name(l, "self_attn.o_proj.weight"), lw.o_proj, lw.o_proj_bf16);
  if (!config.has_indexer(l)) return;
  lw.indexer_wq_b = reader.template read<T>(layer_name(l, "self_attn.indexer.wq_b.weight"));
  lw.indexer_wk = reader.template read<T>(layer_name(l, "self_attn.indexer.wk.weight"));
  lw.indexer_k_norm = reader.template read<T>(layer_name(l, "self_attn.indexer.k_norm.weight"));
  lw.indexer_k_norm_bias = reader.template read<T>(layer_name(l, "self_attn.indexer.k_norm.bias"));
  lw.indexer_weights_proj = reader.template read<T>(layer_name(l, "self_attn.indexer.weights_proj.weight"));
}

// One decoder layer (checkpoint layer l): norms, attention, and the dense MLP or the experts.
template <typename T>
void read_layer(WeightReader& reader, const ModelConfig& config, int64_t l, BasicLayerWeights<T>& lw) {
  lw.input_norm = reader.template read<T>(layer_name(l, "input_layernorm.weight"));
  if (config.is_mla()) {
    read_mla(reader, config, l, lw);
  } else {
    read_attention(reader, config, l, lw);
  }
  lw.post_attention_norm = reader.template read<T>(layer_name(l, "post_attention_layernorm.weight"));
  if (config.is_moe_layer(l)) {
    read_experts(reader, config, l, lw);
    return;
  }
  const std::string gate = layer_name(l, "mlp.gate_proj.weight"), up = layer_name(l, "mlp.up_proj.weight");
  const bool gate_up_bf16 = reader.keeps_bf16({gate, up});
  reserve_matrix_parts(reader, {gate, up}, gate_up_bf16, lw.gate_up, lw.gate_up_bf16);
  read_matrix_part(reader, gate, gate_up_bf16, lw.gate_up, lw.gate_up_bf16);
  read_matrix_part(reader, up, gate_up_bf16, lw.gate_up, lw.gate_up_bf16);
  read_matrix(reader, layer_name(l, "mlp.down_proj.weight"), lw.down, lw.down_bf16);
  if (config.mlp_bias) {
    reader.read_into(layer_name(l, "mlp.gate_proj.bias"), lw.gate_up_bias);
    reader.read_into(layer_name(l, "mlp.up_proj.bias"), lw.gate_up_bias);
    lw.down_bias = reader.template read<T>(layer_name(l, "mlp.down_proj.bias"));
  }
}

// `take_layer`, when given, receives each layer (as T) once read, and the weights keep none; the
// other tensors are read as Rest (the by-layer loaders' callers hold them in bf16).
template <typename T, typename Rest = T>
BasicModelWeights<Rest> load_weights_as(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                        Bf16MatrixHolding holding,
                                        const std::function<void(int64_t, BasicLayerWeights<T>&&)>& take_layer = {}) {
  WeightReader reader(config, checkpoint, holding);
  BasicModelWeights<Rest> w;
  w.config = config;
  w.embed_tokens = reader.template read<Rest>("model.embed_tokens.weight");
  w.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    if constexpr (std::is_same_v<T, Rest>) {
      if (!take_layer) {
        read_layer(reader, config, l, w.layers[static_cast<size_t>(l)]);
        continue;
      }
    }
    BasicLayerWeights<T> layer;  // freed before the next layer is read
    read_layer(reader, config, l, layer);
    take_layer(l, std::move(layer));
  }
  w.final_norm = reader.template read<Rest>("model.norm.weight");
  if (!config.tie_word_embeddings) read_matrix(reader, "lm_head.weight", w.lm_head, w.lm_head_bf16);
  reader.check_no_unexpected(config);
  return w;
}

}  // namespace

std::vector<MtpWeights> load_mtp_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint) {
  WeightReader reader(config, checkpoint);
  std::vector<MtpWeights> modules(static_cast<size_t>(config.num_nextn_predict_layers));
  for (int64_t k = 0; k < config.num_nextn_predict_layers; ++k) {
    MtpWeights& m = modules[static_cast<size_t>(k)];
    const int64_t l = config.num_hidden_layers + k;
    m.checkpoint_layer = l;
    m.enorm = reader.read<float>(layer_name(l, "enorm.weight"));
    m.hnorm = reader.read<float>(layer_name(l, "hnorm.weight"));
    m.eh_proj = reader.read<float>(layer_name(l, "eh_proj.weight"));
    // The embedding and head copies are optional per module: present in the checkpoint means
    // read (and shape-checked), absent means the main model's, which they equal in DeepSeek-V3.
    const std::string embed = layer_name(l, "embed_tokens.weight");
    m.embed_from_main = !reader.has(embed);
    m.embed_tokens = reader.read<float>(m.embed_from_main ? "model.embed_tokens.weight" : embed);
    read_layer(reader, config, l, m.layer);
    m.head_norm = reader.read<float>(layer_name(l, "shared_head.norm.weight"));
    const std::string head = layer_name(l, "shared_head.head.weight");
    const std::string main_head = config.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    m.head_from_main = !reader.has(head);
    m.head = reader.read<float>(m.head_from_main ? main_head : head);
    reader.check_all_read(fmt::format("model.layers.{}.", l));
  }
  return modules;
}

ModelWeights load_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                          Bf16MatrixHolding holding) {
  return load_weights_as<float>(config, checkpoint, holding);
}

Bf16ModelWeights load_weights_by_layer(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                       const TakeLayer& take_layer) {
  TACHYON_CHECK(take_layer) << "internal: load_weights_by_layer without a taker of layers";
  return load_weights_as<float, uint16_t>(config, checkpoint, Bf16MatrixHolding::kWidenToF32, take_layer);
}

ModelWeights load_weights_f32_by_layer(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                       const TakeLayer& take_layer) {
  TACHYON_CHECK(take_layer) << "internal: load_weights_f32_by_layer without a taker of layers";
  return load_weights_as<float>(config, checkpoint, Bf16MatrixHolding::kWidenToF32, take_layer);
}

Bf16ModelWeights load_weights_bf16_by_layer(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                            const TakeBf16Layer& take_layer) {
  TACHYON_CHECK(take_layer) << "internal: load_weights_bf16_by_layer without a taker of layers";
  return load_weights_as<uint16_t>(config, checkpoint, Bf16MatrixHolding::kWidenToF32, take_layer);  // all bf16
}

bool holds_bf16_matrices(const ModelWeights& weights) {
  if (!weights.lm_head_bf16.empty()) return true;
  for (const LayerWeights& l : weights.layers) {
    if (!l.qkv_bf16.empty() || !l.o_proj_bf16.empty() || !l.gate_up_bf16.empty() || !l.down_bf16.empty()) return true;
  }
  return false;
}

void check_f32_matrices(const ModelWeights& weights, const char* reader) {
  TACHYON_CHECK(!holds_bf16_matrices(weights))
      << "internal: " << reader << " reads f32 matrices, but these weights hold their bf16 checkpoint's matrices "
      << "as bf16 (load them with Bf16MatrixHolding::kWidenToF32)";
}

Bf16ModelWeights load_weights_bf16(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint) {
  return load_weights_as<uint16_t>(config, checkpoint, Bf16MatrixHolding::kWidenToF32);  // all bf16 already
}

}  // namespace tachyon::model
