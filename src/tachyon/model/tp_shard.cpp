#include "tachyon/model/tp_shard.h"

#include <algorithm>
#include <type_traits>

#include "tachyon/base/check.h"
#include "tachyon/model/gpu_support.h"

namespace tachyon::model {
namespace {

// Appends rows [begin, begin + count) of a row-major [*, width] matrix (or vector when width 1).
template <typename T>
void append_rows(std::vector<T>& out, const std::vector<T>& in, int64_t begin, int64_t count, int64_t width) {
  if (in.empty()) return;  // an absent bias stays absent
  out.insert(out.end(), in.begin() + begin * width, in.begin() + (begin + count) * width);
}

template <typename T>
std::vector<T> rows_of(const std::vector<T>& in, int64_t begin, int64_t count, int64_t width) {
  std::vector<T> out;
  append_rows(out, in, begin, count, width);
  return out;
}

// Columns [begin, begin + count) of a row-major [rows, width] matrix: [rows, count].
template <typename T>
std::vector<T> columns_of(const std::vector<T>& in, int64_t rows, int64_t width, int64_t begin, int64_t count) {
  if (in.empty()) return {};  // absent here (held in FP8 beside these weights: fp8_tp_shard.h)
  std::vector<T> out(static_cast<size_t>(rows * count));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(in.begin() + r * width + begin, count, out.begin() + r * count);
  }
  return out;
}

// One rank's slice of a SwiGLU MLP of intermediate width `inter` split over the ranks (a dense
// MLP, the shared expert, or each of `blocks` stacked routed experts): rows [begin, begin +
// count) of gate AND of up in each fused [gate; up] block, and the same input columns of down.
template <typename T>
void shard_swiglu(const std::vector<T>& gate_up, const std::vector<T>& down, int64_t blocks, int64_t hidden,
                  int64_t inter, int64_t begin, int64_t count, std::vector<T>& gate_up_out, std::vector<T>& down_out) {
  gate_up_out.clear();
  for (int64_t b = 0; !gate_up.empty() && b < blocks; ++b) {
    append_rows(gate_up_out, gate_up, b * 2 * inter + begin, count, hidden);
    append_rows(gate_up_out, gate_up, b * 2 * inter + inter + begin, count, hidden);
  }
  down_out = columns_of(down, blocks * hidden, inter, begin, count);
}

// A MoE layer's experts: the router (and DeepSeek's score bias) whole on every rank, so that
// every rank routes every token alike; each routed expert and the shared expert split along
// their intermediate dim, or, under expert parallelism, the shard's experts whole and the shared
// expert replicated.
template <typename T>
void shard_experts(const ModelConfig& c, const ModelConfig& rc, const BasicTpShard<T>& shard,
                   const BasicLayerWeights<T>& w, BasicLayerWeights<T>& s) {
  if (w.router.empty()) return;
  s.router = w.router;
  s.router_bias = w.router_bias;
  if (shard.expert_parallel) {
    const int64_t hidden = c.hidden_size, inter = c.moe_intermediate_size;
    s.experts_gate_up = rows_of(w.experts_gate_up, shard.expert_begin * 2 * inter, shard.expert_count * 2 * inter, hidden);
    s.experts_down = rows_of(w.experts_down, shard.expert_begin * hidden, shard.expert_count * hidden, inter);
    s.shared_gate_up = w.shared_gate_up;
    s.shared_down = w.shared_down;
    return;
  }
  const int tp_rank = shard.tp_rank;
  const int64_t hidden = c.hidden_size, inter = c.moe_intermediate_size, per_rank = rc.moe_intermediate_size;
  shard_swiglu(w.experts_gate_up, w.experts_down, c.num_experts, hidden, inter, tp_rank * per_rank, per_rank,
               s.experts_gate_up, s.experts_down);
  const int64_t shared = inter * c.n_shared_experts, shared_per_rank = per_rank * c.n_shared_experts;
  shard_swiglu(w.shared_gate_up, w.shared_down, 1, hidden, shared, tp_rank * shared_per_rank, shared_per_rank,
               s.shared_gate_up, s.shared_down);
}

// Latent attention (mla.h): what every head shares, q_a_proj and its norm (the q LoRA latent) and
// kv_a_proj_with_mqa and its norm (the cached latent [c_kv | k_pe]), stays whole on every rank, so
// every rank computes and caches the same latent; the per-head up-projections keep this rank's
// heads' rows: qk rows each of q_b_proj, qk_nope + v_head_dim rows each of kv_b_proj. (o_proj is
// split by heads with the dense attention's.)
// DeepSeek sparse attention's lightning indexer is REPLICATED, not split by index heads: every
// rank computes the same index scores from the same replicated inputs and so the same top-k with
// no collective. Splitting its heads would need an all-reduce of the [n, context] score matrix
// before top-k in every indexer layer (O(n * context) per prefill, far more than the [n, hidden]
// of o_proj's), to save a projection of q_lora_rank x 64 x 128 (DeepSeek-V3.2) that is small
// beside the attention's; its key cache is one row per token whatever the split.
template <typename T>
void shard_latent_attention(const ModelConfig& c, const ModelConfig& rc, int tp_rank, const BasicLayerWeights<T>& w,
                            BasicLayerWeights<T>& s) {
  if (w.kv_b_proj.empty()) return;
  const int64_t heads = rc.num_attention_heads, head_begin = tp_rank * heads;
  const int64_t q_in = c.q_lora_rank > 0 ? c.q_lora_rank : c.hidden_size, kv_rows = c.qk_nope_head_dim + c.v_head_dim;
  s.q_a_proj = w.q_a_proj;
  s.q_a_norm = w.q_a_norm;
  s.kv_a_proj = w.kv_a_proj;
  s.kv_a_norm = w.kv_a_norm;
  s.q_b_proj = rows_of(w.q_b_proj, head_begin * c.head_dim, heads * c.head_dim, q_in);
  s.kv_b_proj = rows_of(w.kv_b_proj, head_begin * kv_rows, heads * kv_rows, c.kv_lora_rank);
  s.indexer_wq_b = w.indexer_wq_b;
  s.indexer_wk = w.indexer_wk;
  s.indexer_k_norm = w.indexer_k_norm;
  s.indexer_k_norm_bias = w.indexer_k_norm_bias;
  s.indexer_weights_proj = w.indexer_weights_proj;
}

}  // namespace

