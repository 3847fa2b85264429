// A checkpoint onto one GPU a decoder layer at a time: each layer is read, converted to the GPU
// form and uploaded (CudaDenseWeights::add_layer) before the next is read, so the host holds one
// layer, never the model in its GPU form. The whole-model loaders (load_weights_bf16,
// load_fp8_gpu_weights) held the model on the host first: DeepSeek-V3 in FP8 is ~680 GB, more
// than an 8-GPU node's host memory. The weights are those of CudaDenseWeights over the
// whole-model loaders' output, byte for byte (tests/gpu/test_cuda_model_runner.cpp,
// CudaStreamedWeights).
#pragma once

#include <vector>

#include "tachyon/model/fp8_projections.h"
#include "tachyon/model/gpu/gpu_weights.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/tp_shard_loader.h"

namespace tachyon::model::gpu {

// load_weights_bf16's weights, on the calling thread's current device.
CudaDenseWeights stream_bf16_gpu_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint);

// load_fp8_gpu_weights' weights (an FP8 checkpoint's, or with `online` any checkpoint's quantized
// at load), on the calling thread's current device.
CudaDenseWeights stream_fp8_gpu_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, bool online,
                                        Fp8RoutedExperts experts);

// A node's tensor-parallel ranks `ranks`, rank ranks.first + i on GPU devices[i]: each layer is
// read once, cut for every rank (tp_shard_loader.h's cuts) and each cut uploaded to its rank's GPU
// before the next layer is read. The weights of CudaDenseWeights over load_bf16_tp_shards' and
// load_fp8_tp_shards' shards, except that a rank which does not add the shared expert
// (adds_shared_expert, tp_shard.h) leaves it on the host, as the runner dropped it before.
// TpCudaModelRunner takes them. The calling thread's current device is restored.
std::vector<CudaDenseWeights> stream_bf16_tp_gpu_weights(const ModelConfig& config,
                                                         const SafetensorsCheckpoint& checkpoint, const TpRanks& ranks,
                                                         const std::vector<int>& devices);
std::vector<CudaDenseWeights> stream_fp8_tp_gpu_weights(const ModelConfig& config,
                                                        const SafetensorsCheckpoint& checkpoint, bool online,
                                                        Fp8RoutedExperts experts, const TpRanks& ranks,
                                                        const std::vector<int>& devices);

}  // namespace tachyon::model::gpu
