#include "tachyon/model/fp8_projections.h"

#include <array>
#include <utility>

#include <fmt/format.h>

#include "tachyon/base/check.h"
#include "tachyon/base/huge_pages.h"
#include "tachyon/model/architecture.h"
#include "tachyon/model/online_fp8.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::model {
namespace {

// Every tensor of a layer, as members of either weight type (one list for the bf16 conversion).
template <typename T>
constexpr auto layer_tensors() {
  using L = BasicLayerWeights<T>;
  return std::array{&L::input_norm, &L::qkv, &L::qkv_bias, &L::q_norm, &L::k_norm, &L::o_proj, &L::o_proj_bias,
                    &L::post_attention_norm, &L::gate_up, &L::gate_up_bias, &L::down, &L::down_bias, &L::router,
                    &L::experts_gate_up, &L::experts_down, &L::router_bias, &L::shared_gate_up, &L::shared_down,
                    &L::q_a_proj, &L::q_a_norm, &L::q_b_proj, &L::kv_a_proj, &L::kv_a_norm, &L::kv_b_proj,
                    &L::indexer_wq_b, &L::indexer_wk, &L::indexer_k_norm, &L::indexer_k_norm_bias,
                    &L::indexer_weights_proj};
}

std::vector<uint16_t> round_to_bf16(std::vector<float>&& values) {
  std::vector<uint16_t> out = huge_vector<uint16_t>(values.size());
  convert_from_f32(values.data(), values.size(), DType::kBF16, out.data());
  std::vector<float>().swap(values);  // the f32 copy goes now, not with the whole model
  return out;
}

std::string layer_weight_name(int64_t layer, const std::string& suffix) {
  return fmt::format("model.layers.{}.{}.weight", layer, suffix);
}

// One projection of a layer: the members holding it, its parts' checkpoint names and rows.
struct Fp8Projection {
  std::vector<float> LayerWeights::* f32;
  std::vector<uint16_t> BasicLayerWeights<uint16_t>::* bf16;
  Fp8BlockWeight Fp8LayerProjections::* fp8;
  std::vector<std::string> names;  // suffixes after model.layers.{l}.
  std::vector<int64_t> rows;       // per part; empty: one part of all rows
  int64_t cols = 0;
};

std::vector<Fp8Projection> fp8_projection_list(const ModelConfig& c, const LayerWeights& l, Fp8RoutedExperts experts) {
  using B = BasicLayerWeights<uint16_t>;
  using F = Fp8LayerProjections;
  const int64_t h = c.hidden_size;
  auto cols_of = [h](const std::vector<float>& w) { return w.empty() ? int64_t{0} : static_cast<int64_t>(w.size()) / h; };
  std::vector<Fp8Projection> out;
  if (c.is_mla()) {
    const bool lora = !l.q_a_proj.empty();
    if (lora) out.push_back({&LayerWeights::q_a_proj, &B::q_a_proj, &F::q_a_proj, {"self_attn.q_a_proj"}, {}, h});
    out.push_back({&LayerWeights::q_b_proj, &B::q_b_proj, &F::q_b_proj,
                   {lora ? "self_attn.q_b_proj" : "self_attn.q_proj"}, {}, lora ? c.q_lora_rank : h});
    out.push_back({&LayerWeights::kv_a_proj, &B::kv_a_proj, &F::kv_a_proj, {"self_attn.kv_a_proj_with_mqa"}, {}, h});
  } else {
    out.push_back({&LayerWeights::qkv, &B::qkv, &F::qkv, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                   {c.q_size(), c.kv_size(), c.kv_size()}, h});
  }
  // o_proj is [hidden, q_size] (dense) or [hidden, heads * v_head_dim] (latent).
  out.push_back({&LayerWeights::o_proj, &B::o_proj, &F::o_proj, {"self_attn.o_proj"}, {},
                 static_cast<int64_t>(l.o_proj.size()) / h});
  if (!l.gate_up.empty()) {
    const int64_t inter = cols_of(l.gate_up) / 2;
    out.push_back({&LayerWeights::gate_up, &B::gate_up, &F::gate_up, {"mlp.gate_proj", "mlp.up_proj"},
                   {inter, inter}, h});
    out.push_back({&LayerWeights::down, &B::down, &F::down, {"mlp.down_proj"}, {}, inter});
  }
  if (!l.experts_gate_up.empty() && experts == Fp8RoutedExperts::kFp8) {
    // Every expert's parts stacked: [gate_e; up_e] for e = 0.., then down_e; one factor row per row.
    const MoeTensorNames& moe = c.family().moe_names;
    const int64_t inter = c.moe_intermediate_size;
    Fp8Projection gate_up{&LayerWeights::experts_gate_up, &B::experts_gate_up, &F::experts_gate_up, {}, {}, h};
    Fp8Projection down{&LayerWeights::experts_down, &B::experts_down, &F::experts_down, {}, {}, inter};
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const std::string expert = fmt::format("{}.experts.{}.", moe.block, e);
      gate_up.names.insert(gate_up.names.end(), {expert + moe.gate, expert + moe.up});
      gate_up.rows.insert(gate_up.rows.end(), {inter, inter});
      down.names.push_back(expert + moe.down);
      down.rows.push_back(h);
    }
    out.push_back(std::move(gate_up));
    out.push_back(std::move(down));
  }
  if (!l.shared_gate_up.empty()) {
    const int64_t inter = cols_of(l.shared_gate_up) / 2;
    out.push_back({&LayerWeights::shared_gate_up, &B::shared_gate_up, &F::shared_gate_up,
                   {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"}, {inter, inter}, h});
    out.push_back({&LayerWeights::shared_down, &B::shared_down, &F::shared_down, {"mlp.shared_experts.down_proj"}, {},
                   inter});
  }
  return out;
}

}  // namespace

Fp8SourceGeometry fp8_source_geometry(const QuantizationConfig& q) {
  switch (q.format) {
    case WeightQuantization::kNone: return {128, 128};
    case WeightQuantization::kFp8Block: return {q.block_rows, q.block_cols};
    case WeightQuantization::kFp8Tensor:
    case WeightQuantization::kModeloptFp8: return {0, 0};
    case WeightQuantization::kFp8Channel:
    case WeightQuantization::kFbgemmFp8: return {1, 0};
  }
  TACHYON_FAIL() << "internal: unknown FP8 format";
}

Fp8BlockWeight to_fp8_gpu_form(std::span<const float> weight, int64_t cols, const std::vector<int64_t>& part_rows,
                               Fp8SourceGeometry geometry) {
  int64_t rows = 0;
  for (int64_t r : part_rows) rows += r;
  TACHYON_CHECK(cols > 0 && weight.size() == static_cast<size_t>(rows * cols))
      << "FP8 GPU form of a weight of " << weight.size() << " values as " << rows << " rows of " << cols;
  const int64_t block_cols = geometry.block_cols == 0 ? cols : geometry.block_cols;
  TACHYON_CHECK(block_cols >= cols || block_cols % kFp8ScaleCols == 0)
      << "FP8 blocks of " << block_cols << " columns cannot be held as factors per " << kFp8ScaleCols
      << " columns (the GPU's FP8 form); supported: multiples of " << kFp8ScaleCols << " or whole rows";
  Fp8BlockWeight out{.rows = rows, .cols = cols, .block_rows = 1, .block_cols = kFp8ScaleCols};
  reserve_huge(out.data, weight.size());
  out.scale_inv.reserve(static_cast<size_t>(rows * out.scale_cols()));
  int64_t row0 = 0;
  for (int64_t part : part_rows) {
    if (part == 0) continue;
    const Fp8BlockWeight q = quantize_fp8_blocks(weight.subspan(static_cast<size_t>(row0 * cols), static_cast<size_t>(part * cols)),
                                                 part, cols, geometry.block_rows == 0 ? part : geometry.block_rows,
                                                 block_cols);
    out.data.insert(out.data.end(), q.data.begin(), q.data.end());
    for (int64_t r = 0; r < part; ++r) {
      for (int64_t j = 0; j < out.scale_cols(); ++j) {
        out.scale_inv.push_back(q.scale_inv[static_cast<size_t>((r / q.block_rows) * q.scale_cols() +
                                                                (j * kFp8ScaleCols) / q.block_cols)]);
      }
    }
    row0 += part;
  }
  return out;
}

BasicLayerWeights<uint16_t> to_bf16_layer(LayerWeights&& layer) {
  BasicLayerWeights<uint16_t> out;
  constexpr auto from = layer_tensors<float>();
  constexpr auto to = layer_tensors<uint16_t>();
  for (size_t t = 0; t < from.size(); ++t) out.*to[t] = round_to_bf16(std::move(layer.*from[t]));
  return out;
}

ModelWeights to_f32_weights(const Bf16ModelWeights& w) {
  auto widen = [](const std::vector<uint16_t>& bits) {
    std::vector<float> out(bits.size());
    convert_to_f32(bits.data(), DType::kBF16, bits.size(), out.data());
    return out;
  };
  ModelWeights out;
  out.config = w.config;
  out.embed_tokens = widen(w.embed_tokens);
  constexpr auto from = layer_tensors<uint16_t>();
  constexpr auto to = layer_tensors<float>();
  for (const BasicLayerWeights<uint16_t>& layer : w.layers) {
    LayerWeights& f32 = out.layers.emplace_back();
    for (size_t t = 0; t < from.size(); ++t) f32.*to[t] = widen(layer.*from[t]);
  }
  out.final_norm = widen(w.final_norm);
  out.lm_head = widen(w.lm_head);
  return out;
}

Bf16ModelWeights to_bf16_weights(ModelWeights&& w) {
  check_f32_matrices(w, "the bf16 conversion of f32 weights");
  Bf16ModelWeights out;
  out.config = w.config;
  out.embed_tokens = round_to_bf16(std::move(w.embed_tokens));
  out.layers.reserve(w.layers.size());
  for (LayerWeights& layer : w.layers) out.layers.push_back(to_bf16_layer(std::move(layer)));
  out.final_norm = round_to_bf16(std::move(w.final_norm));
  out.lm_head = round_to_bf16(std::move(w.lm_head));
  return out;
}

Fp8LayerProjections take_fp8_projections(const ModelConfig& c, int64_t layer_index, LayerWeights& layer,
                                         Fp8SourceGeometry geometry, const StoredAsFp8& stored_as_fp8,
                                         Fp8RoutedExperts experts) {
  Fp8LayerProjections fp8;
  for (const Fp8Projection& p : fp8_projection_list(c, layer, experts)) {
    bool all_fp8 = true;
    for (const std::string& name : p.names) all_fp8 = all_fp8 && stored_as_fp8(layer_weight_name(layer_index, name));
    if (!all_fp8 || (layer.*p.f32).empty()) continue;
    const std::vector<float>& w = layer.*p.f32;
    const std::vector<int64_t> parts = p.rows.empty() ? std::vector{static_cast<int64_t>(w.size()) / p.cols} : p.rows;
    fp8.*p.fp8 = to_fp8_gpu_form(w, p.cols, parts, geometry);
    std::vector<float>().swap(layer.*p.f32);  // uploaded in FP8 only
  }
  return fp8;
}

Fp8GpuWeights make_fp8_gpu_weights(ModelWeights&& weights, Fp8SourceGeometry geometry,
                                   const StoredAsFp8& stored_as_fp8, Fp8RoutedExperts experts) {
  check_f32_matrices(weights, "the FP8 projections");
  std::vector<Fp8LayerProjections> fp8;
  fp8.reserve(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    fp8.push_back(take_fp8_projections(weights.config, static_cast<int64_t>(l), weights.layers[l], geometry,
                                       stored_as_fp8, experts));
  }
  return {to_bf16_weights(std::move(weights)), std::move(fp8)};
}

Fp8LayerConverter::Fp8LayerConverter(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, bool online,
                                     Fp8RoutedExperts experts)
    : config_(config),
      geometry_(online ? Fp8SourceGeometry{128, 128} : fp8_source_geometry(config.quantization)),
      stored_as_fp8_([&checkpoint, online](const std::string& name) {
        return online || (checkpoint.contains(name) && checkpoint.at(name).dtype == DType::kF8E4M3);
      }),
      online_(online),
      experts_(experts) {
  TACHYON_CHECK(online || config.quantization.quantized())
      << "internal: FP8 GPU weights asked for a checkpoint that is not FP8, without online quantization";
}

Fp8GpuLayer Fp8LayerConverter::operator()(int64_t layer_index, LayerWeights&& layer) const {
  // Online FP8: a projection the GPU holds in FP8 is quantized once, from the checkpoint's values
  // with online FP8's [128, 128] blocks, part by part as quantize_layer_fp8 takes it: the codes
  // and factors of its round trip, which the CPU reference computes with. What stays bf16 on the
  // GPU (the f32 fields left) then takes that round trip.
  Fp8GpuLayer out;
  out.fp8 = take_fp8_projections(config_, layer_index, layer, geometry_, stored_as_fp8_, experts_);
  if (online_) quantize_layer_fp8(config_, layer);
  out.bf16 = to_bf16_layer(std::move(layer));
  return out;
}

// Read layer by layer (load_weights_by_layer): each layer is quantized and converted before the
// next is read, so the host holds the model in its GPU form and one layer in f32.
Fp8GpuWeights load_fp8_gpu_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, bool online,
                                   Fp8RoutedExperts experts) {
  const Fp8LayerConverter convert(config, checkpoint, online, experts);
  std::vector<Fp8LayerProjections> fp8(static_cast<size_t>(config.num_hidden_layers));
  std::vector<BasicLayerWeights<uint16_t>> bf16_layers(fp8.size());
  Bf16ModelWeights rest = load_weights_by_layer(config, checkpoint, [&](int64_t l, LayerWeights&& layer) {
    Fp8GpuLayer converted = convert(l, std::move(layer));
    fp8[static_cast<size_t>(l)] = std::move(converted.fp8);
    bf16_layers[static_cast<size_t>(l)] = std::move(converted.bf16);
  });
  Fp8GpuWeights out{std::move(rest), std::move(fp8)};  // the embeddings, final norm and head
  out.bf16.layers = std::move(bf16_layers);
  return out;
}

}  // namespace tachyon::model
