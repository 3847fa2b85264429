#include "tachyon/model/gpu/stream_gpu_weights.h"

#include <optional>

#include "tachyon/base/check.h"
#include "tachyon/model/fp8_tp_shard.h"
#include "tachyon/model/rope.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::model::gpu {
namespace {

// Runs `body` with `device` current, then makes the caller's device current again.
template <typename Body>
void on_device(int device, const Body& body) {
  int previous = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&previous));
  TACHYON_CUDA_CHECK(cudaSetDevice(device));
  body();
  TACHYON_CUDA_CHECK(cudaSetDevice(previous));
}

// The ranks' shard geometries (no tensors) and their empty device weights, each on its GPU.
struct TpStream {
  std::vector<Bf16TpShard> shards;
  std::vector<CudaDenseWeights> weights;
  const std::vector<int>& devices;

  TpStream(const ModelConfig& config, const TpRanks& ranks, const std::vector<int>& gpus, bool fp8) : devices(gpus) {
    TACHYON_CHECK(static_cast<int>(devices.size()) == ranks.count)
        << "internal: " << devices.size() << " GPUs for " << ranks.count << " tensor-parallel ranks";
    for (const ShardPlace& p : tp_shard_places(ranks)) {
      shards.push_back(shard_geometry<uint16_t>(config, p.tp_rank, p.tp_size, p.ep_rank, p.ep_size));
      weights.emplace_back(shards.back().weights.config, fp8);
    }
  }
  // Layer l cut for every rank and uploaded to its GPU (an FP8 run: with `fp8`, its projections);
  // a rank that does not add the shared expert gets none.
  void add_layer(const ModelConfig& config, int64_t l, const BasicLayerWeights<uint16_t>& layer,
                 const Fp8LayerProjections* fp8) {
    for (size_t i = 0; i < shards.size(); ++i) {
      BasicLayerWeights<uint16_t> cut = shard_layer(config, shards[i], layer);
      std::optional<Fp8LayerProjections> fp8_cut;
      if (fp8 != nullptr) fp8_cut = shard_fp8_layer(config, shards[i], *fp8);
      if (!adds_shared_expert(shards[i])) {
        drop_shared_expert(cut);
        if (fp8_cut) drop_shared_expert(*fp8_cut);
      }
      on_device(devices[i], [&] { weights[i].add_layer(l, cut, fp8_cut ? &*fp8_cut : nullptr); });
    }
  }
  // The embeddings, final norm and head, each rank's rows of them.
  void finish(const Bf16ModelWeights& rest) {
    for (size_t i = 0; i < shards.size(); ++i) {
      shard_vocab(rest, shards[i]);
      on_device(devices[i], [&] {
        weights[i].add_rest(shards[i].weights, rope_inv_freq(shards[i].weights.config));
      });
      shards[i].weights = {};  // uploaded
    }
  }
};

}  // namespace

CudaDenseWeights stream_bf16_gpu_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint) {
  CudaDenseWeights weights(config, /*fp8=*/false);
  const Bf16ModelWeights rest = load_weights_bf16_by_layer(
      config, checkpoint, [&](int64_t l, BasicLayerWeights<uint16_t>&& layer) { weights.add_layer(l, layer); });
  weights.add_rest(rest, rope_inv_freq(config));
  return weights;
}

CudaDenseWeights stream_fp8_gpu_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, bool online,
                                        Fp8RoutedExperts experts) {
  CudaDenseWeights weights(config, /*fp8=*/true);
  const Fp8LayerConverter convert(config, checkpoint, online, experts);
  const Bf16ModelWeights rest = load_weights_by_layer(config, checkpoint, [&](int64_t l, LayerWeights&& layer) {
    const Fp8GpuLayer converted = convert(l, std::move(layer));
    weights.add_layer(l, converted.bf16, &converted.fp8);
  });
  weights.add_rest(rest, rope_inv_freq(config));
  return weights;
}

std::vector<CudaDenseWeights> stream_bf16_tp_gpu_weights(const ModelConfig& config,
                                                         const SafetensorsCheckpoint& checkpoint, const TpRanks& ranks,
                                                         const std::vector<int>& devices) {
  TpStream stream(config, ranks, devices, /*fp8=*/false);
  const Bf16ModelWeights rest =
      load_weights_bf16_by_layer(config, checkpoint, [&](int64_t l, BasicLayerWeights<uint16_t>&& layer) {
        stream.add_layer(config, l, layer, nullptr);
      });
  stream.finish(rest);
  return std::move(stream.weights);
}

std::vector<CudaDenseWeights> stream_fp8_tp_gpu_weights(const ModelConfig& config,
                                                        const SafetensorsCheckpoint& checkpoint, bool online,
                                                        Fp8RoutedExperts experts, const TpRanks& ranks,
                                                        const std::vector<int>& devices) {
  TpStream stream(config, ranks, devices, /*fp8=*/true);
  const Fp8LayerConverter convert(config, checkpoint, online, experts);
  const Bf16ModelWeights rest = load_weights_by_layer(config, checkpoint, [&](int64_t l, LayerWeights&& layer) {
    const Fp8GpuLayer converted = convert(l, std::move(layer));
    stream.add_layer(config, l, converted.bf16, &converted.fp8);
  });
  stream.finish(rest);
  return std::move(stream.weights);
}

}  // namespace tachyon::model::gpu
