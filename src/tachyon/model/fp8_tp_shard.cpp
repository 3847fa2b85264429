#include "tachyon/model/fp8_tp_shard.h"

#include <algorithm>

#include <fmt/format.h>

#include "tachyon/base/check.h"
#include "tachyon/model/layer_plan.h"

namespace tachyon::model {
namespace {

// Rows [begin, begin + count) of a weight in the GPU form, with their factors, appended to `out`.
void append_fp8_rows(Fp8BlockWeight& out, const Fp8BlockWeight& in, int64_t begin, int64_t count) {
  if (in.rows == 0 || count == 0) return;
  TACHYON_CHECK(begin >= 0 && begin + count <= in.rows && (out.rows == 0 || out.cols == in.cols))
      << "internal: FP8 rows [" << begin << ", " << begin + count << ") of " << in.rows;
  if (out.rows == 0) out = Fp8BlockWeight{.rows = 0, .cols = in.cols, .block_rows = 1, .block_cols = kFp8ScaleCols};
  const int64_t cols = in.cols, scale_cols = in.scale_cols();
  out.data.insert(out.data.end(), in.data.begin() + begin * cols, in.data.begin() + (begin + count) * cols);
  out.scale_inv.insert(out.scale_inv.end(), in.scale_inv.begin() + begin * scale_cols,
                       in.scale_inv.begin() + (begin + count) * scale_cols);
  out.rows += count;
}

Fp8BlockWeight fp8_rows(const Fp8BlockWeight& in, int64_t begin, int64_t count) {
  Fp8BlockWeight out;
  append_fp8_rows(out, in, begin, count);
  return out;
}

// Columns [begin, begin + count) of every row: a cut must fall on a factor's span.
Fp8BlockWeight fp8_columns(const Fp8BlockWeight& in, int64_t begin, int64_t count, const char* what) {
  if (in.rows == 0) return {};
  TACHYON_CHECK(begin % kFp8ScaleCols == 0 && (count % kFp8ScaleCols == 0 || begin + count == in.cols))
      << "FP8 weights on tensor-parallel GPUs: a rank's share of " << what << " is its input columns [" << begin
      << ", " << begin + count << ") of " << in.cols << ", which do not begin and end on the " << kFp8ScaleCols
      << "-column spans of its factors (use a --tp that keeps each rank's width a multiple of " << kFp8ScaleCols
      << ", or expert parallelism for the experts)";
  Fp8BlockWeight out{.rows = in.rows, .cols = count, .block_rows = 1, .block_cols = kFp8ScaleCols};
  const int64_t scale_begin = begin / kFp8ScaleCols, scale_count = out.scale_cols(), in_scale_cols = in.scale_cols();
  out.data.resize(static_cast<size_t>(in.rows * count));
  out.scale_inv.resize(static_cast<size_t>(in.rows * scale_count));
  for (int64_t r = 0; r < in.rows; ++r) {
    std::copy_n(in.data.begin() + r * in.cols + begin, count, out.data.begin() + r * count);
    std::copy_n(in.scale_inv.begin() + r * in_scale_cols + scale_begin, scale_count,
                out.scale_inv.begin() + r * scale_count);
  }
  return out;
}

// A SwiGLU MLP of intermediate width `inter` (`blocks` of them stacked, the routed experts):
// rows [begin, begin + count) of gate and of up in each [gate; up] block, the same columns of down.
void shard_fp8_swiglu(const Fp8BlockWeight& gate_up, const Fp8BlockWeight& down, int64_t blocks, int64_t inter,
                      int64_t begin, int64_t count, const char* what, Fp8BlockWeight& gate_up_out,
                      Fp8BlockWeight& down_out) {
  gate_up_out = {};
  for (int64_t b = 0; gate_up.rows > 0 && b < blocks; ++b) {
    append_fp8_rows(gate_up_out, gate_up, b * 2 * inter + begin, count);
    append_fp8_rows(gate_up_out, gate_up, b * 2 * inter + inter + begin, count);
  }
  down_out = fp8_columns(down, begin, count, what);
}

}  // namespace

Fp8LayerProjections shard_fp8_layer(const ModelConfig& c, const Bf16TpShard& shard, const Fp8LayerProjections& f) {
  const ModelConfig& rc = shard.weights.config;
  const int tp_rank = shard.tp_rank;
  const int64_t hidden = c.hidden_size, vd = c.value_head_dim();
  const int64_t head_begin = tp_rank * rc.num_attention_heads;
  const int64_t kv_begin = shard.kv_head_begin * c.head_dim;
  const int64_t i_begin = tp_rank * rc.intermediate_size;
  Fp8LayerProjections s;
  // [q; k; v]: this rank's query heads and the kv heads they read, in the same layout.
  append_fp8_rows(s.qkv, f.qkv, head_begin * c.head_dim, rc.q_size());
  append_fp8_rows(s.qkv, f.qkv, c.q_size() + kv_begin, rc.kv_size());
  append_fp8_rows(s.qkv, f.qkv, c.q_size() + c.kv_size() + kv_begin, rc.kv_size());
  s.o_proj = fp8_columns(f.o_proj, head_begin * vd, rc.num_attention_heads * vd, "o_proj");
  shard_fp8_swiglu(f.gate_up, f.down, 1, c.intermediate_size, i_begin, rc.intermediate_size, "the MLP's down_proj",
                   s.gate_up, s.down);
  // Latent attention: the latents whole, q_b by heads (o_proj above).
  s.q_a_proj = f.q_a_proj;
  s.kv_a_proj = f.kv_a_proj;
  s.q_b_proj = fp8_rows(f.q_b_proj, head_begin * c.head_dim, rc.num_attention_heads * c.head_dim);
  if (shard.expert_parallel) {
    const int64_t inter = c.moe_intermediate_size;
    s.experts_gate_up = fp8_rows(f.experts_gate_up, shard.expert_begin * 2 * inter, shard.expert_count * 2 * inter);
    s.experts_down = fp8_rows(f.experts_down, shard.expert_begin * hidden, shard.expert_count * hidden);
    s.shared_gate_up = f.shared_gate_up;
    s.shared_down = f.shared_down;
  } else {
    const int64_t inter = c.moe_intermediate_size, per_rank = rc.moe_intermediate_size;
    shard_fp8_swiglu(f.experts_gate_up, f.experts_down, c.num_experts, inter, tp_rank * per_rank, per_rank,
                     "the routed experts' down_proj", s.experts_gate_up, s.experts_down);
    const int64_t shared_per_rank = per_rank * c.n_shared_experts;
    shard_fp8_swiglu(f.shared_gate_up, f.shared_down, 1, inter * c.n_shared_experts, tp_rank * shared_per_rank,
                     shared_per_rank, "the shared expert's down_proj", s.shared_gate_up, s.shared_down);
  }
  return s;
}

std::string fp8_tp_unsupported_reason(const ModelConfig& c, int tp_size, bool expert_parallel) {
  if (tp_size <= 1) return "";
  bool dense_mlp = false, experts = false;
  for (const LayerKinds& kinds : layer_plan(c)) (kinds.mlp == MlpKind::kExperts ? experts : dense_mlp) = true;
  const std::vector<std::pair<std::string, int64_t>> cuts = {
      {"o_proj", c.num_attention_heads * c.value_head_dim()},
      {"the MLP's down_proj", dense_mlp ? c.intermediate_size : 0},
      {"the routed experts' down_proj", experts && !expert_parallel ? c.moe_intermediate_size : 0},
      {"the shared expert's down_proj",
       experts && !expert_parallel ? c.moe_intermediate_size * c.n_shared_experts : 0}};
  for (const auto& [name, width] : cuts) {
    if (width == 0 || (width / tp_size) % kFp8ScaleCols == 0) continue;
    return fmt::format("{} takes {} input columns per rank at --tp {} ({} in all), not a multiple of the {}-column "
                       "spans of FP8 factors",
                       name, width / tp_size, tp_size, width, kFp8ScaleCols);
  }
  return "";
}

Fp8TpShard shard_fp8_weights(const Fp8GpuWeights& full, int tp_rank, int tp_size, bool expert_parallel) {
  Fp8TpShard out{shard_weights(full.bf16, tp_rank, tp_size, expert_parallel), {}};
  for (const Fp8LayerProjections& f : full.fp8) out.fp8.push_back(shard_fp8_layer(full.bf16.config, out.base, f));
  return out;
}

}  // namespace tachyon::model
