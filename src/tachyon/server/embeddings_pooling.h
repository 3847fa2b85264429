// The arithmetic of /v1/embeddings: one input's final hidden states [num_tokens, hidden] become
// one vector by the model's pooling (mean of every token, the first token's, or the last
// token's), then unit length when the model normalizes; OpenAI's `dimensions` keeps the first d
// values and makes them unit length again (how its v3 models shorten, Matryoshka-style).
// Plain loops: this is the reference the tests check by hand (ctest -R Embeddings).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/server/pooling_config.h"

namespace tachyon::server {

// hidden: [num_tokens, hidden_size] f32, num_tokens >= 1. Returns [hidden_size].
std::vector<float> pool_hidden_states(const PoolingConfig& pooling, std::span<const float> hidden, int64_t num_tokens,
                                      int64_t hidden_size);

// Scales `v` to unit L2 length in place (as torch's F.normalize: a norm under 1e-12 divides by 1e-12).
void l2_normalize(std::span<float> v);

// Keeps v's first `dimensions` values (1 <= dimensions <= v.size()) and normalizes them.
void shorten_embedding(std::vector<float>& v, int64_t dimensions);

}  // namespace tachyon::server