void check_tp_size(const ModelConfig& c, int tp, bool expert_parallel) {
  TACHYON_CHECK(tp >= 1) << "tensor parallel size must be at least 1, got " << tp;
  if (expert_parallel) {
    TACHYON_CHECK(c.is_moe()) << "--enable-expert-parallel: " << c.architecture
                              << " has no mixture-of-experts layer to spread over the ranks";
    TACHYON_CHECK(tp >= 2) << "--enable-expert-parallel spreads the experts over the --tp ranks; with --tp 1 "
                              "there is one rank (raise --tp or drop the flag)";
    TACHYON_CHECK(c.num_experts % tp == 0) << "expert parallel size " << tp << " does not divide num_experts "
                                           << c.num_experts << " (every rank holds the same number of experts)";
  }
  TACHYON_CHECK(c.num_attention_heads % tp == 0)
      << "tensor parallel size " << tp << " does not divide num_attention_heads " << c.num_attention_heads;
  const int64_t kv = c.num_key_value_heads;
  if (tp <= kv) {
    TACHYON_CHECK(kv % tp == 0) << "tensor parallel size " << tp << " does not divide num_key_value_heads " << kv;
  } else {
    TACHYON_CHECK(tp % kv == 0) << "tensor parallel size " << tp << " exceeds num_key_value_heads " << kv
                                << " and is not a multiple of it, so kv heads cannot be replicated evenly";
  }
  TACHYON_CHECK(c.intermediate_size % tp == 0)
      << "tensor parallel size " << tp << " does not divide intermediate_size " << c.intermediate_size;
  if (c.is_moe() && !expert_parallel) {  // every expert's intermediate dim is split (the shared expert's with it)
    TACHYON_CHECK(c.moe_intermediate_size % tp == 0) << "tensor parallel size " << tp
                                                     << " does not divide moe_intermediate_size "
                                                     << c.moe_intermediate_size;
  }
  TACHYON_CHECK(c.vocab_size % tp == 0) << "tensor parallel size " << tp << " does not divide vocab_size "
                                        << c.vocab_size << " (the vocabulary is not padded)";
}

std::string cuda_tp_unsupported_reason(const ModelConfig& c, int tp, bool expert_parallel) {
  const std::string whole = gpu_decoder_unsupported(c);
  if (!whole.empty()) return "the GPU decoder cannot serve " + c.architecture + ": " + whole;
  if (tp <= 1 && !expert_parallel) return "";
  ModelConfig rank;
  try {
    rank = tp_rank_config(c, tp, expert_parallel);
  } catch (const Error& e) {
    return e.what();
  }
  const std::string why = gpu_decoder_unsupported(rank);
  if (why.empty()) return "";
  return "a rank's shard of " + c.architecture + " at --tp " + std::to_string(tp) + " is outside the CUDA kernels' limits: " +
         why + "; use a smaller --tp on the GPU, or --device cpu";
}

