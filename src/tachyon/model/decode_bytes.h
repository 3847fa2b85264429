// The bytes a decode step must read at least: the memory-bound floor bench latency reports
// (step time against bytes / copy bandwidth). Test: tests/unit/test_decode_bytes.cpp (against the
// sizes of the checkpoint's own tensors).
#pragma once

#include <cstdint>

#include "tachyon/model/model_config.h"

namespace tachyon::model {

// A decode step of `batch` sequences of `context` cached tokens each, bf16 weights and cache:
// every weight matrix once (the embedding table only for the looked-up rows, so it is left out
// unless tied to the LM head), plus the cache rows attention reads. An MoE layer reads its
// router, its shared experts and only the routed experts the batch picks: at most batch * k of
// them (fewer when tokens share experts, so this is the floor's upper end). Latent attention
// (MLA) reads its projections and one [c_kv | k_pe] row per cached token; with DSA the attention
// reads only the kept rows but the indexer every index key.
// With fp8_projections (an FP8 run on the GPU, model/fp8_projections.h) the projections it holds in
// FP8 count 1 byte a value plus a 4-byte factor per 128. With fp8_kv_cache (--kv-cache-dtype fp8)
// a cached K or V row of head_dim values is head_dim bytes plus a 4-byte factor, a latent row and
// an index key take kernels/fp8_latent_layout.h's bytes (656 and 132 at DeepSeek's shapes).
// With fp8_routed_experts (an FP8 run serving Fp8RoutedExperts::kFp8) the routed experts it reads
// count in FP8 too.
double decode_step_min_bytes(const ModelConfig& config, int64_t batch, int64_t context, bool fp8_projections = false,
                             bool fp8_kv_cache = false, bool fp8_routed_experts = false);

}  // namespace tachyon::model
