#include "tachyon/model/tp_shard_loader.h"

#include "tachyon/base/check.h"
#include "tachyon/model/fp8_projections.h"
#include "tachyon/model/online_fp8.h"

namespace tachyon::model {

std::vector<ShardPlace> tp_shard_places(const TpRanks& ranks) {
  TACHYON_CHECK(ranks.count >= 1 && ranks.first >= 0 && ranks.first + ranks.count <= ranks.tp_size)
      << "internal: ranks [" << ranks.first << ", " << ranks.first + ranks.count << ") of a group of "
      << ranks.tp_size;
  std::vector<ShardPlace> places;
  for (int r = ranks.first; r < ranks.first + ranks.count; ++r) {
    places.push_back({.tp_rank = r, .tp_size = ranks.tp_size, .ep_rank = r,
                      .ep_size = ranks.expert_parallel ? ranks.tp_size : 0});
  }
  return places;
}

namespace {

// The shards with their geometry set and no tensors yet.
template <typename T>
std::vector<BasicTpShard<T>> empty_shards(const ModelConfig& config, const std::vector<ShardPlace>& places) {
  std::vector<BasicTpShard<T>> shards;
  for (const ShardPlace& p : places) shards.push_back(shard_geometry<T>(config, p.tp_rank, p.tp_size, p.ep_rank, p.ep_size));
  return shards;
}

}  // namespace

std::vector<TpShard> load_f32_shards(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                     const std::vector<ShardPlace>& places, bool online_fp8) {
  std::vector<TpShard> shards = empty_shards<float>(config, places);
  const ModelWeights rest = load_weights_f32_by_layer(config, checkpoint, [&](int64_t, LayerWeights&& layer) {
    if (online_fp8) quantize_layer_fp8(config, layer);
    for (TpShard& shard : shards) shard.weights.layers.push_back(shard_layer(config, shard, layer));
  });
  for (TpShard& shard : shards) shard_vocab(rest, shard);
  return shards;
}

std::vector<TpShard> load_f32_tp_shards(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                        const TpRanks& ranks, bool online_fp8) {
  return load_f32_shards(config, checkpoint, tp_shard_places(ranks), online_fp8);
}

std::vector<Bf16TpShard> load_bf16_tp_shards(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                             const TpRanks& ranks) {
  std::vector<Bf16TpShard> shards = empty_shards<uint16_t>(config, tp_shard_places(ranks));
  const Bf16ModelWeights rest =
      load_weights_bf16_by_layer(config, checkpoint, [&](int64_t, BasicLayerWeights<uint16_t>&& layer) {
        for (Bf16TpShard& shard : shards) shard.weights.layers.push_back(shard_layer(config, shard, layer));
      });
  for (Bf16TpShard& shard : shards) shard_vocab(rest, shard);
  return shards;
}

std::vector<Fp8TpShard> load_fp8_tp_shards(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                           bool online, Fp8RoutedExperts experts, const TpRanks& ranks) {
  std::vector<Fp8TpShard> shards;
  for (Bf16TpShard& base : empty_shards<uint16_t>(config, tp_shard_places(ranks))) shards.push_back({std::move(base), {}});
  const Fp8LayerConverter convert(config, checkpoint, online, experts);
  const Bf16ModelWeights rest = load_weights_by_layer(config, checkpoint, [&](int64_t l, LayerWeights&& layer) {
    const Fp8GpuLayer converted = convert(l, std::move(layer));
    for (Fp8TpShard& shard : shards) {
      shard.base.weights.layers.push_back(shard_layer(config, shard.base, converted.bf16));
      shard.fp8.push_back(shard_fp8_layer(config, shard.base, converted.fp8));
    }
  });
  for (Fp8TpShard& shard : shards) shard_vocab(rest, shard.base);  // the embeddings, final norm and head
  return shards;
}

}  // namespace tachyon::model