int64_t kv_head_begin(const ModelConfig& config, int tp_rank, int tp_size) {
  return tp_rank * config.num_key_value_heads / tp_size;
}

ModelConfig tp_rank_config(const ModelConfig& config, int tp, bool expert_parallel) {
  check_tp_size(config, tp, expert_parallel);
  ModelConfig c = config;
  c.num_attention_heads = config.num_attention_heads / tp;
  c.num_key_value_heads = std::max<int64_t>(config.num_key_value_heads / tp, 1);
  c.intermediate_size = config.intermediate_size / tp;
  if (!expert_parallel) c.moe_intermediate_size = config.moe_intermediate_size / tp;  // the shared expert's follows
  return c;
}

void check_dp_size(const ModelConfig& c, int dp, int tp) {
  TACHYON_CHECK(dp >= 1) << "--dp must be at least 1, got " << dp;
  TACHYON_CHECK(c.is_moe()) << "--dp " << dp << ": " << c.architecture
                            << " has no mixture-of-experts layer; data-parallel attention is built for MoE models, "
                               "whose experts it spreads over the DP x TP ranks (serve a dense model with --tp, or "
                               "run one server per replica)";
  TACHYON_CHECK(c.num_experts % (dp * tp) == 0)
      << "--dp " << dp << " x --tp " << tp << " = " << dp * tp << " expert-parallel ranks do not divide num_experts "
      << c.num_experts << " (every rank holds the same number of experts)";
  if (tp > 1) check_tp_size(c, tp, /*expert_parallel=*/true);
}

template <typename T>
BasicTpShard<T> shard_geometry(const ModelConfig& c, int tp_rank, int tp_size, int ep_rank, int ep_size) {
  const bool expert_parallel = ep_size > 0;
  TACHYON_CHECK(tp_rank >= 0 && tp_rank < tp_size) << "tensor parallel rank " << tp_rank << " outside [0, " << tp_size << ")";
  BasicTpShard<T> shard;
  shard.tp_rank = tp_rank;
  shard.tp_size = tp_size;
  // Whole experts keep their width; one TP rank (a data-parallel replica of one rank) splits nothing.
  shard.weights.config = tp_rank_config(c, tp_size, expert_parallel && tp_size > 1);
  if (expert_parallel) {
    TACHYON_CHECK(ep_rank >= 0 && ep_rank < ep_size && c.num_experts % ep_size == 0)
        << "expert parallel rank " << ep_rank << " of " << ep_size << " over " << c.num_experts << " experts";
    shard.expert_parallel = true;
    shard.expert_count = c.num_experts / ep_size;
    shard.expert_begin = ep_rank * shard.expert_count;
  }
  shard.kv_head_begin = kv_head_begin(c, tp_rank, tp_size);
  shard.vocab_rows = c.vocab_size / tp_size;
  shard.vocab_begin = tp_rank * shard.vocab_rows;
  return shard;
}

