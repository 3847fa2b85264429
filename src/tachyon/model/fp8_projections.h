// The weights of an FP8 run on the GPU, made on the host: which projections run in FP8 there
// and the one form the GPU's FP8 kernels read (kernels/cuda/gemv.h fp8_gemv, kernels/cuda/fp8.h).
//
// The GPU form is E4M3 values with one f32 dequantization factor per row and 128 columns:
// Fp8BlockWeight with blocks of [1, 128]. Every source geometry maps onto it without loss (a
// [128, 128] block, a channel, a whole tensor repeat their factor over the rows and 128-column
// spans they cover), and fused weights ([q; k; v], [gate; up]) stack their parts' rows even where
// a part's row count is not a multiple of 128, as in the tiny test models. The factors cost
// 4 bytes per 128 weights (3% of the FP8 bytes).
//
// Where the values come from: the f32 weights the CPU reference computes with (an FP8
// checkpoint dequantized at load), each part quantized again with its source's own geometry. For
// a weight that was FP8 with factor amax / 448 (DeepSeek's, GLM's and llm-compressor's
// quantizers) that gives back the stored E4M3 bytes and the factor to within one f32 rounding,
// so the GPU computes with the values the CPU reference uses. Online FP8 (online_fp8.h)
// quantizes each part once, from the checkpoint's values with its [128, 128] blocks: the codes
// and factors of the round trip the CPU reference takes, exactly. The checkpoint's bytes are not
// carried through the loader on purpose: one reader (model_weights.cpp) stays the only place
// stored values become the model's, and the cost is one layer in f32 at a time during the load,
// not accuracy.
//
// FP8 on the GPU: the projections of dense attention and MLP (qkv, o, gate_up, down), latent
// attention's q_a, q_b (or q), kv_a and o, DeepSeek's shared experts, and the routed experts
// (kernels/cuda/moe.h's E4M3 grouped products). Kept in bf16 there (with the values the CPU
// reference uses, rounded to bf16): embeddings, the LM head, norms, routers, latent attention's
// kv_b (absorbed into the attention kernels) and the sparse indexer. A checkpoint projection
// stored unquantized stays bf16 (the routed experts of a layer: all of them FP8, or bf16).
// Tests: tests/unit/test_fp8_projections.cpp; on the GPU tests/gpu/test_cuda_fp8.cpp and
// tests/gpu/test_moe_kernels.cpp (MoeFp8Experts.*).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tachyon/model/fp8_checkpoint.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::model {

inline constexpr int64_t kFp8ScaleCols = 128;  // weight columns per factor in the GPU form

// One layer's FP8 projections; an empty weight (rows == 0) is a projection the layer does not
// have or keeps in bf16.
struct Fp8LayerProjections {
  Fp8BlockWeight qkv, o_proj, gate_up, down, shared_gate_up, shared_down, q_a_proj, q_b_proj, kv_a_proj;
  // The routed experts stacked as model_weights.h stacks them: [E * 2 * moe_intermediate, hidden]
  // (expert e's gate rows, then its up rows) and [E * hidden, moe_intermediate].
  Fp8BlockWeight experts_gate_up, experts_down;
  bool operator==(const Fp8LayerProjections&) const = default;
};

// A model as an FP8 run uploads it: bf16 for everything not in `fp8` (whose bf16 fields are then
// empty), and the FP8 projections per layer.
struct Fp8GpuWeights {
  Bf16ModelWeights bf16;
  std::vector<Fp8LayerProjections> fp8;
};

// How a source's factors tile a weight part: [block_rows, block_cols]; 0 means the part's whole
// extent (a per-tensor factor is [0, 0], a per-channel one [1, 0]).
struct Fp8SourceGeometry {
  int64_t block_rows = 128, block_cols = 128;
};
// The geometry of a checkpoint format; kNone (online FP8) is [128, 128].
Fp8SourceGeometry fp8_source_geometry(const QuantizationConfig& q);

// Quantizes a weight stacked from parts of `part_rows` rows each ([sum, cols] f32), each part
// with `geometry`, into the GPU form. Throws Error when the geometry's columns are not whole
// multiples of 128 (other than a whole row).
Fp8BlockWeight to_fp8_gpu_form(std::span<const float> weight, int64_t cols, const std::vector<int64_t>& part_rows,
                               Fp8SourceGeometry geometry);

// Whether the checkpoint stores the HF tensor `name` in FP8 (online FP8: always true).
using StoredAsFp8 = std::function<bool(const std::string& name)>;

// Whether an FP8 run's routed experts go to the GPU in FP8 (kernels/cuda/moe.h's E4M3 grouped
// products) or in bf16 (the values rounded, as before those products existed). The served form:
// model/fp8_served_experts.h.
enum class Fp8RoutedExperts { kBf16, kFp8 };

// One layer's FP8 projections (layer `layer_index` of the checkpoint) in the GPU form, their f32
// fields emptied; the projections `stored_as_fp8` does not name as FP8 stay in `layer`.
Fp8LayerProjections take_fp8_projections(const ModelConfig& config, int64_t layer_index, LayerWeights& layer,
                                         Fp8SourceGeometry geometry, const StoredAsFp8& stored_as_fp8,
                                         Fp8RoutedExperts experts);

// The GPU weights of an FP8 run from the f32 weights the CPU reference computes with, consumed.
Fp8GpuWeights make_fp8_gpu_weights(ModelWeights&& weights, Fp8SourceGeometry geometry, const StoredAsFp8& stored_as_fp8,
                                   Fp8RoutedExperts experts);

// One decoder layer in the GPU form: its FP8 projections and its other tensors in bf16.
struct Fp8GpuLayer {
  BasicLayerWeights<uint16_t> bf16;
  Fp8LayerProjections fp8;
};

// Turns a checkpoint's layers, as the f32 loader reads them, into the GPU form, one at a time
// (load_fp8_gpu_weights, and the tensor-parallel loaders of tp_shard_loader.h).
class Fp8LayerConverter {
 public:
  Fp8LayerConverter(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, bool online,
                    Fp8RoutedExperts experts);
  // Layer `layer_index`'s f32 weights, consumed.
  Fp8GpuLayer operator()(int64_t layer_index, LayerWeights&& layer) const;

 private:
  const ModelConfig& config_;
  Fp8SourceGeometry geometry_;
  StoredAsFp8 stored_as_fp8_;
  bool online_;
  Fp8RoutedExperts experts_;
};

// The GPU weights of an FP8 run, read from `checkpoint`: an FP8 checkpoint's (config.quantization
// says its format; its FP8 projections stay FP8), or with `online` (--quantization fp8) any
// checkpoint's, quantized at load as the CPU reference quantizes it (online_fp8.h). The same
// weights as make_fp8_gpu_weights of the whole f32 model, made one layer at a time: the host
// holds one layer in f32 during the load, not the model.
Fp8GpuWeights load_fp8_gpu_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, bool online,
                                   Fp8RoutedExperts experts);

// Every tensor of `weights` rounded to bf16 (round to nearest even), consumed layer by layer.
Bf16ModelWeights to_bf16_weights(ModelWeights&& weights);
// One layer's tensors rounded to bf16, consumed.
BasicLayerWeights<uint16_t> to_bf16_layer(LayerWeights&& layer);
// Every tensor widened back to f32 (exactly: a bf16 value is an f32 value).
ModelWeights to_f32_weights(const Bf16ModelWeights& weights);

}  // namespace tachyon::model
