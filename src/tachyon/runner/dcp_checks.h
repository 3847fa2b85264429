// The start-up gate of decode context parallelism (--decode-context-parallel-size / --dcp): every
// combination without a passing equivalence test is refused here, before any weight loads, with
// the reason (DESIGN rule 8). What is verified (tests/unit/test_dcp_families.cpp): CPU thread
// ranks, latent-attention models (DeepSeek-V3, V3.2, GLM-5) in f32 rows, dcp dividing tp, greedy
// decoding with and without n-gram speculation, chunked prefill and prefix-cache hits; draft-model
// and MTP drafts (tests/unit/test_engine_draft_model.cpp, test_engine_mtp.cpp).
#pragma once

#include <string>

#include "tachyon/core/engine_config.h"
#include "tachyon/model/model_config.h"

namespace tachyon::runner {

// Why `config` cannot run `model` with its decode context parallel size; "" when it can (or
// when the size is 1). `config.device.kind` is read as given: "auto" is resolved to the CPU by the
// runner factory when DCP is on.
std::string dcp_unsupported_reason(const core::EngineConfig& config, const model::ModelConfig& model);

}  // namespace tachyon::runner
