// DeepSeek-V3 on the CPU reference, checked without transformers (its goldens are made on the GPU
// machine: tests/data/goldens/deepseek_manifest.json): YaRN frequencies and scales against a
// double-precision reimplementation written here; the group-limited sigmoid router against
// hand-computed cases; latent attention (model/mla.h) through the attention backend against an
// explicit per-head double reference; the dense-first layers, the shared expert, the checkpoint
// names; the engine (paged cache, chunked prefill) against the one-sequence greedy loop; and the
// refusals of tensor parallelism and the CUDA runner.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numbers>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../architecture_checks.h"
#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/model/attention_backend.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/mla.h"
#include "tachyon/model/moe.h"
#include "tachyon/model/rope.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/app/runner_factory.h"

namespace tachyon::model {
namespace {

std::filesystem::path temp_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("tachyon-deepseek-" + std::to_string(::getpid()) + "-" + name);
}

ModelWeights make_weights(const std::string& preset, uint64_t seed = 3) {
  auto dir = temp_dir(preset);
  make_model({.arch = "deepseek_v3", .preset = preset, .seed = seed, .out_dir = dir});
  ModelWeights weights = load_weights(ModelConfig::from_dir(dir), SafetensorsCheckpoint(dir));
  std::filesystem::remove_all(dir);
  return weights;
}

std::vector<float> random_values(std::mt19937& gen, size_t count, float mean, float scale) {
  std::normal_distribution<float> normal(mean, scale);
  std::vector<float> out(count);
  for (float& v : out) v = normal(gen);
  return out;
}

// ---------------------------------------------------------------------------------------------
// YaRN, reimplemented in double from the paper's formulas as transformers states them.

struct YarnReference {
  std::vector<double> inv_freq;
  double cos_sin_scale = 1.0;
  double softmax_mscale = 1.0;
};

double get_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

YarnReference yarn_reference(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const int64_t dim = c.qk_rope_head_dim;
  const double base = c.rope_theta;
  // The dimension whose frequency turns `rotations` times over the original context.
  auto dim_for = [&](double rotations) {
    return dim * std::log(s.original_max_position_embeddings / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(dim_for(s.beta_fast)), 0.0);
  const double high = std::min(std::ceil(dim_for(s.beta_slow)), static_cast<double>(dim - 1));
  YarnReference r;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double original = std::pow(base, -2.0 * i / dim);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);  // 0: keep, 1: interpolate
    r.inv_freq.push_back(original * (1 - ramp) + original / s.factor * ramp);
  }
  r.cos_sin_scale = get_mscale(s.factor, s.mscale) / get_mscale(s.factor, s.mscale_all_dim);
  r.softmax_mscale = std::pow(get_mscale(s.factor, s.mscale_all_dim), 2);
  return r;
}

ModelConfig tiny_deepseek(const std::string& preset = "tiny-deepseek") {
  return make_model_config({.arch = "deepseek_v3", .preset = preset});
}

TEST(DeepseekYarn, InvFreqAndScalesMatchADoubleReimplementation) {
  ModelConfig tiny = tiny_deepseek();
  ModelConfig skewed = tiny;  // mscale != mscale_all_dim: cos/sin are scaled too
  skewed.rope_scaling.mscale_all_dim = 0.8;
  ModelConfig real = make_model_config({.arch = "deepseek_v3", .preset = "deepseek-v3-reduced"});
  for (const ModelConfig* c : {&tiny, &skewed, &real}) {
    const YarnReference want = yarn_reference(*c);
    const std::vector<float> got = rope_inv_freq(*c);
    ASSERT_EQ(got.size(), want.inv_freq.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want.inv_freq[i], 2e-6 * want.inv_freq[i]) << c->qk_rope_head_dim << " pair " << i;
    }
    EXPECT_NEAR(rope_attention_scaling(*c), want.cos_sin_scale, 1e-12);
    EXPECT_NEAR(rope_softmax_mscale(*c), want.softmax_mscale, 1e-12);
  }
  // tiny-deepseek's 4 pairs cover every band: kept, blended, interpolated.
  const std::vector<float> f = rope_inv_freq(tiny);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[1], 0.5 * (std::pow(10000.0, -0.25) + std::pow(10000.0, -0.25) / 4), 1e-7);
  EXPECT_NEAR(f[3], std::pow(10000.0, -0.75) / 4, 1e-9);
  EXPECT_NEAR(rope_softmax_mscale(tiny), std::pow(0.1 * std::log(4.0) + 1.0, 2), 1e-12);
  EXPECT_DOUBLE_EQ(rope_attention_scaling(tiny), 1.0);
  // No rope scaling: nothing is scaled.
  const ModelConfig plain = tiny_deepseek("tiny-deepseek-noqlora");
  EXPECT_DOUBLE_EQ(rope_attention_scaling(plain), 1.0);
  EXPECT_DOUBLE_EQ(rope_softmax_mscale(plain), 1.0);
}

