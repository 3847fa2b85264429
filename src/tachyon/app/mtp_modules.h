// The served model's MTP modules (model/mtp.h) behind the engine's MtpModules interface
// (engine/mtp_drafter.h), on the CPU: each cache is a one-layer model::SequenceKvCache of the
// module's own that starts small and doubles as a sequence grows, so a sequence costs rows for
// what it holds, not for max_model_len. Tests: tests/unit/test_engine_mtp.cpp.
#pragma once

#include <memory>
#include <vector>

#include "tachyon/engine/mtp_drafter.h"
#include "tachyon/model/mtp.h"

namespace tachyon::app {

// `modules`: model::load_mtp_modules' list, at least one.
std::unique_ptr<engine::MtpModules> cpu_mtp_modules(std::vector<model::MtpModule> modules);

}  // namespace tachyon::app
