// The tiny checkpoints the parallelism tests run their families on (test_tp_families.cpp,
// test_tensor_parallel.cpp, test_dcp_families.cpp, test_pcp_families.cpp, test_pcp_tp.cpp,
// model/test_tbo_families.cpp): a family is an architecture and a make-model preset, its weights
// the f32 weights of that preset at a seed (make_weights, moe_test_util.h: written to a
// temporary directory, loaded, removed), so every file builds a family's model the same way.
#pragma once

#include <cstdint>

#include "moe_test_util.h"

namespace tachyon::testing {

struct TinyFamily {
  const char* arch;
  const char* preset;
};

// The latent-attention families: DeepSeek-V3 (MLA), DeepSeek-V3.2 (DSA, top-8) and GLM-5 (DSA
// with shared layers), what decode and prefill context parallelism split.
inline constexpr TinyFamily kLatentFamilies[] = {
    {"deepseek_v3", "tiny-deepseek"}, {"deepseek_v32", "tiny-dsa"}, {"glm_moe_dsa", "tiny-glm-dsa"}};

inline model::ModelWeights tiny_weights(const TinyFamily& f, uint64_t seed) {
  return make_weights(f.arch, f.preset, seed);
}

}  // namespace tachyon::testing