// ---------------------------------------------------------------------------------------------
// The group-limited router.

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::set<int64_t> experts_of(const std::vector<ExpertChoice>& chosen) {
  std::set<int64_t> out;
  for (const auto& c : chosen) out.insert(c.expert);
  return out;
}

float weight_of(const std::vector<ExpertChoice>& chosen, int64_t expert) {
  for (const auto& c : chosen) {
    if (c.expert == expert) return c.weight;
  }
  ADD_FAILURE() << "expert " << expert << " not chosen";
  return 0.0f;
}

TEST(DeepseekRouter, GroupMaskingChangesTheChoice) {
  // Groups of 2: {0,1} sums 0.953 + 0.047 = 1.0, {2,3} 1.442, {4,5} 1.221, {6,7} 0.538. The best
  // single expert (0) is in a weak group, so with 2 groups kept it is not chosen.
  const std::vector<float> logits = {3.0f, -3.0f, 1.0f, 0.9f, 0.5f, 0.4f, -1.0f, -1.0f};
  const std::vector<float> no_bias(8, 0.0f);
  GroupLimitedRouting r{.top_k = 2, .n_group = 4, .topk_group = 2, .norm_topk_prob = true, .routed_scaling_factor = 1.0f};
  const auto grouped = route_token_group_limited(logits, no_bias, r);
  EXPECT_EQ(experts_of(grouped), (std::set<int64_t>{2, 3}));
  EXPECT_EQ(grouped[0].expert, 2);  // highest choice first
  const double s2 = sigmoid(1.0), s3 = sigmoid(0.9);
  EXPECT_NEAR(weight_of(grouped, 2), s2 / (s2 + s3), 1e-6);
  EXPECT_NEAR(weight_of(grouped, 3), s3 / (s2 + s3), 1e-6);

  r.n_group = 1;  // one group: plain top-k
  r.topk_group = 1;
  EXPECT_EQ(experts_of(route_token_group_limited(logits, no_bias, r)), (std::set<int64_t>{0, 2}));
}

TEST(DeepseekRouter, BiasChangesTheChoiceButNotTheWeights) {
  const std::vector<float> logits = {2.0f, 1.9f, 0.0f, -1.0f};
  std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f};
  GroupLimitedRouting r{.top_k = 2, .n_group = 1, .topk_group = 1, .norm_topk_prob = false, .routed_scaling_factor = 2.5f};
  auto chosen = route_token_group_limited(logits, bias, r);
  EXPECT_EQ(experts_of(chosen), (std::set<int64_t>{0, 1}));
  // Not renormalized: the sigmoid scores times routed_scaling_factor.
  EXPECT_NEAR(weight_of(chosen, 0), 2.5 * sigmoid(2.0), 1e-6);
  EXPECT_NEAR(weight_of(chosen, 1), 2.5 * sigmoid(1.9), 1e-6);

  bias[2] = 0.5f;  // choice of expert 2: 0.5 + 0.5 = 1.0 > sigmoid(1.9) = 0.870
  chosen = route_token_group_limited(logits, bias, r);
  EXPECT_EQ(experts_of(chosen), (std::set<int64_t>{0, 2}));
  EXPECT_EQ(chosen[0].expert, 2);
  EXPECT_NEAR(weight_of(chosen, 2), 2.5 * 0.5, 1e-6);  // sigmoid(0), the bias is not in the weight
  EXPECT_NEAR(weight_of(chosen, 0), 2.5 * sigmoid(2.0), 1e-6);

  r.norm_topk_prob = true;  // renormalized, then scaled: the weights sum to the scaling factor
  chosen = route_token_group_limited(logits, bias, r);
  EXPECT_NEAR(weight_of(chosen, 2), 2.5 * 0.5 / (0.5 + sigmoid(2.0)), 1e-6);
  EXPECT_NEAR(chosen[0].weight + chosen[1].weight, 2.5, 1e-6);
}