template <typename T>
BasicLayerWeights<T> shard_layer(const ModelConfig& c, const BasicTpShard<T>& shard, const BasicLayerWeights<T>& w) {
  const ModelConfig& rc = shard.weights.config;
  const int tp_rank = shard.tp_rank;
  const int64_t hidden = c.hidden_size, hd = c.head_dim, inter = c.intermediate_size;
  const int64_t head_begin = tp_rank * rc.num_attention_heads, vd = c.value_head_dim();
  const int64_t q_begin = head_begin * hd;  // first q row
  const int64_t kv_begin = shard.kv_head_begin * hd;
  const int64_t i_begin = tp_rank * rc.intermediate_size;
  // Rows of the fused [q; k; v] that this rank's heads own, in the same [q; k; v] layout
  // (width = hidden for the weight, 1 for the bias).
  auto qkv_rows = [&](const std::vector<T>& in, int64_t width) {
    std::vector<T> out;
    append_rows(out, in, q_begin, rc.q_size(), width);
    append_rows(out, in, c.q_size() + kv_begin, rc.kv_size(), width);
    append_rows(out, in, c.q_size() + c.kv_size() + kv_begin, rc.kv_size(), width);
    return out;
  };
  // Rows of the fused [gate; up] bias: this rank's slice of gate, then the same slice of up.
  auto gate_up_bias_rows = [&](const std::vector<T>& in) {
    std::vector<T> out;
    append_rows(out, in, i_begin, rc.intermediate_size, 1);
    append_rows(out, in, inter + i_begin, rc.intermediate_size, 1);
    return out;
  };
  BasicLayerWeights<T> s;
  s.input_norm = w.input_norm;
  s.post_attention_norm = w.post_attention_norm;
  s.q_norm = w.q_norm;
  s.k_norm = w.k_norm;
  s.qkv = qkv_rows(w.qkv, hidden);
  s.qkv_bias = qkv_rows(w.qkv_bias, 1);
  shard_swiglu(w.gate_up, w.down, 1, hidden, inter, i_begin, rc.intermediate_size, s.gate_up, s.down);
  s.gate_up_bias = gate_up_bias_rows(w.gate_up_bias);
  s.o_proj = columns_of(w.o_proj, hidden, c.num_attention_heads * vd, head_begin * vd, rc.num_attention_heads * vd);
  s.o_proj_bias = w.o_proj_bias;  // whole: added once, after the all-reduce
  s.down_bias = w.down_bias;  // whole: added once, after the all-reduce
  shard_latent_attention(c, rc, tp_rank, w, s);
  shard_experts(c, rc, shard, w, s);
  return s;
}

template <typename T>
void shard_vocab(const BasicModelWeights<T>& full, BasicTpShard<T>& shard) {
  const int64_t hidden = full.config.hidden_size;
  shard.weights.embed_tokens = rows_of(full.embed_tokens, shard.vocab_begin, shard.vocab_rows, hidden);
  shard.weights.lm_head = rows_of(full.lm_head, shard.vocab_begin, shard.vocab_rows, hidden);  // empty when tied
  shard.weights.final_norm = full.final_norm;
}

namespace {

template <typename T>
BasicTpShard<T> shard_with_experts(const BasicModelWeights<T>& full, int tp_rank, int tp_size, int ep_rank,
                                   int ep_size) {
  if constexpr (std::is_same_v<T, float>) check_f32_matrices(full, "tensor-parallel sharding");
  BasicTpShard<T> shard = shard_geometry<T>(full.config, tp_rank, tp_size, ep_rank, ep_size);
  shard_vocab(full, shard);
  for (const BasicLayerWeights<T>& w : full.layers) shard.weights.layers.push_back(shard_layer(full.config, shard, w));
  return shard;
}

}  // namespace

template <typename T>
BasicTpShard<T> shard_weights(const BasicModelWeights<T>& full, int tp_rank, int tp_size, bool expert_parallel) {
  return shard_with_experts(full, tp_rank, tp_size, tp_rank, expert_parallel ? tp_size : 0);
}

template <typename T>
BasicTpShard<T> shard_weights(const BasicModelWeights<T>& full, int tp_rank, int tp_size, int ep_rank, int ep_size) {
  TACHYON_CHECK(ep_size >= 1) << "expert parallel size " << ep_size;
  return shard_with_experts(full, tp_rank, tp_size, ep_rank, ep_size);
}

template TpShard shard_geometry(const ModelConfig&, int, int, int, int);
template Bf16TpShard shard_geometry(const ModelConfig&, int, int, int, int);
template LayerWeights shard_layer(const ModelConfig&, const TpShard&, const LayerWeights&);
template BasicLayerWeights<uint16_t> shard_layer(const ModelConfig&, const Bf16TpShard&, const BasicLayerWeights<uint16_t>&);
template void shard_vocab(const ModelWeights&, TpShard&);
template void shard_vocab(const Bf16ModelWeights&, Bf16TpShard&);
std::vector<TpShard> shard_tp_group(const ModelWeights& full, int tp_size, bool expert_parallel) {
  check_tp_size(full.config, tp_size, expert_parallel);
  std::vector<TpShard> shards;
  for (int r = 0; r < tp_size; ++r) shards.push_back(shard_weights(full, r, tp_size, expert_parallel));
  return shards;
}

template TpShard shard_weights(const ModelWeights&, int, int, bool);
template Bf16TpShard shard_weights(const Bf16ModelWeights&, int, int, bool);
template TpShard shard_weights(const ModelWeights&, int, int, int, int);
template Bf16TpShard shard_weights(const Bf16ModelWeights&, int, int, int, int);

}  // namespace tachyon::model
