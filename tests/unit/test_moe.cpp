// Qwen3-MoE on the CPU reference (model/moe.h): the router against hand-computed numbers, one
// MoE layer against a naive per-expert loop (tests/moe_test_util.h), a one-expert top-1 model against the
// dense Qwen3 model with the same MLP weights, the engine on a make-model'd tiny-moe checkpoint,
// and the refusals of tensor parallelism and of the CUDA runner. Config and checkpoint naming:
// test_moe_weights.cpp. The transformers goldens: tests/data/goldens/moe_manifest.json.
#include "tachyon/model/moe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../architecture_checks.h"
#include "../moe_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/tp_cpu_model_runner.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/app/runner_factory.h"

namespace tachyon::model {
namespace {

using testing::make_weights;
using testing::max_abs;
using testing::max_abs_diff;
using testing::naive_moe;
using testing::NaiveExpert;
using testing::random_values;

TEST(MoeRouter, SoftmaxTopKRenormalized) {
  // softmax(1, 3, 2, 0) = (0.0871443, 0.6439143, 0.2368828, 0.0320586); the top two renormalized
  // are sigmoid(1) and 1 - sigmoid(1), since their logits differ by 1.
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  auto chosen = route_token(logits, 2, /*norm_topk_prob=*/true);
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(chosen[0].expert, 1);
  EXPECT_EQ(chosen[1].expert, 2);
  EXPECT_NEAR(chosen[0].weight, 0.7310586f, 1e-6f);
  EXPECT_NEAR(chosen[1].weight, 0.2689414f, 1e-6f);
}

TEST(MoeRouter, SoftmaxTopKNotRenormalized) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  auto chosen = route_token(logits, 3, /*norm_topk_prob=*/false);
  ASSERT_EQ(chosen.size(), 3u);
  EXPECT_EQ(chosen[0].expert, 1);
  EXPECT_EQ(chosen[1].expert, 2);
  EXPECT_EQ(chosen[2].expert, 0);
  EXPECT_NEAR(chosen[0].weight, 0.6439143f, 1e-6f);
  EXPECT_NEAR(chosen[1].weight, 0.2368828f, 1e-6f);
  EXPECT_NEAR(chosen[2].weight, 0.0871443f, 1e-6f);
  // top-k of all experts is the whole softmax: it sums to 1 with or without renormalization.
  auto all = route_token(logits, 4, false);
  float sum = 0.0f;
  for (const auto& c : all) sum += c.weight;
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
}

TEST(MoeRouter, EqualProbabilitiesTakeTheLowerIndexFirst) {
  // Experts 1, 2 and 4 tie at 0.2901696, experts 0 and 3 at 0.0647456.
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, 0.5f, 2.0f};
  auto two = route_token(logits, 2, false);
  EXPECT_EQ(two[0].expert, 1);
  EXPECT_EQ(two[1].expert, 2);
  EXPECT_NEAR(two[0].weight, 0.2901696f, 1e-6f);
  EXPECT_EQ(two[0].weight, two[1].weight);
  auto four = route_token(logits, 4, true);
  std::vector<int64_t> order;
  for (const auto& c : four) order.push_back(c.expert);
  EXPECT_EQ(order, (std::vector<int64_t>{1, 2, 4, 0}));
  EXPECT_NEAR(four[3].weight, 0.0647456f / (3 * 0.2901696f + 0.0647456f), 1e-6f);
}

TEST(MoeRouter, RefusesATopKOutsideTheExperts) {
  const std::vector<float> logits = {1.0f, 2.0f};
  EXPECT_THROW(route_token(logits, 3, true), Error);
  EXPECT_THROW(route_token(logits, 0, true), Error);
}