// transformers (like DeepSeek's own code) masks the dropped groups with 0.0, not -inf: when the
// kept experts' choice values are negative, experts of a dropped group win the top-k.
TEST(DeepseekRouter, DroppedGroupsScoreZeroNotMinusInfinity) {
  const std::vector<float> logits(4, 0.0f);                    // every score 0.5
  const std::vector<float> bias = {-0.6f, -0.7f, -0.9f, -0.95f};  // choices -0.1, -0.2 | -0.4, -0.45
  GroupLimitedRouting r{.top_k = 2, .n_group = 2, .topk_group = 1, .norm_topk_prob = false, .routed_scaling_factor = 1.0f};
  EXPECT_EQ(experts_of(route_token_group_limited(logits, bias, r)), (std::set<int64_t>{2, 3}));
  r.top_k = 1;
  EXPECT_EQ(route_token_group_limited(logits, bias, r)[0].expert, 2);
}

TEST(DeepseekRouter, RefusesBadGroupings) {
  const std::vector<float> logits(6, 0.0f), bias(6, 0.0f), short_bias(5, 0.0f);
  GroupLimitedRouting r{.top_k = 2, .n_group = 4, .topk_group = 2};
  EXPECT_THROW(route_token_group_limited(logits, bias, r), Error);  // 6 experts in 4 groups
  r.n_group = 3;                                                    // groups of 2
  EXPECT_NO_THROW(route_token_group_limited(logits, bias, r));
  EXPECT_THROW(route_token_group_limited(logits, short_bias, r), Error);
  r.topk_group = 4;
  EXPECT_THROW(route_token_group_limited(logits, bias, r), Error);
}

// ---------------------------------------------------------------------------------------------
// Latent attention against an explicit per-head reference in double.

// out: [rows, out_dim] = x: [rows, in] @ w^T, w: [out_dim, in].
std::vector<double> matmul(const std::vector<double>& x, const std::vector<float>& w, int64_t rows, int64_t in,
                           int64_t out_dim) {
  std::vector<double> out(static_cast<size_t>(rows * out_dim), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out_dim; ++o) {
      for (int64_t i = 0; i < in; ++i) out[r * out_dim + o] += x[r * in + i] * w[o * in + i];
    }
  }
  return out;
}

std::vector<double> rms_norm(std::vector<double> x, const std::vector<float>& w, int64_t dim, double eps) {
  for (size_t r = 0; r < x.size() / dim; ++r) {
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) sq += x[r * dim + i] * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(sq / dim + eps);
    for (int64_t i = 0; i < dim; ++i) x[r * dim + i] *= inv * w[i];
  }
  return x;
}

// The rope dims of one head at `position`: interleaved pairs (x[2j], x[2j+1]) rotate together and
// land at j and j + half (transformers' de-interleave, then rotate_half); otherwise x[j] pairs
// with x[j + half]. cos/sin carry YaRN's scale.
std::vector<double> rope(const double* x, int64_t dim, int64_t position, const YarnReference& yarn, bool interleave) {
  const int64_t half = dim / 2;
  std::vector<double> out(static_cast<size_t>(dim));
  for (int64_t j = 0; j < half; ++j) {
    const double a = interleave ? x[2 * j] : x[j], b = interleave ? x[2 * j + 1] : x[j + half];
    const double angle = position * yarn.inv_freq[j];
    const double cos = std::cos(angle) * yarn.cos_sin_scale, sin = std::sin(angle) * yarn.cos_sin_scale;
    out[j] = a * cos - b * sin;
    out[j + half] = b * cos + a * sin;
  }
  return out;
}

