// The start-up gate of two-batch overlap (--enable-two-batch-overlap / --tbo): every combination
// without a passing test is refused here, before any weight loads, with the reason (DESIGN rule 8).
// Verified (tests/model/test_tbo_families.cpp): CPU thread ranks, MoE models (Qwen3-MoE,
// DeepSeek-V3, V3.2, GLM-5) with --enable-expert-parallel at --tp 2 and 4, greedy decoding, mixed
// prompt lengths, chunked prefill; FP8 weights and an FP8 KV cache; asynchronous scheduling;
// speculative decoding (n-gram, draft model, MTP: tests/unit/
// test_engine_draft_model.cpp, test_engine_mtp.cpp). A step of one sequence is not split: it runs
// as one batch.
#pragma once

#include <string>

#include "tachyon/core/engine_config.h"
#include "tachyon/model/model_config.h"

namespace tachyon::runner {

// Why `config` cannot run `model` with two-batch overlap; "" when it can or when TBO is off.
std::string tbo_unsupported_reason(const core::EngineConfig& config, const model::ModelConfig& model);

}  // namespace tachyon::runner
