// Which configs the GPU decoder's layer blocks serve (model/gpu/): each block's reason it cannot
// serve a config, in plain C++ so the CPU build can tell a user why --device cuda would refuse a
// model (app/runner_factory.h) and the GPU blocks check the same conditions at start-up.
// "" means served.
#pragma once

#include <string>

#include "tachyon/model/model_config.h"

namespace tachyon::model {

std::string dense_attention_gpu_unsupported(const ModelConfig& config);
std::string latent_attention_gpu_unsupported(const ModelConfig& config);  // MLA, with the DSA selector
std::string moe_mlp_gpu_unsupported(const ModelConfig& config);
// The first reason any block of this model gives, or the decoder's own (16-byte loads).
std::string gpu_decoder_unsupported(const ModelConfig& config);
// Why the GPU cannot hold this model's KV cache in FP8 (--kv-cache-dtype fp8), "" when it can: the
// FP8 cache serves dense attention, and MLA's latent rows and DSA's index keys, on one GPU
// (tests/gpu/test_cuda_fp8.cpp).
std::string fp8_kv_cache_gpu_unsupported(const ModelConfig& config, bool tensor_parallel);

}  // namespace tachyon::model