// x: [n, hidden] (normed) at positions 0 .. n-1 -> o_proj(causal attention) [n, hidden].
std::vector<double> mla_reference(const ModelConfig& c, const LayerWeights& w, const std::vector<float>& x_f32) {
  const int64_t n = static_cast<int64_t>(x_f32.size()) / c.hidden_size, heads = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, rope_dim = c.qk_rope_head_dim, vd = c.v_head_dim, qk = nope + rope_dim;
  const std::vector<double> x(x_f32.begin(), x_f32.end());
  YarnReference yarn = yarn_reference(c);
  if (c.rope_scaling.type == RopeScalingType::kNone) {
    yarn = YarnReference{};
    for (int64_t i = 0; i < rope_dim / 2; ++i) yarn.inv_freq.push_back(std::pow(c.rope_theta, -2.0 * i / rope_dim));
  }
  const double eps = c.rms_norm_eps;
  const std::vector<double> q =
      c.q_lora_rank > 0
          ? matmul(rms_norm(matmul(x, w.q_a_proj, n, c.hidden_size, c.q_lora_rank), w.q_a_norm, c.q_lora_rank, eps),
                   w.q_b_proj, n, c.q_lora_rank, heads * qk)
          : matmul(x, w.q_b_proj, n, c.hidden_size, heads * qk);
  const std::vector<double> ckv = matmul(x, w.kv_a_proj, n, c.hidden_size, c.kv_lora_rank + rope_dim);
  std::vector<double> latent, k_pe;
  for (int64_t t = 0; t < n; ++t) {
    latent.insert(latent.end(), ckv.begin() + t * (c.kv_lora_rank + rope_dim),
                  ckv.begin() + t * (c.kv_lora_rank + rope_dim) + c.kv_lora_rank);
    k_pe.insert(k_pe.end(), ckv.begin() + t * (c.kv_lora_rank + rope_dim) + c.kv_lora_rank,
                ckv.begin() + (t + 1) * (c.kv_lora_rank + rope_dim));
  }
  const std::vector<double> kv =
      matmul(rms_norm(latent, w.kv_a_norm, c.kv_lora_rank, eps), w.kv_b_proj, n, c.kv_lora_rank, heads * (nope + vd));
  const double scale = std::pow(qk, -0.5) * yarn.softmax_mscale;

  std::vector<double> attended(static_cast<size_t>(n * heads * vd), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const double* qh = q.data() + (t * heads + h) * qk;
      const std::vector<double> q_rot = rope(qh + nope, rope_dim, t, yarn, c.rope_interleave);
      std::vector<double> scores;
      for (int64_t j = 0; j <= t; ++j) {
        const double* kh = kv.data() + (j * heads + h) * (nope + vd);
        const std::vector<double> k_rot = rope(k_pe.data() + j * rope_dim, rope_dim, j, yarn, c.rope_interleave);
        double dot = 0;
        for (int64_t d = 0; d < nope; ++d) dot += qh[d] * kh[d];
        for (int64_t d = 0; d < rope_dim; ++d) dot += q_rot[d] * k_rot[d];
        scores.push_back(dot * scale);
      }
      const double max_score = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - max_score));
      for (int64_t j = 0; j <= t; ++j) {
        const double* vh = kv.data() + (j * heads + h) * (nope + vd) + nope;
        for (int64_t d = 0; d < vd; ++d) attended[(t * heads + h) * vd + d] += scores[j] / sum * vh[d];
      }
    }
  }
  return matmul(attended, w.o_proj, n, heads * vd, c.hidden_size);
}