void expect_layer_matches_naive(bool norm_topk_prob) {
  ModelConfig c;
  c.hidden_size = 24;
  c.num_experts = 6;
  c.num_experts_per_tok = 3;
  c.moe_intermediate_size = 17;  // awkward on purpose
  c.norm_topk_prob = norm_topk_prob;
  const int64_t n = 9, h = c.hidden_size, inter = c.moe_intermediate_size;
  std::mt19937 gen(norm_topk_prob ? 11 : 12);
  std::vector<NaiveExpert> experts;
  LayerWeights w;
  w.router = random_values(gen, static_cast<size_t>(c.num_experts * h), 0.5f);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    NaiveExpert ex{random_values(gen, inter * h, 0.2f), random_values(gen, inter * h, 0.2f),
                   random_values(gen, h * inter, 0.25f)};
    w.experts_gate_up.insert(w.experts_gate_up.end(), ex.gate.begin(), ex.gate.end());
    w.experts_gate_up.insert(w.experts_gate_up.end(), ex.up.begin(), ex.up.end());
    w.experts_down.insert(w.experts_down.end(), ex.down.begin(), ex.down.end());
    experts.push_back(std::move(ex));
  }
  const std::vector<float> x = random_values(gen, static_cast<size_t>(n * h), 1.0f);

  std::vector<float> router_logits;
  const std::vector<float> out = moe_mlp(c, w, x, n, &router_logits);
  const std::vector<float> expected =
      naive_moe(x, n, h, inter, w.router, experts, c.num_experts_per_tok, norm_topk_prob);
  EXPECT_LT(max_abs_diff(out, expected), 1e-5f * max_abs(expected)) << "norm_topk_prob " << norm_topk_prob;
  ASSERT_EQ(router_logits.size(), static_cast<size_t>(n * c.num_experts));
  EXPECT_NEAR(router_logits[3 * c.num_experts + 2],
              std::inner_product(x.begin() + 3 * h, x.begin() + 4 * h, w.router.begin() + 2 * h, 0.0f), 1e-5f);
}

TEST(MoeLayer, MatchesANaivePerExpertLoop) {
  expect_layer_matches_naive(true);
  expect_layer_matches_naive(false);
}

TEST(MoeLayer, RefusesWeightsOfAnotherShape) {
  ModelConfig c;
  c.hidden_size = 8;
  c.num_experts = 2;
  c.num_experts_per_tok = 1;
  c.moe_intermediate_size = 4;
  LayerWeights dense;  // no router, no experts
  const std::vector<float> x(8, 1.0f);
  EXPECT_THROW(moe_mlp(c, dense, x, 1), Error);
}

// A Qwen3-MoE model whose every layer has ONE expert of the dense width, picked with weight 1 by
// top-1 (softmax of one logit is exactly 1), is the dense Qwen3 model with that expert as its MLP:
// the routing, the stacked layout and the per-layer switch of the forward must all be right.
TEST(MoeModel, OneExpertTopOneIsTheDenseModel) {
  const ModelWeights dense = make_weights("qwen3", "tiny");
  for (bool norm : {true, false}) {
    ModelWeights moe = dense;
    ModelConfig& c = moe.config;
    c.architecture = "Qwen3MoeForCausalLM";
    c.model_type = "qwen3_moe";
    c.num_experts = 1;
    c.num_experts_per_tok = 1;
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = norm;
    c.decoder_sparse_step = 1;
    std::mt19937 gen(7);
    for (LayerWeights& w : moe.layers) {
      w.router = random_values(gen, static_cast<size_t>(c.hidden_size), 1.0f);  // any logit gives probability 1
      w.experts_gate_up = std::move(w.gate_up);
      w.experts_down = std::move(w.down);
      w.gate_up.clear();
      w.down.clear();
    }
    ASSERT_TRUE(c.is_moe_layer(0) && c.is_moe_layer(1));

    const std::vector<int32_t> prompt = {5, 77, 301, 12, 499, 64, 3, 250, 128, 9, 411};
    DenseModel dense_model(dense), moe_model(std::move(moe));
    SequenceKvCache dense_cache(dense_model.config(), 16), moe_cache(moe_model.config(), 16);
    const auto expected = dense_model.forward(prompt, dense_cache, /*all_logits=*/true);
    const auto logits = moe_model.forward(prompt, moe_cache, /*all_logits=*/true);
    EXPECT_LE(max_abs_diff(logits, expected), 1e-6f * max_abs(expected)) << "norm_topk_prob " << norm;
    EXPECT_EQ(greedy_generate(moe_model, prompt, 8), greedy_generate(dense_model, prompt, 8));
  }
}

