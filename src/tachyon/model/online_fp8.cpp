#include "tachyon/model/online_fp8.h"

#include <span>

#include "tachyon/base/check.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::model {

namespace {

// Round-trips the [rows, cols] matrices stacked in `weight`, each of `parts` rows (in order).
void round_trip_parts(std::span<float> weight, int64_t cols, std::initializer_list<int64_t> parts) {
  if (weight.empty()) return;
  int64_t offset = 0;
  for (int64_t rows : parts) {
    if (rows == 0) continue;
    fp8_block_round_trip(weight.subspan(static_cast<size_t>(offset * cols), static_cast<size_t>(rows * cols)), rows,
                         cols);
    offset += rows;
  }
  TACHYON_CHECK(static_cast<size_t>(offset * cols) == weight.size())
      << "internal: online FP8 covered " << offset * cols << " of " << weight.size() << " values";
}

// A plain [rows, cols] weight whose row count follows from its size.
void round_trip(std::vector<float>& weight, int64_t cols) {
  if (weight.empty()) return;
  round_trip_parts(weight, cols, {static_cast<int64_t>(weight.size()) / cols});
}

// Experts stacked [num_experts, rows, cols]: each expert on its own, and within it `parts`.
void round_trip_experts(std::vector<float>& weight, int64_t num_experts, int64_t cols, std::initializer_list<int64_t> parts) {
  if (weight.empty()) return;
  const size_t per_expert = weight.size() / static_cast<size_t>(num_experts);
  for (int64_t e = 0; e < num_experts; ++e) {
    round_trip_parts(std::span<float>(weight).subspan(static_cast<size_t>(e) * per_expert, per_expert), cols, parts);
  }
}

}  // namespace

void check_quantization_method(const std::string& method) {
  TACHYON_CHECK(method.empty() || method == "fp8")
      << "--quantization: unknown method '" << method << "' (fp8: quantize the weights to FP8 at load time)";
}

void quantize_weights_fp8(ModelWeights& weights) {
  check_f32_matrices(weights, "online FP8 quantization");
  for (LayerWeights& layer : weights.layers) quantize_layer_fp8(weights.config, layer);
}

void quantize_layer_fp8(const ModelConfig& c, LayerWeights& l) {
  const int64_t hidden = c.hidden_size;
  round_trip_parts(l.qkv, hidden, {c.q_size(), c.kv_size(), c.kv_size()});
  if (!l.o_proj.empty()) round_trip(l.o_proj, static_cast<int64_t>(l.o_proj.size()) / hidden);
  const int64_t intermediate = static_cast<int64_t>(l.gate_up.size()) / (2 * hidden);
  round_trip_parts(l.gate_up, hidden, {intermediate, intermediate});
  if (!l.down.empty()) round_trip(l.down, static_cast<int64_t>(l.down.size()) / hidden);
  if (!l.experts_gate_up.empty()) {
    const int64_t moe = c.moe_intermediate_size;
    round_trip_experts(l.experts_gate_up, c.num_experts, hidden, {moe, moe});
    round_trip_experts(l.experts_down, c.num_experts, moe, {hidden});
  }
  const int64_t shared = static_cast<int64_t>(l.shared_gate_up.size()) / (2 * hidden);
  round_trip_parts(l.shared_gate_up, hidden, {shared, shared});
  if (!l.shared_down.empty()) round_trip(l.shared_down, shared);
  // Latent attention: q_a [q_lora, hidden]; q_b [heads * qk, q_lora or hidden]; kv_a [.., hidden];
  // kv_b [.., kv_lora].
  round_trip(l.q_a_proj, hidden);
  if (!l.q_b_proj.empty()) round_trip(l.q_b_proj, l.q_a_proj.empty() ? hidden : c.q_lora_rank);
  round_trip(l.kv_a_proj, hidden);
  if (!l.kv_b_proj.empty()) round_trip(l.kv_b_proj, c.kv_lora_rank);
  if (!l.indexer_wq_b.empty()) round_trip(l.indexer_wq_b, c.q_lora_rank);
  round_trip(l.indexer_wk, hidden);
}

}  // namespace tachyon::model
