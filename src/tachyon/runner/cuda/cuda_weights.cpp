#include "tachyon/runner/cuda/cuda_weights.h"

namespace tachyon::runner {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

// Places host tensors in one device buffer: first sizes every tensor (plan), then copies.
class Packer {
 public:
  size_t reserve(size_t bytes) {
    const size_t at = size_;
    size_ = align_up(size_ + bytes);
    return at;
  }
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

}  // namespace

CudaDenseWeights::CudaDenseWeights(const model::Bf16ModelWeights& w, const std::vector<float>& inv_freq)
    : config_(w.config) {
  // Pass 1: offsets. Pass 2: copies. An empty vector (absent bias or norm) maps to nullptr.
  struct Piece {
    const void* host;
    size_t bytes;
    size_t offset;
  };
  std::vector<Piece> pieces;
  Packer packer;
  auto place = [&](const std::vector<uint16_t>& tensor) -> size_t {
    if (tensor.empty()) return SIZE_MAX;
    const size_t bytes = tensor.size() * sizeof(uint16_t);
    pieces.push_back({tensor.data(), bytes, packer.reserve(bytes)});
    return pieces.back().offset;
  };
  struct LayerOffsets {
    size_t input_norm, qkv, qkv_bias, q_norm, k_norm, o_proj, o_proj_bias, post_norm, gate_up, gate_up_bias, down,
        down_bias, router, experts_gate_up, experts_down;
  };
  const size_t embed = place(w.embed_tokens);
  std::vector<LayerOffsets> offsets;
  for (const auto& l : w.layers) {
    offsets.push_back({place(l.input_norm), place(l.qkv), place(l.qkv_bias), place(l.q_norm), place(l.k_norm),
                       place(l.o_proj), place(l.o_proj_bias), place(l.post_attention_norm), place(l.gate_up),
                       place(l.gate_up_bias), place(l.down), place(l.down_bias), place(l.router),
                       place(l.experts_gate_up), place(l.experts_down)});
  }
  const size_t final_norm = place(w.final_norm);
  const size_t lm_head = place(w.lm_head);
  const size_t freq_bytes = inv_freq.size() * sizeof(float);
  pieces.push_back({inv_freq.data(), freq_bytes, packer.reserve(freq_bytes)});
  const size_t freq = pieces.back().offset;

  storage_ = cuda::DeviceBuffer(packer.size());
  for (const Piece& piece : pieces) {
    TACHYON_CUDA_CHECK(cudaMemcpy(static_cast<std::byte*>(storage_.data()) + piece.offset, piece.host, piece.bytes,
                                  cudaMemcpyHostToDevice));
  }
  auto at = [&](size_t offset) -> const bf16* {
    return offset == SIZE_MAX ? nullptr : reinterpret_cast<const bf16*>(static_cast<std::byte*>(storage_.data()) + offset);
  };
  embed_tokens_ = at(embed);
  for (const LayerOffsets& o : offsets) {
    layers_.push_back({at(o.input_norm), at(o.qkv), at(o.qkv_bias), at(o.q_norm), at(o.k_norm), at(o.o_proj),
                       at(o.o_proj_bias), at(o.post_norm), at(o.gate_up), at(o.gate_up_bias), at(o.down), at(o.down_bias),
                       at(o.router), at(o.experts_gate_up), at(o.experts_down)});
  }
  final_norm_ = at(final_norm);
  lm_head_ = lm_head == SIZE_MAX ? embed_tokens_ : at(lm_head);
  inv_freq_ = reinterpret_cast<const float*>(static_cast<std::byte*>(storage_.data()) + freq);
}

}  // namespace tachyon::runner
