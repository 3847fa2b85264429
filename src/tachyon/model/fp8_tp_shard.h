// One tensor-parallel rank's share of an FP8 run's GPU weights (fp8_projections.h): what
// shard_weights (tp_shard.h) gives the rank of the same model, with its FP8 projections kept in
// FP8. Every cut follows tp_shard.h: column-parallel projections (q/k/v, gate/up, latent
// attention's q_b, the routed and shared experts split along their intermediate dim) keep their
// rank's rows, each with its row of factors; row-parallel ones (o_proj, down, the experts' down)
// keep their rank's input columns, which must begin and end on a factor's 128-column span (or at
// the row's end), else the shard is refused naming the projection and the width that does not
// divide; what every rank keeps whole (latent attention's q_a and kv_a, and under expert
// parallelism the rank's experts and the shared expert) is copied. A slice of codes and factors
// is the slice of the values they stand for, so a rank computes with exactly the values the
// single-GPU run would give it (tests/unit/test_fp8_tp_shard.cpp: dequantizing the shard equals
// sharding the dequantized model).
#pragma once

#include <string>
#include <vector>

#include "tachyon/model/fp8_projections.h"
#include "tachyon/model/tp_shard.h"

namespace tachyon::model {

struct Fp8TpShard {
  Bf16TpShard base;                       // the bf16 tensors and the rank's geometry (tp_shard.h)
  std::vector<Fp8LayerProjections> fp8;   // per layer, the rank's FP8 projections

  // The shard as the GPU form a runner uploads (moved out).
  Fp8GpuWeights take_weights() { return {std::move(base.weights), std::move(fp8)}; }
};

// Rank tp_rank of tp_size; with expert_parallel the experts are spread as shard_weights spreads
// them. Throws Error as shard_weights does, or naming the FP8 projection a cut would split
// inside a factor's span.
Fp8TpShard shard_fp8_weights(const Fp8GpuWeights& full, int tp_rank, int tp_size, bool expert_parallel);
// One layer's FP8 projections of the full model (config) cut for `shard` (its geometry:
// shard_geometry, tp_shard.h), for loaders that cut a model layer by layer (tp_shard_loader.h).
Fp8LayerProjections shard_fp8_layer(const ModelConfig& config, const Bf16TpShard& shard, const Fp8LayerProjections& layer);

// Why an FP8 run of `config` cannot be cut for tp_size ranks ("" when it can), from the shapes
// alone, before any weight is read: the first row-parallel projection whose per-rank input width
// is not a multiple of the factors' 128 columns, as if every projection were held in FP8 (a
// checkpoint that keeps one in bf16 may be refused where its cut would have held).
std::string fp8_tp_unsupported_reason(const ModelConfig& config, int tp_size, bool expert_parallel);

}  // namespace tachyon::model
