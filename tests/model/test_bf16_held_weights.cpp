// A bf16 checkpoint's matrices held as bf16 on the CPU (model_weights.h, Bf16MatrixHolding): the
// reference forward's logits are bit for bit those of the same checkpoint widened to f32, over a
// prefill and decode steps, for the families whose matrices can be held (dense with q/k norms,
// biases, tied and untied heads, a MoE model's attention and dense layer, latent attention's
// o_proj); and memory is honest: a held matrix has no f32 copy (and starts on a cache line, as
// the f32 ones do: tensor/cache_line_heap.h). An f32 checkpoint keeps the f32 path. The code that
// reads only f32 matrices (tensor-parallel shards, online FP8, the bf16 and FP8 GPU forms) refuses
// held weights by name rather than take a held matrix for an absent one.
// Run: ctest -R model.bf16_held_weights
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tachyon/base/check.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/fp8_projections.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/online_fp8.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/tensor/cache_line_heap.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::model {
namespace {

struct TinyCase {
  const char* arch;
  const char* preset;
};

void PrintTo(const TinyCase& c, std::ostream* os) { *os << c.arch << "/" << c.preset; }

std::filesystem::path write_model(const TinyCase& c, DType dtype) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("tachyon-bf16-held-{}-{}-{}-{}", ::getpid(), c.arch, c.preset, dtype_name(dtype));
  make_model({.arch = c.arch, .preset = c.preset, .seed = 11, .dtype = dtype, .out_dir = dir});
  return dir;
}

// Every position's logits of a 13-token prompt, then 4 single-token decode steps (each one fed
// the previous step's argmax), concatenated.
std::vector<float> prefill_and_decode(const DenseModel& model) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 13; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 5) % vocab));
  SequenceKvCache cache(model.config(), 32);
  std::vector<float> all = model.forward(prompt, cache, /*all_logits=*/true);
  std::vector<float> last(all.end() - vocab, all.end());
  for (int step = 0; step < 4; ++step) {
    const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    last = model.forward(std::span<const int32_t>(&next, 1), cache);
    all.insert(all.end(), last.begin(), last.end());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The matrices a dense forward reads, as (f32 field, bf16 field) pairs, with their names.
struct HeldPair {
  std::string name;
  const std::vector<float>* f32;
  const std::vector<uint16_t>* bf16;
};

std::vector<HeldPair> held_pairs(const ModelWeights& w) {
  std::vector<HeldPair> out{{"lm_head", &w.lm_head, &w.lm_head_bf16}};
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    out.push_back({fmt::format("layers.{}.qkv", l), &lw.qkv, &lw.qkv_bf16});
    out.push_back({fmt::format("layers.{}.o_proj", l), &lw.o_proj, &lw.o_proj_bf16});
    out.push_back({fmt::format("layers.{}.gate_up", l), &lw.gate_up, &lw.gate_up_bf16});
    out.push_back({fmt::format("layers.{}.down", l), &lw.down, &lw.down_bf16});
  }
  return out;
}

class Bf16HeldWeights : public ::testing::TestWithParam<TinyCase> {};

