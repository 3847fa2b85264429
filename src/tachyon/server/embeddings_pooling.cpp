#include "tachyon/server/embeddings_pooling.h"

#include <algorithm>
#include <cmath>

#include "tachyon/base/check.h"

namespace tachyon::server {

std::vector<float> pool_hidden_states(const PoolingConfig& pooling, std::span<const float> hidden, int64_t num_tokens,
                                      int64_t hidden_size) {
  TACHYON_CHECK(num_tokens >= 1 && static_cast<int64_t>(hidden.size()) == num_tokens * hidden_size)
      << "pooling: " << hidden.size() << " values for " << num_tokens << " tokens of " << hidden_size;
  std::vector<float> out(static_cast<size_t>(hidden_size), 0.0f);
  switch (pooling.mode) {
    case PoolingConfig::Mode::kCls:
      std::copy_n(hidden.begin(), hidden_size, out.begin());
      break;
    case PoolingConfig::Mode::kLast:
      std::copy_n(hidden.begin() + (num_tokens - 1) * hidden_size, hidden_size, out.begin());
      break;
    case PoolingConfig::Mode::kMean: {
      // Summed in double so a long input's mean does not depend on the order of f32 additions.
      std::vector<double> sum(static_cast<size_t>(hidden_size), 0.0);
      for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t d = 0; d < hidden_size; ++d) sum[static_cast<size_t>(d)] += hidden[static_cast<size_t>(t * hidden_size + d)];
      }
      for (int64_t d = 0; d < hidden_size; ++d) {
        out[static_cast<size_t>(d)] = static_cast<float>(sum[static_cast<size_t>(d)] / static_cast<double>(num_tokens));
      }
      break;
    }
  }
  if (pooling.normalize) l2_normalize(out);
  return out;
}

void l2_normalize(std::span<float> v) {
  double squares = 0.0;
  for (float x : v) squares += static_cast<double>(x) * x;
  const double norm = std::max(std::sqrt(squares), 1e-12);
  for (float& x : v) x = static_cast<float>(x / norm);
}

void shorten_embedding(std::vector<float>& v, int64_t dimensions) {
  TACHYON_CHECK(dimensions >= 1 && dimensions <= static_cast<int64_t>(v.size()))
      << "dimensions " << dimensions << " outside [1, " << v.size() << "]";
  v.resize(static_cast<size_t>(dimensions));
  l2_normalize(v);
}

}  // namespace tachyon::server
