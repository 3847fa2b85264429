#include "tachyon/kernels/rope.h"

#include <cmath>
#include <vector>

#include "tachyon/kernels/cpu/parallel_for.h"

namespace tachyon::kernels::cpu {

void apply_rope(float* x, const int64_t* positions, const float* inv_freq, int64_t tokens, int64_t heads,
                int64_t head_dim, float cos_sin_scale) {
  const int64_t half = head_dim / 2;
  parallel_for(tokens, tokens > 1, [=](int64_t t) {
    std::vector<float> cos_table(half), sin_table(half);
    for (int64_t i = 0; i < half; ++i) {
      // f32 product, as HF computes the angle, so long positions round the same way.
      float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos_table[i] = std::cos(angle) * cos_sin_scale;
      sin_table[i] = std::sin(angle) * cos_sin_scale;
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * cos_table[i] - b * sin_table[i];
        v[i + half] = b * cos_table[i] + a * sin_table[i];
      }
    }
  });
}

}  // namespace tachyon::kernels::cpu
