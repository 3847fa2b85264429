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

}  // namespace tachyon::model