LayerWeights random_mla_weights(const ModelConfig& c, std::mt19937& gen) {
  const int64_t h = c.hidden_size, heads = c.num_attention_heads;
  auto linear = [&](int64_t out, int64_t in) {
    return random_values(gen, static_cast<size_t>(out * in), 0.0f, 1.0f / std::sqrt(static_cast<float>(in)));
  };
  LayerWeights w;
  if (c.q_lora_rank > 0) {
    w.q_a_proj = linear(c.q_lora_rank, h);
    w.q_a_norm = random_values(gen, static_cast<size_t>(c.q_lora_rank), 1.0f, 0.1f);
    w.q_b_proj = linear(heads * c.head_dim, c.q_lora_rank);
  } else {
    w.q_b_proj = linear(heads * c.head_dim, h);
  }
  w.kv_a_proj = linear(c.kv_lora_rank + c.qk_rope_head_dim, h);
  w.kv_a_norm = random_values(gen, static_cast<size_t>(c.kv_lora_rank), 1.0f, 0.1f);
  w.kv_b_proj = linear(heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
  w.o_proj = linear(h, heads * c.v_head_dim);
  return w;
}

TEST(DeepseekMla, MatchesAnExplicitPerHeadReference) {
  ModelConfig skewed = tiny_deepseek();
  skewed.rope_scaling.mscale_all_dim = 0.8;  // cos/sin scaled by 1.04, softmax by 1.23
  skewed.rope_scaling.factor = 8.0;
  for (const ModelConfig& c : {tiny_deepseek(), tiny_deepseek("tiny-deepseek-noqlora"), skewed}) {
    std::mt19937 gen(11);
    const LayerWeights w = random_mla_weights(c, gen);
    const int64_t n = 9, first_chunk = 5;
    const std::vector<float> x = random_values(gen, static_cast<size_t>(n * c.hidden_size), 0.0f, 1.0f);
    const std::vector<float> inv_freq = rope_inv_freq(c);

    // Two chunks through the sequence cache: the second attends the first's cached K/V.
    SequenceKvCache cache(c, n, MlaAttentionForm::kDecompressed);
    std::vector<float> got;
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, first_chunk}, {first_chunk, n}}) {
      const int64_t count = end - begin;
      std::vector<int64_t> positions(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) positions[i] = begin + i;
      const std::vector<float> chunk(x.begin() + begin * c.hidden_size, x.begin() + end * c.hidden_size);
      QkvProjections qkv = mla_project(c, w, inv_freq, chunk, positions);
      ASSERT_EQ(qkv.k.size(), static_cast<size_t>(count * c.kv_size()));
      ASSERT_EQ(qkv.v.size(), static_cast<size_t>(count * c.v_size()));
      SequenceAttention attention(c, cache, count);
      attention.store_kv(0, qkv.k, qkv.v);
      std::vector<float> attended(static_cast<size_t>(count * c.num_attention_heads * c.v_head_dim));
      attention.attend(0, qkv.q, attended);
      cache.length += count;
      std::vector<float> out(static_cast<size_t>(count * c.hidden_size));
      kernels::cpu::linear(out.data(), attended.data(), w.o_proj.data(), nullptr, count,
                           c.num_attention_heads * c.v_head_dim, c.hidden_size);
      got.insert(got.end(), out.begin(), out.end());
    }
    const std::vector<double> want = mla_reference(c, w, x);
    double scale = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(want[i]));
      worst = std::max(worst, std::abs(want[i] - got[i]));
    }
    EXPECT_LT(worst, 2e-5 * scale) << "q_lora " << c.q_lora_rank << " interleave " << c.rope_interleave;
  }
}

