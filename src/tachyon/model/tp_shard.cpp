#include "tachyon/model/tp_shard.h"

#include <algorithm>

#include "tachyon/base/check.h"

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
  std::vector<T> out(static_cast<size_t>(rows * count));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(in.begin() + r * width + begin, count, out.begin() + r * count);
  }
  return out;
}

}  // namespace

void check_tp_size(const ModelConfig& c, int tp) {
  TACHYON_CHECK(tp >= 1) << "tensor parallel size must be at least 1, got " << tp;
  TACHYON_CHECK(tp == 1 || !c.has_sparse_attention())
      << "tensor parallelism of DeepSeek sparse attention (" << c.architecture << ", a " << c.index_n_heads
      << "-head indexer keeping " << c.index_topk << " tokens) is not built yet; run with --tp 1";
  TACHYON_CHECK(tp == 1 || !c.is_moe()) << "tensor parallelism of mixture-of-experts models is not built yet ("
                                       << c.architecture << " has " << c.num_experts << " experts); run with --tp 1";
  TACHYON_CHECK(tp == 1 || !c.is_mla()) << "tensor parallelism of multi-head latent attention (" << c.architecture
                                       << ") is not built yet; run with --tp 1";
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
  TACHYON_CHECK(c.vocab_size % tp == 0) << "tensor parallel size " << tp << " does not divide vocab_size "
                                        << c.vocab_size << " (the vocabulary is not padded)";
}

ModelConfig tp_rank_config(const ModelConfig& config, int tp) {
  check_tp_size(config, tp);
  ModelConfig c = config;
  c.num_attention_heads = config.num_attention_heads / tp;
  c.num_key_value_heads = std::max<int64_t>(config.num_key_value_heads / tp, 1);
  c.intermediate_size = config.intermediate_size / tp;
  return c;
}

template <typename T>
BasicTpShard<T> shard_weights(const BasicModelWeights<T>& full, int tp_rank, int tp_size) {
  const ModelConfig& c = full.config;
  TACHYON_CHECK(tp_rank >= 0 && tp_rank < tp_size) << "tensor parallel rank " << tp_rank << " outside [0, " << tp_size << ")";
  BasicTpShard<T> shard;
  shard.tp_rank = tp_rank;
  shard.tp_size = tp_size;
  shard.weights.config = tp_rank_config(c, tp_size);
  const ModelConfig& rc = shard.weights.config;
  const int64_t hidden = c.hidden_size, hd = c.head_dim, inter = c.intermediate_size;
  const int64_t q_begin = tp_rank * rc.num_attention_heads * hd;  // first q row / o_proj column
  shard.kv_head_begin = tp_rank * c.num_key_value_heads / tp_size;  // split, or replicated when tp > KV
  const int64_t kv_begin = shard.kv_head_begin * hd;
  const int64_t i_begin = tp_rank * rc.intermediate_size;
  shard.vocab_rows = c.vocab_size / tp_size;
  shard.vocab_begin = tp_rank * shard.vocab_rows;

  shard.weights.embed_tokens = rows_of(full.embed_tokens, shard.vocab_begin, shard.vocab_rows, hidden);
  shard.weights.lm_head = rows_of(full.lm_head, shard.vocab_begin, shard.vocab_rows, hidden);  // empty when tied
  shard.weights.final_norm = full.final_norm;

  // Rows of the fused [q; k; v] that this rank's heads own, in the same [q; k; v] layout
  // (width = hidden for the weight, 1 for the bias).
  auto qkv_rows = [&](const std::vector<T>& in, int64_t width) {
    std::vector<T> out;
    append_rows(out, in, q_begin, rc.q_size(), width);
    append_rows(out, in, c.q_size() + kv_begin, rc.kv_size(), width);
    append_rows(out, in, c.q_size() + c.kv_size() + kv_begin, rc.kv_size(), width);
    return out;
  };
  // Rows of the fused [gate; up]: this rank's slice of gate, then the same slice of up.
  auto gate_up_rows = [&](const std::vector<T>& in, int64_t width) {
    std::vector<T> out;
    append_rows(out, in, i_begin, rc.intermediate_size, width);
    append_rows(out, in, inter + i_begin, rc.intermediate_size, width);
    return out;
  };

  for (const BasicLayerWeights<T>& w : full.layers) {
    BasicLayerWeights<T> s;
    s.input_norm = w.input_norm;
    s.post_attention_norm = w.post_attention_norm;
    s.q_norm = w.q_norm;
    s.k_norm = w.k_norm;
    s.qkv = qkv_rows(w.qkv, hidden);
    s.qkv_bias = qkv_rows(w.qkv_bias, 1);
    s.gate_up = gate_up_rows(w.gate_up, hidden);
    s.gate_up_bias = gate_up_rows(w.gate_up_bias, 1);
    s.o_proj = columns_of(w.o_proj, hidden, c.q_size(), q_begin, rc.q_size());
    s.o_proj_bias = w.o_proj_bias;  // whole: added once, after the all-reduce
    s.down = columns_of(w.down, hidden, inter, i_begin, rc.intermediate_size);
    s.down_bias = w.down_bias;  // whole: added once, after the all-reduce
    shard.weights.layers.push_back(std::move(s));
  }
  return shard;
}

template TpShard shard_weights(const ModelWeights&, int, int);
template Bf16TpShard shard_weights(const Bf16ModelWeights&, int, int);

}  // namespace tachyon::model
