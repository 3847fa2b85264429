// Online FP8 (--quantization fp8): a bf16/f32 checkpoint's linear weights quantized at load time
// to E4M3 with one dequantization factor per [128, 128] block (the scheme DeepSeek's FP8 releases
// use; vLLM's online FP8 keeps one per-tensor scale, which loses more on outlier blocks), and
// dequantized back: the CPU reference then computes with exactly the values an FP8 weight holds.
// Quantized: every projection of attention (q/k/v/o, MLA's, the DSA indexer's) and of the MLP
// (gate/up/down, experts, shared experts). Kept: embeddings, the LM head, norms, biases and the
// router (as vLLM and DeepSeek keep them). A fused weight (qkv, gate_up) is quantized as its
// parts, so no block straddles two projections.
// Tests: tests/unit/test_online_fp8.cpp; the canary served with it (server.canary_fp8).
#pragma once

#include <string>

#include "tachyon/model/model_weights.h"

namespace tachyon::model {

// The --quantization methods: "" (none) and "fp8". Throws Error naming the flag otherwise.
void check_quantization_method(const std::string& method);

void quantize_weights_fp8(ModelWeights& weights);
// One layer's share of quantize_weights_fp8 (its f32 fields), for loaders that go layer by layer.
void quantize_layer_fp8(const ModelConfig& config, LayerWeights& layer);

}  // namespace tachyon::model