// transformers builds q_a_layernorm and kv_a_layernorm with RMSNorm's default eps (1e-6), not
// config.rms_norm_eps (which only the decoder's norms read): GLM-5's 1e-5 showed the difference.
TEST(DeepseekMla, LatentNormsUseTheFixedEpsilonNotTheConfigs) {
  ModelConfig c = tiny_deepseek();
  c.rms_norm_eps = 0.25;  // far from 1e-6: the latent norms must not see it
  std::mt19937 gen(5);
  const LayerWeights w = random_mla_weights(c, gen);
  const int64_t n = 3, rank = c.kv_lora_rank;
  const std::vector<float> x = random_values(gen, static_cast<size_t>(n * c.hidden_size), 0.0f, 1.0f);
  const std::vector<int64_t> positions = {0, 1, 2};
  const MlaLatentProjections got = mla_project_latent(c, w, rope_inv_freq(c), x, positions);
  // rms_norm(x @ proj^T) * weight over `width` columns of `proj`'s first rows, in double.
  auto normed = [&](const std::vector<float>& proj, const std::vector<float>& weight, int64_t rows, int64_t t) {
    std::vector<double> v(static_cast<size_t>(rows));
    double squares = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < c.hidden_size; ++k) v[r] += double(x[t * c.hidden_size + k]) * proj[r * c.hidden_size + k];
      squares += v[r] * v[r];
    }
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(rows) + 1e-6);
    for (int64_t r = 0; r < rows; ++r) v[r] *= inv * weight[r];
    return v;
  };
  const int64_t latent_width = rank + c.qk_rope_head_dim;
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<double> c_kv = normed(w.kv_a_proj, w.kv_a_norm, rank, t);
    const std::vector<double> q_lora = normed(w.q_a_proj, w.q_a_norm, c.q_lora_rank, t);
    for (int64_t r = 0; r < rank; ++r) EXPECT_NEAR(got.latent[t * latent_width + r], c_kv[r], 1e-4) << t << " " << r;
    for (int64_t r = 0; r < c.q_lora_rank; ++r) {
      EXPECT_NEAR(got.q_lora[t * c.q_lora_rank + r], q_lora[r], 1e-4) << t << " " << r;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Layers, experts, checkpoint names.

TEST(DeepseekModel, FirstKDenseLayersRunTheDenseMlp) {
  ModelWeights weights = make_weights("tiny-deepseek");
  EXPECT_EQ(weights.layers[0].gate_up.size(), static_cast<size_t>(2 * 128 * 64));
  EXPECT_TRUE(weights.layers[0].router.empty());
  EXPECT_TRUE(weights.layers[1].gate_up.empty());
  const DenseModel model(std::move(weights));
  const ModelConfig& c = model.config();
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1) && c.is_moe_layer(2));
  std::set<std::string> names;
  SequenceKvCache cache(c, 8);
  const std::vector<int32_t> tokens = {5, 17, 300};
  model.forward(tokens, cache, false,
                [&](std::string_view name, int64_t layer, std::span<const float>) {
                  names.insert(std::string(name) + "@" + std::to_string(layer));
                });
  EXPECT_TRUE(names.count("mlp_out@0"));
  EXPECT_FALSE(names.count("moe_out@0"));
  for (int layer : {1, 2}) {
    EXPECT_TRUE(names.count("moe_out@" + std::to_string(layer))) << layer;
    EXPECT_FALSE(names.count("mlp_out@" + std::to_string(layer))) << layer;
  }
}

// One MoE layer of tiny-deepseek against its parts: the routed experts (routed here, summed here)
// plus the shared expert's SwiGLU written out in loops.
TEST(DeepseekModel, MoeIsTheRoutedSumPlusTheSharedExpert) {
  const ModelWeights weights = make_weights("tiny-deepseek");
  const ModelConfig& c = weights.config;
  const LayerWeights& w = weights.layers[1];
  const int64_t n = 6, h = c.hidden_size, inter = c.moe_intermediate_size * c.n_shared_experts;
  std::mt19937 gen(5);
  const std::vector<float> x = random_values(gen, static_cast<size_t>(n * h), 0.0f, 1.0f);
  std::vector<float> logits;
  const std::vector<float> got = moe_mlp(c, w, x, n, &logits);

  std::vector<float> expert_out(static_cast<size_t>(h));
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> want(static_cast<size_t>(h), 0.0);
    const auto chosen = route_token_group_limited(std::span<const float>(logits).subspan(t * c.num_experts, c.num_experts),
                                                  w.router_bias, group_limited_routing(c));
    ASSERT_EQ(chosen.size(), 4u);
    for (const ExpertChoice& choice : chosen) {
      expert_mlp(c, w, choice.expert, x.data() + t * h, expert_out.data());
      for (int64_t i = 0; i < h; ++i) want[i] += choice.weight * expert_out[i];
    }
    for (int64_t j = 0; j < inter; ++j) {  // the shared expert
      double gate = 0, up = 0;
      for (int64_t i = 0; i < h; ++i) {
        gate += w.shared_gate_up[j * h + i] * x[t * h + i];
        up += w.shared_gate_up[(inter + j) * h + i] * x[t * h + i];
      }
      const double act = gate / (1 + std::exp(-gate)) * up;
      for (int64_t i = 0; i < h; ++i) want[i] += w.shared_down[i * inter + j] * act;
    }
    for (int64_t i = 0; i < h; ++i) EXPECT_NEAR(got[t * h + i], want[i], 1e-4) << "token " << t << " dim " << i;
  }
}

