// The start-up gate of prefill context parallelism (--prefill-context-parallel-size / --pcp):
// every combination without a passing equivalence test is refused here, before any weight loads,
// with the reason (DESIGN rule 8). What is verified (tests/unit/test_pcp_families.cpp): CPU
// thread ranks holding the whole model (--tp 1), groups of 2, 3, 4, 6 and 8, dense Llama and the
// latent-attention models (DeepSeek-V3, V3.2, GLM-5) in f32 rows, greedy decoding with chunked
// prefill and prefix-cache hits, FP8 weights and an FP8 KV cache, asynchronous scheduling, n-gram,
// draft-model and MTP drafts (their verify rows split like a prefill chunk; the ranks return hidden
// states: test_engine_draft_model.cpp, test_engine_mtp.cpp); and over tensor-parallel ranks
// (test_pcp_tp.cpp) the grids --tp 2 --pcp 2, --tp 2 --pcp 3 and --tp 4 --pcp 2 of the
// latent-attention models, and --dcp 2 --pcp 2 with --tp 2 or 4 beside them.
#pragma once

#include <string>

#include "tachyon/core/engine_config.h"
#include "tachyon/model/model_config.h"

namespace tachyon::runner {

// Why `config` cannot run `model` with its prefill context parallel size; "" when it can (or
// when the size is 1). `config.device.kind` is read as given: "auto" resolves to the CPU ranks.
std::string pcp_unsupported_reason(const core::EngineConfig& config, const model::ModelConfig& model);

}  // namespace tachyon::runner
