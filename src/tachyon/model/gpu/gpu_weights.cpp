#include "tachyon/model/gpu/gpu_weights.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "tachyon/model/dsa_indexer.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::model::gpu {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

// One tensor's trip to the device: its host bytes, where it lands in the buffer, and the
// pointer that will address it. An empty host tensor (absent bias or norm) stays nullptr.
struct Piece {
  const void* host = nullptr;
  size_t bytes = 0;
  size_t offset = 0;
  const void** target = nullptr;
};

}  // namespace

CudaDenseWeights::CudaDenseWeights(const Bf16ModelWeights& w, const std::vector<float>& inv_freq) : config_(w.config) {
  upload(w, inv_freq, nullptr);
}

CudaDenseWeights::CudaDenseWeights(const Fp8GpuWeights& w, const std::vector<float>& inv_freq)
    : config_(w.bf16.config), fp8_(true) {
  TACHYON_CHECK(w.fp8.size() == w.bf16.layers.size())
      << "FP8 projections for " << w.fp8.size() << " layers, bf16 weights for " << w.bf16.layers.size();
  upload(w.bf16, inv_freq, &w.fp8);
}

void CudaDenseWeights::upload(const Bf16ModelWeights& w, const std::vector<float>& inv_freq,
                              const std::vector<Fp8LayerProjections>* fp8) {
  // Pass 1: every tensor's offset. Pass 2: one allocation, the copies, then the pointers.
  std::vector<Piece> pieces;
  size_t size = 0;
  auto place_bytes = [&](const void* host, size_t bytes, const void** target) {
    if (bytes == 0) return;
    pieces.push_back({host, bytes, size, target});
    size = align_up(size + bytes);
  };
  auto place = [&](const std::vector<uint16_t>& tensor, const bf16** target) {
    place_bytes(tensor.data(), tensor.size() * sizeof(uint16_t), reinterpret_cast<const void**>(target));
  };
  layers_.resize(w.layers.size());
  // The router bias goes up in f32; its converted copies live until the upload.
  std::vector<std::vector<float>> f32_copies(w.layers.size());
  // FP8 factors transposed for cuBLASLt (LinearWeight::scale_by_block); a deque keeps each
  // copy's address while more are added, until the upload.
  std::deque<std::vector<float>> scale_copies;
  std::vector<std::vector<std::vector<uint16_t>>> reordered(w.layers.size());
  place(w.embed_tokens, &embed_tokens_);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const auto& l = w.layers[i];
    CudaLayerWeights& d = layers_[i];
    // GLM-5's interleaved indexer rope becomes the kernels' rotate-half one by reordering the
    // indexer's rows (model/dsa_indexer.h); the reordered copies live until the upload.
    using Tensor = std::vector<uint16_t>;
    const Tensor* wq_b = &l.indexer_wq_b;
    const Tensor* wk = &l.indexer_wk;
    const Tensor* k_norm = &l.indexer_k_norm;
    const Tensor* k_norm_bias = &l.indexer_k_norm_bias;
    if (config_.index_rope_layout == RopeLayout::kInterleaved && !l.indexer_wk.empty()) {
      const std::vector<int64_t> order = indexer_rotate_half_row_order(config_);
      auto& copies = reordered[i];
      copies = {reorder_indexer_rows(l.indexer_wq_b, order, config_.q_lora_rank),
                reorder_indexer_rows(l.indexer_wk, order, config_.hidden_size),
                reorder_indexer_rows(l.indexer_k_norm, order, 1),
                reorder_indexer_rows(l.indexer_k_norm_bias, order, 1)};
      wq_b = &copies[0];
      wk = &copies[1];
      k_norm = &copies[2];
      k_norm_bias = &copies[3];
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
      place(*tensor, target);
    }
    if (fp8 != nullptr) {
      const Fp8LayerProjections& f = (*fp8)[i];
      // Codes and factors per row; `dense` (a linear's weight) also the factors transposed, for
      // cuBLASLt's block scaling, where the routed experts are read by the grouped products alone.
      auto place_fp8 = [&](const Fp8BlockWeight& q, LinearWeight& target, bool dense) {
        if (q.rows == 0) return;
        TACHYON_CHECK(q.block_rows == 1 && q.block_cols == kFp8ScaleCols)
            << "internal: FP8 weight not in the GPU form ([1, 128] blocks)";
        place_bytes(q.data.data(), q.data.size(), reinterpret_cast<const void**>(&target.fp8));
        place_bytes(q.scale_inv.data(), q.scale_inv.size() * sizeof(float),
                    reinterpret_cast<const void**>(&target.scale));
        if (!dense) return;
        std::vector<float>& by_block = scale_copies.emplace_back(q.scale_inv.size());
        const int64_t blocks = q.scale_cols();
        for (int64_t r = 0; r < q.rows; ++r) {
          for (int64_t b = 0; b < blocks; ++b) by_block[b * q.rows + r] = q.scale_inv[r * blocks + b];
        }
        place_bytes(by_block.data(), by_block.size() * sizeof(float),
                    reinterpret_cast<const void**>(&target.scale_by_block));
        largest_fp8_projection_ = std::max(largest_fp8_projection_, q.rows * q.cols);
        largest_fp8_input_ = std::max(largest_fp8_input_, q.cols);
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
    for (uint16_t bits : l.router_bias) f32_copies[i].push_back(bf16_to_f32(bits));
    place_bytes(f32_copies[i].data(), f32_copies[i].size() * sizeof(float), reinterpret_cast<const void**>(&d.router_bias));
  }
  place(w.final_norm, &final_norm_);
  place(w.lm_head, &lm_head_);
  place_bytes(inv_freq.data(), inv_freq.size() * sizeof(float), reinterpret_cast<const void**>(&inv_freq_));

  storage_ = cuda::DeviceBuffer(size);
  for (const Piece& piece : pieces) {
    void* at = static_cast<std::byte*>(storage_.data()) + piece.offset;
    TACHYON_CUDA_CHECK(cudaMemcpy(at, piece.host, piece.bytes, cudaMemcpyHostToDevice));
    *piece.target = at;
  }
  if (lm_head_ == nullptr) lm_head_ = embed_tokens_;  // tied
}

}  // namespace tachyon::model::gpu