TEST(DeepseekWeights, ExpectedTensorsUseTheCheckpointNames) {
  std::map<std::string, std::vector<int64_t>> tensors;
  for (auto& [name, shape] : expected_tensors(tiny_deepseek())) tensors[name] = shape;
  using S = std::vector<int64_t>;
  EXPECT_EQ(tensors.at("model.layers.0.self_attn.q_a_proj.weight"), (S{32, 64}));
  EXPECT_EQ(tensors.at("model.layers.0.self_attn.q_a_layernorm.weight"), (S{32}));
  EXPECT_EQ(tensors.at("model.layers.0.self_attn.q_b_proj.weight"), (S{4 * 24, 32}));
  EXPECT_EQ(tensors.at("model.layers.0.self_attn.kv_a_proj_with_mqa.weight"), (S{16 + 8, 64}));
  EXPECT_EQ(tensors.at("model.layers.0.self_attn.kv_a_layernorm.weight"), (S{16}));
  EXPECT_EQ(tensors.at("model.layers.0.self_attn.kv_b_proj.weight"), (S{4 * (16 + 16), 16}));
  EXPECT_EQ(tensors.at("model.layers.0.self_attn.o_proj.weight"), (S{64, 4 * 16}));
  EXPECT_EQ(tensors.at("model.layers.0.mlp.gate_proj.weight"), (S{128, 64}));
  EXPECT_FALSE(tensors.count("model.layers.0.mlp.gate.weight"));
  EXPECT_EQ(tensors.at("model.layers.1.mlp.gate.weight"), (S{16, 64}));
  EXPECT_EQ(tensors.at("model.layers.1.mlp.gate.e_score_correction_bias"), (S{16}));
  EXPECT_EQ(tensors.at("model.layers.2.mlp.experts.15.down_proj.weight"), (S{64, 32}));
  EXPECT_EQ(tensors.at("model.layers.2.mlp.shared_experts.gate_proj.weight"), (S{32, 64}));
  EXPECT_EQ(tensors.at("model.layers.2.mlp.shared_experts.down_proj.weight"), (S{64, 32}));
  EXPECT_FALSE(tensors.count("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_FALSE(tensors.count("model.layers.0.self_attn.k_proj.weight"));
  EXPECT_FALSE(tensors.count("model.layers.0.self_attn.q_proj.weight"));

  std::map<std::string, S> plain;
  for (auto& [name, shape] : expected_tensors(tiny_deepseek("tiny-deepseek-noqlora"))) plain[name] = shape;
  EXPECT_EQ(plain.at("model.layers.0.self_attn.q_proj.weight"), (S{4 * 24, 64}));
  EXPECT_FALSE(plain.count("model.layers.0.self_attn.q_a_proj.weight"));
}

TEST(DeepseekConfig, WritesAConfigTransformersReads) {
  auto dir = temp_dir("config");
  make_model({.arch = "deepseek_v3", .preset = "tiny-deepseek", .out_dir = dir});
  const nlohmann::json json = read_json_file(dir / "config.json");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(json["architectures"], nlohmann::json::array({"DeepseekV3ForCausalLM"}));
  EXPECT_EQ(json["model_type"], "deepseek_v3");
  EXPECT_FALSE(json.contains("head_dim"));  // transformers derives it (= qk_rope_head_dim)
  EXPECT_EQ(json["q_lora_rank"], 32);
  EXPECT_EQ(json["n_routed_experts"], 16);
  EXPECT_EQ(json["first_k_dense_replace"], 1);
  EXPECT_EQ(json["rope_scaling"]["rope_type"], "yarn");
  EXPECT_EQ(json["rope_scaling"]["original_max_position_embeddings"], 64);
  EXPECT_EQ(json["max_position_embeddings"], 256);
  const ModelConfig c = ModelConfig::from_json(json);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.value_head_dim(), 16);
  EXPECT_EQ(c.router, RouterKind::kSigmoidGroupLimited);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(tiny_deepseek("tiny-deepseek-noqlora").to_json()["q_lora_rank"], nullptr);

  nlohmann::json bad = json;
  bad["head_dim"] = 24;  // would resize transformers' rotary embedding
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
  bad = json;
  bad["num_key_value_heads"] = 2;
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
  bad = json;
  bad["n_group"] = 3;  // 16 experts do not split into 3 groups
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
  EXPECT_THROW(make_model_config({.arch = "deepseek_v3", .preset = "tiny"}), Error);
  EXPECT_THROW(make_model_config({.arch = "qwen3_moe", .preset = "tiny-deepseek"}), Error);
}

// The multi-token-prediction layer of a real checkpoint (layer num_hidden_layers) is skipped
// when num_nextn_predict_layers says it is there, and is an unexpected tensor otherwise.
TEST(DeepseekWeights, MtpLayerTensorsAreSkippedOnlyWhenDeclared) {
  ModelConfig c = tiny_deepseek();
  ModelConfig with_mtp_layer = c;
  with_mtp_layer.num_hidden_layers = 4;
  std::map<std::string, TensorSource> tensors;
  for (auto& [name, shape] : expected_tensors(with_mtp_layer)) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    tensors[name] = TensorSource{DType::kF32, shape, [count](std::byte* out) {
                                   std::fill_n(reinterpret_cast<float*>(out), count, 0.01f);
                                 }};
  }
  auto dir = temp_dir("mtp");
  std::filesystem::create_directories(dir);
  write_safetensors(dir / "model.safetensors", tensors);
  SafetensorsCheckpoint checkpoint(dir);
  try {
    load_weights(c, checkpoint);
    FAIL() << "an undeclared layer 3 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected tensor 'model.layers.3."), std::string::npos) << e.what();
  }
  c.num_nextn_predict_layers = 1;
  EXPECT_NO_THROW(load_weights(c, checkpoint));
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// The engine, and what is refused.