TEST(MoeModel, HooksNameTheRouterAndExpertOutputs) {
  DenseModel model(make_weights("qwen3_moe", "tiny-moe"));
  const ModelConfig& c = model.config();
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  std::vector<std::string> seen;
  auto hook = [&](std::string_view name, int64_t layer, std::span<const float> values) {
    if (name == "router_logits") {
      EXPECT_EQ(values.size(), prompt.size() * c.num_experts);
    } else if (name == "moe_out" || name == "mlp_out") {
      EXPECT_EQ(values.size(), prompt.size() * c.hidden_size);
    }
    seen.push_back(std::string(name) + "@" + std::to_string(layer));
  };
  SequenceKvCache cache(c, 8);
  model.forward(prompt, cache, false, hook);
  auto has = [&](const std::string& s) { return std::find(seen.begin(), seen.end(), s) != seen.end(); };
  EXPECT_TRUE(has("mlp_out@0"));  // mlp_only_layers [0]: dense
  EXPECT_FALSE(has("router_logits@0"));
  for (int layer = 1; layer < 4; ++layer) {
    EXPECT_TRUE(has("router_logits@" + std::to_string(layer)) && has("moe_out@" + std::to_string(layer))) << layer;
    EXPECT_FALSE(has("mlp_out@" + std::to_string(layer))) << layer;
  }
}

// The engine (CpuModelRunner, paged KV cache, continuous batching with chunked prefill) on a
// make-model'd tiny-moe checkpoint gives each prompt the greedy tokens of the reference loop.
TEST(MoeModel, EngineMatchesGreedyGenerate) {
  for (const char* preset : {"tiny-moe", "tiny-moe-nonorm"}) {
    testing::expect_engine_matches_greedy_generate(DenseModel(make_weights("qwen3_moe", preset)), preset);
  }
}

// Tensor parallelism of MoE splits every expert's intermediate dim (test_tp_families.cpp runs
// it); a size that does not divide it is refused naming the field, and the GPU's ranks refuse a
// split that leaves their experts outside the CUDA kernels' limits.
TEST(MoeModel, TensorParallelSizesAreCheckedOnCpuAndGpuRanks) {
  const ModelConfig c = make_model_config({.arch = "qwen3_moe", .preset = "tiny-moe"});
  EXPECT_NO_THROW(check_tp_size(c, 1));
  EXPECT_NO_THROW(check_tp_size(c, 2));
  ModelConfig odd = c;
  odd.moe_intermediate_size = 34;
  try {
    check_tp_size(odd, 4);
    FAIL() << "tp 4 of 34-wide experts was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide moe_intermediate_size 34"), std::string::npos) << e.what();
  }
  // The GPU's ranks take the split as long as a rank's experts stay within the kernels' limits
  // (moe_intermediate_size a multiple of 8): 48 over 2 ranks is 24, over 4 ranks 12.
  ModelConfig wide = make_model_config({.arch = "qwen3_moe", .preset = "tiny-gpu-moe"});
  wide.moe_intermediate_size = 48;
  EXPECT_EQ(cuda_tp_unsupported_reason(wide, 2), "");
  const std::string why = cuda_tp_unsupported_reason(wide, 4);
  EXPECT_NE(why.find("a rank's shard of Qwen3MoeForCausalLM at --tp 4 is outside the CUDA kernels' limits"), std::string::npos)
      << why;
  EXPECT_NE(why.find("multiple of 8"), std::string::npos) << why;
  EXPECT_NE(cuda_tp_unsupported_reason(wide, 3).find("does not divide"), std::string::npos);  // check_tp_size's words
  EXPECT_EQ(cuda_tp_unsupported_reason(wide, 1), "");
}

// Qwen3-MoE runs on the GPU too (kernels/cuda/moe.h); a model beyond the kernels' limits is
// named as such; --tp 2 on the CPU loads the tensor-parallel runner.
TEST(MoeModel, LoadRunnerServesMoeWhereTheKernelsCanAndOnCpuRanks) {
  ModelConfig gpu_shape = make_model_config({.arch = "qwen3_moe", .preset = "tiny-gpu-moe"});
  EXPECT_EQ(app::cuda_unsupported_reason(gpu_shape), "");
  gpu_shape.num_experts = 512;
  EXPECT_NE(app::cuda_unsupported_reason(gpu_shape).find("at most 256 experts"), std::string::npos);
  auto dir = std::filesystem::temp_directory_path() / ("tachyon-moe-runner-" + std::to_string(::getpid()));
  make_model({.arch = "qwen3_moe", .preset = "tiny-moe", .seed = 1, .out_dir = dir});
  core::EngineConfig config;
  config.device.kind = "cpu";
  EXPECT_EQ(app::load_runner(dir, config).model_config.model_type, "qwen3_moe");
  core::EngineConfig tp_config;
  tp_config.device.kind = "cpu";
  tp_config.device.tensor_parallel_size = 2;
  const auto tp = app::load_runner(dir, tp_config);
  EXPECT_NE(dynamic_cast<runner::TpCpuModelRunner*>(tp.runner.get()), nullptr);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tachyon::model
