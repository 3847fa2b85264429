// Helpers the mixture-of-experts model tests share (test_moe, test_mixtral; test_dsa and
// test_glm_dsa take their weights here too): a make-model'd tiny checkpoint loaded as f32
// weights, random vectors, errors, and the MoE MLP written from its definition (in double,
// experts unfused) that moe_mlp and its stacked layout are checked against.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/model/make_model.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::testing {

// The f32 weights of a make-model'd (arch, preset, seed) checkpoint, written to a temporary
// directory that is removed again.
inline model::ModelWeights make_weights(const std::string& arch, const std::string& preset, uint64_t seed = 3) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tachyon-moe-" + std::to_string(::getpid()) + "-" + arch + "-" + preset);
  model::make_model({.arch = arch, .preset = preset, .seed = seed, .out_dir = dir});
  model::ModelWeights weights =
      model::load_weights(model::ModelConfig::from_dir(dir), model::SafetensorsCheckpoint(dir));
  std::filesystem::remove_all(dir);
  return weights;
}

inline std::vector<float> random_values(std::mt19937& gen, size_t count, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(count);
  for (float& v : out) v = normal(gen);
  return out;
}

inline float max_abs(const std::vector<float>& values) {
  float m = 0.0f;
  for (float v : values) m = std::max(m, std::abs(v));
  return m;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// One expert as checkpoints store it: gate [I, H], up [I, H], down [H, I].
struct NaiveExpert {
  std::vector<float> gate, up, down;
};

// The softmax top-k MoE MLP from its definition, in double, with the experts unfused.
// x: [n, H]; router: [E, H]. Returns [n, H].
inline std::vector<float> naive_moe(const std::vector<float>& x, int64_t n, int64_t hidden, int64_t inter,
                                    const std::vector<float>& router, const std::vector<NaiveExpert>& experts,
                                    int64_t top_k, bool norm_topk_prob) {
  const int64_t num_experts = static_cast<int64_t>(experts.size());
  auto dot = [](const float* a, const float* b, int64_t len) {
    double s = 0.0;
    for (int64_t i = 0; i < len; ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
  };
  std::vector<float> out(static_cast<size_t>(n * hidden), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x.data() + t * hidden;
    std::vector<double> probs(static_cast<size_t>(num_experts));
    double sum = 0.0;
    for (int64_t e = 0; e < num_experts; ++e) sum += probs[e] = std::exp(dot(xt, router.data() + e * hidden, hidden));
    for (double& p : probs) p /= sum;
    std::vector<int64_t> order(static_cast<size_t>(num_experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
    double chosen_sum = 0.0;
    for (int64_t j = 0; j < top_k; ++j) chosen_sum += probs[order[j]];
    for (int64_t j = 0; j < top_k; ++j) {
      const NaiveExpert& ex = experts[static_cast<size_t>(order[j])];
      const double weight = norm_topk_prob ? probs[order[j]] / chosen_sum : probs[order[j]];
      std::vector<float> act(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) {
        const double g = dot(xt, ex.gate.data() + i * hidden, hidden), u = dot(xt, ex.up.data() + i * hidden, hidden);
        act[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
      }
      for (int64_t h = 0; h < hidden; ++h) {
        out[t * hidden + h] += static_cast<float>(weight * dot(act.data(), ex.down.data() + h * inter, inter));
      }
    }
  }
  return out;
}

// An empty temporary directory "tachyon-<name>-<pid>" (removed first if a crash left it).
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("tachyon-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// The checkpoint tensor `name` as f32.
inline std::vector<float> tensor_f32(const model::SafetensorsCheckpoint& checkpoint, const std::string& name) {
  const model::TensorView& view = checkpoint.at(name);
  std::vector<float> out(static_cast<size_t>(view.numel()));
  convert_to_f32(view.data, view.dtype, out.size(), out.data());
  return out;
}

}  // namespace tachyon::testing
