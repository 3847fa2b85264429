// Random-weight HF model directories (config.json, safetensors, tokenizer files), written
// deterministically from (arch, preset, seed): the same inputs give the same bytes on every
// machine, so tests can regenerate what the goldens were computed from instead of storing it.
// Tiny presets serve tests; real-shape presets serve performance work.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tachyon/model/model_config.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::model {

struct MakeModelOptions {
  std::string arch;     // "llama", ..., "qwen3_moe", "mixtral", "deepseek_v3", ... (or the HF name)
  std::string preset;   // see model_presets()
  uint64_t seed = 0;
  std::optional<DType> dtype;                   // default: the preset's
  std::optional<std::filesystem::path> tokenizer_dir;  // copies tokenizer.json (+ config); sets vocab and bos/eos
  std::filesystem::path out_dir;
  size_t shard_bytes = 0;                       // 0: the preset's default (0 there: one file)
  // The preset's first N layers only (1 <= N <= its layer count): a real shape's per-layer work
  // in a model small enough to write and profile quickly.
  std::optional<int64_t> num_layers;
  // Writes the linear weights (attention and MLA projections, gate/up/down, experts, shared
  // experts, the indexer's wq_b and wk) as FP8 in this checkpoint format with its
  // quantization_config (fp8_checkpoint.h), quantized from the same random f32 values the plain
  // model has; embeddings, lm_head, norms, routers and biases keep `dtype`.
  WeightQuantization quantization = WeightQuantization::kNone;
  // With fp8-tensor or fp8-channel: an 8-bit float kv_cache_scheme and its calibrated scales
  // (self_attn.k_scale / v_scale), as llm-compressor's FP8-KV exports have; modelopt-fp8 always
  // writes ModelOpt's (k_proj.k_scale / v_proj.v_scale), as NVIDIA's releases have.
  bool kv_cache_scales = false;
};

struct ModelPreset {
  std::string name;
  std::string description;
  std::string only_arch;  // "" for shape presets that fit every arch
  ModelConfig shape;      // architecture fields are filled from the arch at make time
  DType dtype = DType::kF32;
  size_t shard_bytes = 0;
};

const std::vector<ModelPreset>& model_presets();

// The config make_model would write, without writing anything.
ModelConfig make_model_config(const MakeModelOptions& options);

// Writes the directory; returns its config. Throws Error on unknown arch/preset or I/O failure.
ModelConfig make_model(const MakeModelOptions& options);

}  // namespace tachyon::model
