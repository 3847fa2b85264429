#include "tachyon/model/gpu/gpu_weights.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <type_traits>

#include "tachyon/base/env_switch.h"
#include "tachyon/model/dsa_indexer.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::model::gpu {
namespace {

// TACHYON_FP8_PER_ROW=0: per-channel weights keep only their factors per 128 columns, so their
// products run block-scaled as the block formats' do (to time the per-row product against it).
bool fp8_per_row_enabled() { return env_switch_on("TACHYON_FP8_PER_ROW"); }

constexpr size_t kAlign = 256;

size_t align_up(size_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

// One allocation's worth of tensors: each piece's host bytes, where it lands in the buffer and
// the pointer that will address it. An empty host tensor (absent bias or norm) stays nullptr.
// Copies made on the way (the router bias in f32, reordered indexer rows, transposed factors)
// live here until the upload.
class Pieces {
 public:
  void add(const void* host, size_t bytes, const void** target) {
    if (bytes == 0) return;
    pieces_.push_back({host, bytes, size_, target});
    size_ = align_up(size_ + bytes);
  }
  void add(const std::vector<uint16_t>& tensor, const bf16** target) {
    add(tensor.data(), tensor.size() * sizeof(uint16_t), reinterpret_cast<const void**>(target));
  }
  // A copy that lives until upload() (a deque keeps each one's address while more are added).
  template <typename T>
  std::vector<T>& keep(std::vector<T>&& copy) {
    if constexpr (std::is_same_v<T, float>) return f32_copies_.emplace_back(std::move(copy));
    else return bf16_copies_.emplace_back(std::move(copy));
  }
  // One allocation, the copies, then the pointers.
  cuda::DeviceBuffer upload() const {
    cuda::DeviceBuffer storage(size_);
    for (const Piece& piece : pieces_) {
      void* at = static_cast<std::byte*>(storage.data()) + piece.offset;
      TACHYON_CUDA_CHECK(cudaMemcpy(at, piece.host, piece.bytes, cudaMemcpyHostToDevice));
      *piece.target = at;
    }
    return storage;
  }

 private:
  struct Piece {
    const void* host = nullptr;
    size_t bytes = 0;
    size_t offset = 0;
    const void** target = nullptr;
  };
  std::vector<Piece> pieces_;
  size_t size_ = 0;
  std::deque<std::vector<float>> f32_copies_;
  std::deque<std::vector<uint16_t>> bf16_copies_;
};

}  // namespace

CudaDenseWeights::CudaDenseWeights(const ModelConfig& config, bool fp8)
    : CudaDenseWeights(config, fp8, config.num_hidden_layers) {}

CudaDenseWeights::CudaDenseWeights(const ModelConfig& config, bool fp8, int64_t num_layers)
    : config_(config),
      layer_storage_(static_cast<size_t>(num_layers)),
      layers_(static_cast<size_t>(num_layers)),
      fp8_(fp8) {}

CudaDenseWeights::CudaDenseWeights(const Bf16ModelWeights& w, const std::vector<float>& inv_freq)
    : CudaDenseWeights(w.config, false, static_cast<int64_t>(w.layers.size())) {
  for (size_t i = 0; i < w.layers.size(); ++i) add_layer(static_cast<int64_t>(i), w.layers[i]);
  add_rest(w, inv_freq);
}

CudaDenseWeights::CudaDenseWeights(const Fp8GpuWeights& w, const std::vector<float>& inv_freq)
    : CudaDenseWeights(w.bf16.config, true, static_cast<int64_t>(w.bf16.layers.size())) {
  TACHYON_CHECK(w.fp8.size() == w.bf16.layers.size())
      << "FP8 projections for " << w.fp8.size() << " layers, bf16 weights for " << w.bf16.layers.size();
  for (size_t i = 0; i < w.fp8.size(); ++i) add_layer(static_cast<int64_t>(i), w.bf16.layers[i], &w.fp8[i]);
  add_rest(w.bf16, inv_freq);
}

bool CudaDenseWeights::complete() const {
  if (embed_tokens_ == nullptr) return false;
  for (const cuda::DeviceBuffer& layer : layer_storage_) {
    if (layer.bytes() == 0) return false;
  }
  return true;
}

size_t CudaDenseWeights::bytes() const {
  size_t total = rest_storage_.bytes();
  for (const cuda::DeviceBuffer& layer : layer_storage_) total += layer.bytes();
  return total;
}

void CudaDenseWeights::add_rest(const Bf16ModelWeights& w, const std::vector<float>& inv_freq) {
  TACHYON_CHECK(embed_tokens_ == nullptr) << "internal: the embeddings, norm and head uploaded twice";
  Pieces pieces;
  pieces.add(w.embed_tokens, &embed_tokens_);
  pieces.add(w.final_norm, &final_norm_);
  pieces.add(w.lm_head, &lm_head_);
  pieces.add(inv_freq.data(), inv_freq.size() * sizeof(float), reinterpret_cast<const void**>(&inv_freq_));
  rest_storage_ = pieces.upload();
  if (lm_head_ == nullptr) lm_head_ = embed_tokens_;  // tied
  embed_rows_ = static_cast<int64_t>(w.embed_tokens.size()) / config_.hidden_size;
}

void CudaDenseWeights::add_layer(int64_t i, const BasicLayerWeights<uint16_t>& l, const Fp8LayerProjections* fp8) {
  TACHYON_CHECK(i >= 0 && i < static_cast<int64_t>(layers_.size()) &&
                layer_storage_[static_cast<size_t>(i)].bytes() == 0)
      << "internal: layer " << i << " of " << layers_.size() << " uploaded twice or out of range";
  TACHYON_CHECK((fp8 != nullptr) == fp8_) << "internal: layer " << i << (fp8_ ? " without" : " with")
                                          << " FP8 projections in " << (fp8_ ? "an FP8" : "a bf16") << " run";
  Pieces pieces;
  CudaLayerWeights& d = layers_[static_cast<size_t>(i)];
  // GLM-5's interleaved indexer rope becomes the kernels' rotate-half one by reordering the
  // indexer's rows (model/dsa_indexer.h).
  using Tensor = std::vector<uint16_t>;
  const Tensor* wq_b = &l.indexer_wq_b;
  const Tensor* wk = &l.indexer_wk;
  const Tensor* k_norm = &l.indexer_k_norm;
  const Tensor* k_norm_bias = &l.indexer_k_norm_bias;
  if (config_.index_rope_layout == RopeLayout::kInterleaved && !l.indexer_wk.empty()) {
    const std::vector<int64_t> order = indexer_rotate_half_row_order(config_);
    wq_b = &pieces.keep(reorder_indexer_rows(l.indexer_wq_b, order, config_.q_lora_rank));
    wk = &pieces.keep(reorder_indexer_rows(l.indexer_wk, order, config_.hidden_size));
    k_norm = &pieces.keep(reorder_indexer_rows(l.indexer_k_norm, order, 1));
    k_norm_bias = &pieces.keep(reorder_indexer_rows(l.indexer_k_norm_bias, order, 1));
  }
  for (auto [tensor, target] : std::initializer_list<std::pair<const Tensor*, const bf16**>>{
           {&l.input_norm, &d.input_norm}, {&l.qkv, &d.qkv.values}, {&l.qkv_bias, &d.qkv_bias},
           {&l.q_norm, &d.q_norm}, {&l.k_norm, &d.k_norm}, {&l.o_proj, &d.o_proj.values},
           {&l.o_proj_bias, &d.o_proj_bias}, {&l.post_attention_norm, &d.post_attention_norm},
           {&l.gate_up, &d.gate_up.values}, {&l.gate_up_bias, &d.gate_up_bias}, {&l.down, &d.down.values},
           {&l.down_bias, &d.down_bias}, {&l.router, &d.router}, {&l.experts_gate_up, &d.experts_gate_up.values},
           {&l.experts_down, &d.experts_down.values}, {&l.shared_gate_up, &d.shared_gate_up.values},
           {&l.shared_down, &d.shared_down.values}, {&l.q_a_proj, &d.q_a_proj.values}, {&l.q_a_norm, &d.q_a_norm},
           {&l.q_b_proj, &d.q_b_proj.values}, {&l.kv_a_proj, &d.kv_a_proj.values}, {&l.kv_a_norm, &d.kv_a_norm},
           {&l.kv_b_proj, &d.kv_b_proj}, {wq_b, &d.indexer_wq_b}, {wk, &d.indexer_wk}, {k_norm, &d.indexer_k_norm},
           {k_norm_bias, &d.indexer_k_norm_bias}, {&l.indexer_weights_proj, &d.indexer_weights_proj}}) {
    pieces.add(*tensor, target);
  }
  if (fp8 != nullptr) {
    const Fp8LayerProjections& f = *fp8;
    // Codes and factors per row; `dense` (a linear's weight) also the factors transposed, for
    // cuBLASLt's block scaling, where the routed experts are read by the grouped products alone.
    auto place_fp8 = [&](const Fp8BlockWeight& q, LinearWeight& target, bool dense) {
      if (q.rows == 0) return;
      TACHYON_CHECK(q.block_rows == 1 && q.block_cols == kFp8ScaleCols)
          << "internal: FP8 weight not in the GPU form ([1, 128] blocks)";
      pieces.add(q.data.data(), q.data.size(), reinterpret_cast<const void**>(&target.fp8));
      pieces.add(q.scale_inv.data(), q.scale_inv.size() * sizeof(float), reinterpret_cast<const void**>(&target.scale));
      if (!dense) return;
      std::vector<float>& by_block = pieces.keep(std::vector<float>(q.scale_inv.size()));
      const int64_t blocks = q.scale_cols();
      for (int64_t r = 0; r < q.rows; ++r) {
        for (int64_t b = 0; b < blocks; ++b) by_block[b * q.rows + r] = q.scale_inv[r * blocks + b];
      }
      pieces.add(by_block.data(), by_block.size() * sizeof(float),
                 reinterpret_cast<const void**>(&target.scale_by_block));
      // One factor per row (every 128-column span of a row alike: per-channel and per-tensor
      // checkpoints): also [n], for the per-row-scaled product (LinearWeight::scale_by_row). Not
      // for rows of one span, whose block form already has one factor per row and input row.
      bool per_row = fp8_per_row_enabled() && blocks > 1;
      for (int64_t r = 0; r < q.rows && per_row; ++r) {
        const float first = q.scale_inv[r * blocks];
        for (int64_t b = 1; b < blocks && per_row; ++b) per_row = q.scale_inv[r * blocks + b] == first;
      }
      if (per_row) {
        std::vector<float>& by_row = pieces.keep(std::vector<float>(static_cast<size_t>(q.rows)));
        for (int64_t r = 0; r < q.rows; ++r) by_row[r] = q.scale_inv[r * blocks];
        pieces.add(by_row.data(), by_row.size() * sizeof(float), reinterpret_cast<const void**>(&target.scale_by_row));
      }
      (per_row ? fp8_per_row_ : fp8_by_block_) = true;
      largest_fp8_projection_ = std::max(largest_fp8_projection_, q.rows * q.cols);
      largest_fp8_input_ = std::max(largest_fp8_input_, q.cols);
      largest_fp8_output_ = std::max(largest_fp8_output_, q.rows);
    };
    for (auto [q, target] : std::initializer_list<std::pair<const Fp8BlockWeight*, LinearWeight*>>{
             {&f.qkv, &d.qkv}, {&f.o_proj, &d.o_proj}, {&f.gate_up, &d.gate_up}, {&f.down, &d.down},
             {&f.shared_gate_up, &d.shared_gate_up}, {&f.shared_down, &d.shared_down}, {&f.q_a_proj, &d.q_a_proj},
             {&f.q_b_proj, &d.q_b_proj}, {&f.kv_a_proj, &d.kv_a_proj}}) {
      place_fp8(*q, *target, /*dense=*/true);
    }
    place_fp8(f.experts_gate_up, d.experts_gate_up, /*dense=*/false);
    place_fp8(f.experts_down, d.experts_down, /*dense=*/false);
  }
  std::vector<float> router_bias;
  for (uint16_t bits : l.router_bias) router_bias.push_back(bf16_to_f32(bits));
  const std::vector<float>& bias = pieces.keep(std::move(router_bias));
  pieces.add(bias.data(), bias.size() * sizeof(float), reinterpret_cast<const void**>(&d.router_bias));
  layer_storage_[static_cast<size_t>(i)] = pieces.upload();
}

}  // namespace tachyon::model::gpu
