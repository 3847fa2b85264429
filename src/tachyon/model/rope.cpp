#include "tachyon/model/rope.h"

#include <cmath>
#include <numbers>

namespace tachyon::model {

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  const int64_t half = config.head_dim / 2;
  const float base = static_cast<float>(config.rope_theta);
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(config.head_dim);
    inv_freq[i] = 1.0f / std::pow(base, exponent);
  }
  const RopeScaling& scaling = config.rope_scaling;
  const float factor = static_cast<float>(scaling.factor);
  switch (scaling.type) {
    case RopeScalingType::kNone:
      break;
    case RopeScalingType::kLinear:
      for (float& f : inv_freq) f /= factor;
      break;
    case RopeScalingType::kLlama3: {
      // Long wavelengths (low frequencies) are slowed by `factor`, short ones kept, and the band
      // between is blended by how many original-context periods fit in the wavelength.
      const float old_context = static_cast<float>(scaling.original_max_position_embeddings);
      const float low = static_cast<float>(scaling.low_freq_factor);
      const float high = static_cast<float>(scaling.high_freq_factor);
      const float low_freq_wavelen = old_context / low;
      const float high_freq_wavelen = old_context / high;
      for (float& f : inv_freq) {
        const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
        if (wavelen < high_freq_wavelen) continue;
        if (wavelen > low_freq_wavelen) {
          f /= factor;
          continue;
        }
        const float smooth = (old_context / wavelen - low) / (high - low);
        f = (1.0f - smooth) * f / factor + smooth * f;
      }
      break;
    }
  }
  return inv_freq;
}

}  // namespace tachyon::model
