// Tensor-parallel shards read from a checkpoint one decoder layer at a time (model_weights.h's
// by-layer loaders): each layer is cut for every rank this process holds as soon as it is read,
// so the host holds those ranks' shards and one layer, never the whole model beside its shards
// (the whole model and then its shards took twice the model's size: Llama-3-70B in bf16, 141 GB,
// needed 282 GB of host memory). The shards are those shard_weights (tp_shard.h) and
// shard_fp8_weights (fp8_tp_shard.h) cut from the whole model, bit for bit
// (tests/unit/test_tp_shard_loader.cpp).
#pragma once

#include <vector>

#include "tachyon/model/fp8_tp_shard.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/tp_shard.h"

namespace tachyon::model {

// The ranks [first, first + count) of a group of tp_size (a node's local ranks), experts spread
// over the group when expert_parallel.
struct TpRanks {
  int first = 0;
  int count = 0;
  int tp_size = 0;
  bool expert_parallel = false;
};

// Where one shard sits: tensor-parallel rank tp_rank of tp_size and, with ep_size > 0, the routed
// experts of expert-parallel rank ep_rank of ep_size (shard_weights' arguments, tp_shard.h).
struct ShardPlace {
  int tp_rank = 0;
  int tp_size = 1;
  int ep_rank = 0;
  int ep_size = 0;
};

// The places of a TP group's ranks [first, first + count) (experts spread over the group when
// expert_parallel).
std::vector<ShardPlace> tp_shard_places(const TpRanks& ranks);

// Each CPU rank's f32 shard, in the order of `places` (data-parallel groups: their replicas' TP
// ranks with the experts spread over all); with online_fp8 (--quantization fp8) each layer is
// round-tripped through FP8 as read, as quantize_weights_fp8 does to the whole model.
std::vector<TpShard> load_f32_shards(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                     const std::vector<ShardPlace>& places, bool online_fp8);
// The same for the ranks of one TP group.
std::vector<TpShard> load_f32_tp_shards(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                        const TpRanks& ranks, bool online_fp8);

// Each rank's bf16 shard, in rank order.
std::vector<Bf16TpShard> load_bf16_tp_shards(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                             const TpRanks& ranks);

// Each rank's share of an FP8 run's GPU weights (load_fp8_gpu_weights' form), in rank order.
std::vector<Fp8TpShard> load_fp8_tp_shards(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                                           bool online, Fp8RoutedExperts experts, const TpRanks& ranks);

}  // namespace tachyon::model