TEST(DeepseekModel, EngineMatchesGreedyGenerate) {
  for (const char* preset : {"tiny-deepseek", "tiny-deepseek-noqlora"}) {
    testing::expect_engine_matches_greedy_generate(DenseModel(make_weights(preset)), preset);
  }
}

TEST(DeepseekModel, TensorParallelismRunsOnCpuAndGpuRanks) {
  ModelConfig c = tiny_deepseek();
  EXPECT_NO_THROW(check_tp_size(c, 1));
  EXPECT_NO_THROW(check_tp_size(c, 4));  // test_tp_families.cpp runs it
  EXPECT_EQ(cuda_tp_unsupported_reason(c, 4), "");  // tests/gpu/test_tp_cuda_runner.cpp runs it
  c.first_k_dense_replace = 3;  // no MoE layer left: latent attention alone
  ASSERT_FALSE(c.is_moe());
  EXPECT_EQ(cuda_tp_unsupported_reason(c, 2), "");
  EXPECT_NE(cuda_tp_unsupported_reason(c, 3).find("does not divide num_attention_heads 4"), std::string::npos);
  try {
    check_tp_size(c, 3);
    FAIL() << "tp 3 of 4 latent heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide num_attention_heads 4"), std::string::npos) << e.what();
  }
  // The GPU serves latent attention within its kernels' shapes, and names the limit otherwise.
  EXPECT_EQ(app::cuda_unsupported_reason(c), "");
  ModelConfig wide = c;
  wide.kv_lora_rank = 1024;
  EXPECT_NE(app::cuda_unsupported_reason(wide).find("latent attention"), std::string::npos);

  auto dir = temp_dir("runner");
  make_model({.arch = "deepseek_v3", .preset = "tiny-deepseek", .seed = 1, .out_dir = dir});
  testing::expect_cpu_load_and_tp_served(dir, "deepseek_v3");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tachyon::model