TEST_P(Bf16HeldWeights, LogitsAreBitIdenticalToTheWidenedWeights) {
  const std::filesystem::path dir = write_model(GetParam(), DType::kBF16);
  const ModelConfig config = ModelConfig::from_dir(dir);
  const SafetensorsCheckpoint checkpoint(dir);
  ModelWeights widened = load_weights(config, checkpoint, Bf16MatrixHolding::kWidenToF32);
  ModelWeights held = load_weights(config, checkpoint, Bf16MatrixHolding::kKeepBf16);

  // Each held matrix is the widened one's bf16 bits, with no f32 copy beside it; the widened load
  // holds nothing in bf16.
  const std::vector<HeldPair> widened_pairs = held_pairs(widened), held_pairs_ = held_pairs(held);
  int64_t held_matrices = 0;
  for (size_t i = 0; i < held_pairs_.size(); ++i) {
    const HeldPair &h = held_pairs_[i], &f = widened_pairs[i];
    EXPECT_TRUE(f.bf16->empty()) << f.name << " is held as bf16 by the widening load";
    if (f.f32->empty()) continue;  // not in this layer (a MoE layer's MLP, a tied head, MLA's qkv)
    ASSERT_TRUE(h.f32->empty()) << h.name << " is held in f32 beside its bf16";
    ASSERT_EQ(h.bf16->size(), f.f32->size()) << h.name;
    EXPECT_TRUE(on_cache_line(h.bf16->data())) << h.name << " does not start on a cache line";
    std::vector<float> back(h.bf16->size());
    convert_to_f32(h.bf16->data(), DType::kBF16, back.size(), back.data());
    EXPECT_TRUE(same_bits(back, *f.f32)) << h.name;
    ++held_matrices;
  }
  EXPECT_GE(held_matrices, config.num_hidden_layers) << "fewer matrices held than every layer's o_proj";
  // The f32 head: the tied embedding, or none when an untied head is held as bf16 (never the
  // embedding standing in for it).
  if (held.lm_head_bf16.empty()) {
    EXPECT_EQ(&held.output_embedding(), held.lm_head.empty() ? &held.embed_tokens : &held.lm_head);
  } else {
    EXPECT_TRUE(held.output_embedding().empty()) << "an untied bf16-held head has no f32 matrix";
  }

  const std::vector<float> want = prefill_and_decode(DenseModel(std::move(widened)));
  const std::vector<float> got = prefill_and_decode(DenseModel(std::move(held)));
  EXPECT_TRUE(same_bits(got, want)) << "logits of the bf16-held weights differ from the widened weights'";
  // DenseModel::load is the held form.
  EXPECT_TRUE(same_bits(prefill_and_decode(DenseModel::load(dir)), want));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, Bf16HeldWeights,
                         ::testing::Values(TinyCase{"qwen3", "tiny"}, TinyCase{"qwen3", "tiny-tied"},
                                           TinyCase{"llama", "tiny-bias"}, TinyCase{"qwen3_moe", "tiny-moe"},
                                           TinyCase{"deepseek_v3", "tiny-deepseek"}));

TEST(Bf16HeldWeightsF32, AnF32CheckpointKeepsTheF32Path) {
  const std::filesystem::path dir = write_model({"qwen3", "tiny"}, DType::kF32);
  const ModelWeights w =
      load_weights(ModelConfig::from_dir(dir), SafetensorsCheckpoint(dir), Bf16MatrixHolding::kKeepBf16);
  for (const HeldPair& p : held_pairs(w)) EXPECT_TRUE(p.bf16->empty()) << p.name << " of an f32 checkpoint";
  EXPECT_FALSE(w.layers[0].qkv.empty());
  std::filesystem::remove_all(dir);
}

// Each f32-only reader refuses held weights with an Error naming it, and takes the widened ones.
TEST(Bf16HeldWeightsF32, ReadersOfF32MatricesRefuseHeldOnes) {
  const std::filesystem::path dir = write_model({"qwen3", "tiny"}, DType::kBF16);
  const ModelConfig config = ModelConfig::from_dir(dir);
  const SafetensorsCheckpoint checkpoint(dir);
  auto expect_refused = [](const auto& call, const std::string& reader) {
    try {
      call();
      ADD_FAILURE() << reader << " took held bf16 matrices";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(reader), std::string::npos) << e.what();
    }
  };
  ModelWeights held = load_weights(config, checkpoint, Bf16MatrixHolding::kKeepBf16);
  ASSERT_TRUE(holds_bf16_matrices(held));
  expect_refused([&] { shard_weights(held, 0, 2, false); }, "tensor-parallel sharding");
  expect_refused([&] { quantize_weights_fp8(held); }, "online FP8 quantization");
  expect_refused([&] { to_bf16_weights(load_weights(config, checkpoint, Bf16MatrixHolding::kKeepBf16)); },
                 "the bf16 conversion");
  expect_refused(
      [&] {
        make_fp8_gpu_weights(load_weights(config, checkpoint, Bf16MatrixHolding::kKeepBf16), Fp8SourceGeometry{},
                             [](const std::string&) { return true; }, Fp8RoutedExperts::kFp8);
      },
      "the FP8 projections");

  ModelWeights widened = load_weights(config, checkpoint, Bf16MatrixHolding::kWidenToF32);
  EXPECT_FALSE(holds_bf16_matrices(widened));
  EXPECT_FALSE(shard_weights(widened, 0, 2, false).weights.layers[0].qkv.empty());
  EXPECT_NO_THROW(quantize_weights_fp8(widened));
  EXPECT_NO_THROW(to_bf16_weights(std::move(widened)));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tachyon::model
