// The weights of a dense decoder in f32, loaded from a HF safetensors checkpoint with every
// tensor's name, shape and presence checked against the config. q/k/v and gate/up are fused
// at load ([q; k; v] and [gate; up] rows) so each block runs one matrix product.
#pragma once

#include <filesystem>
#include <vector>

#include "tachyon/model/model_config.h"
#include "tachyon/model/safetensors.h"

namespace tachyon::model {

struct LayerWeights {
  std::vector<float> input_norm;          // [hidden]
  std::vector<float> qkv;                 // [q_size + 2 * kv_size, hidden]
  std::vector<float> qkv_bias;            // [q_size + 2 * kv_size] or empty
  std::vector<float> q_norm;              // [head_dim] or empty (Qwen3)
  std::vector<float> k_norm;              // [head_dim] or empty (Qwen3)
  std::vector<float> o_proj;              // [hidden, q_size]
  std::vector<float> o_proj_bias;         // [hidden] or empty
  std::vector<float> post_attention_norm; // [hidden]
  std::vector<float> gate_up;             // [2 * intermediate, hidden]
  std::vector<float> gate_up_bias;        // [2 * intermediate] or empty
  std::vector<float> down;                // [hidden, intermediate]
  std::vector<float> down_bias;           // [hidden] or empty
};

struct ModelWeights {
  ModelConfig config;
  std::vector<float> embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;    // [hidden]
  std::vector<float> lm_head;       // [vocab, hidden]; empty when tied to embed_tokens

  const std::vector<float>& output_embedding() const { return lm_head.empty() ? embed_tokens : lm_head; }
};

// Every tensor a checkpoint of this config must hold, with its shape, in HF naming.
std::vector<std::pair<std::string, std::vector<int64_t>>> expected_tensors(const ModelConfig& config);

// Checks the checkpoint against expected_tensors (missing, unexpected, wrong shape) and
// converts to f32. Errors name the tensor and the file it came from.
ModelWeights load_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint);

}  // namespace tachyon::model
