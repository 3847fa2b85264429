#include "tachyon/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tachyon::model {
namespace {

// transformers' _compute_yarn_parameters: frequencies that turn fewer than beta_slow times over
// the original context are interpolated (divided by factor), those turning more than beta_fast
// times are kept, and a linear ramp over the dimensions between blends the two. The ramp's ends
// are computed in double (Python floats); everything per dimension in f32 (torch tensors).
void apply_yarn(std::vector<float>& inv_freq, const RopeScaling& s, double base, int64_t dim) {
  const auto correction_dim = [&](double rotations) {
    const double context = static_cast<double>(s.original_max_position_embeddings);
    return dim * std::log(context / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const float factor = static_cast<float>(s.factor);
  const float ramp_low = static_cast<float>(low), ramp_width = static_cast<float>(high - low);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    // pos_freqs = base^(2i / dim) in f32, as the default frequencies were computed.
    const float exponent = static_cast<float>(2 * static_cast<int64_t>(i)) / static_cast<float>(dim);
    const float pos_freq = std::pow(static_cast<float>(base), exponent);
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - ramp_low) / ramp_width, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

}  // namespace

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  const int64_t dim = config.rope_dim();
  const int64_t half = dim / 2;
  const float base = static_cast<float>(config.rope_theta);
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
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
    case RopeScalingType::kYarn:
      apply_yarn(inv_freq, scaling, config.rope_theta, dim);
      break;
  }
  return inv_freq;
}

double rope_attention_scaling(const ModelConfig& config) {
  const RopeScaling& s = config.rope_scaling;
  if (s.type != RopeScalingType::kYarn) return 1.0;
  if (s.attention_factor != 0.0) return s.attention_factor;
  if (s.mscale != 0.0 && s.mscale_all_dim != 0.0) {
    return yarn_get_mscale(s.factor, s.mscale) / yarn_get_mscale(s.factor, s.mscale_all_dim);
  }
  return yarn_get_mscale(s.factor);
}

void deinterleave_rope_pairs(float* x, int64_t rows, int64_t dim) {
  std::vector<float> row(static_cast<size_t>(dim));
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * dim;
    for (int64_t i = 0; i < dim / 2; ++i) {
      row[static_cast<size_t>(i)] = v[2 * i];
      row[static_cast<size_t>(dim / 2 + i)] = v[2 * i + 1];
    }
    std::copy(row.begin(), row.end(), v);
  }
}

double rope_softmax_mscale(const ModelConfig& config) {
  const RopeScaling& s = config.rope_scaling;
  if (s.type == RopeScalingType::kNone || s.mscale_all_dim == 0.0) return 1.0;
  const double m = yarn_get_mscale(s.factor, s.mscale_all_dim);
  return m * m;
}

}  // namespace tachyon::model
