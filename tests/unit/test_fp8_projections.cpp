// The GPU's FP8 form (model/fp8_projections.h): quantizing the CPU reference's weights again with
// the source's geometry gives back its E4M3 values (so the GPU computes with the CPU reference's
// weights), for every source geometry, fused parts of any row count, and the FP8 checkpoints
// make-model writes; what stays bf16 is the reference's values rounded; unsupported block widths
// are refused. Run: build/tests/unit_tests --gtest_filter='Fp8Projections*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <random>

#include "tachyon/base/check.h"
#include "tachyon/model/fp8_projections.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/online_fp8.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::model {
namespace {

std::vector<float> projection_test_weight(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = normal(rng);
  w[7] = 0.9f;  // one outlier, so blocks differ in scale
  return w;
}

// The GPU form's values: fp8 * factor[row, col / 128], written out here.
std::vector<float> gpu_form_values(const Fp8BlockWeight& q) {
  EXPECT_EQ(q.block_rows, 1);
  EXPECT_EQ(q.block_cols, 128);
  EXPECT_EQ(q.scale_inv.size(), static_cast<size_t>(q.rows * ((q.cols + 127) / 128)));
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      out[r * q.cols + c] = fp8_e4m3_to_f32(q.data[r * q.cols + c]) * q.scale_inv[r * ((q.cols + 127) / 128) + c / 128];
    }
  }
  return out;
}

// Every value within one f32 rounding of the reference's (the factor may differ in its last bit),
// or with `exact` the reference's own value.
void expect_values(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                   bool exact = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (exact) {
      ASSERT_EQ(got[i], want[i]) << what << " [" << i << "]";
    } else {
      ASSERT_NEAR(got[i], want[i], 4e-7 * std::fabs(want[i])) << what << " [" << i << "]";
    }
  }
}

// The source's own quantization of each part, as the CPU reference computes with it.
std::vector<float> source_round_trip(std::vector<float> w, int64_t cols, std::vector<int64_t> parts,
                                     Fp8SourceGeometry g) {
  int64_t row0 = 0;
  for (int64_t rows : parts) {
    std::span<float> part(w.data() + row0 * cols, static_cast<size_t>(rows * cols));
    fp8_block_round_trip(part, rows, cols, g.block_rows == 0 ? rows : g.block_rows, g.block_cols == 0 ? cols : g.block_cols);
    row0 += rows;
  }
  return w;
}

TEST(Fp8Projections, GpuFormGivesBackTheSourceValuesForEveryGeometry) {
  // Parts of 200 and 72 rows (neither a multiple of 128) and 320 columns (2.5 blocks).
  const int64_t cols = 320;
  const std::vector<int64_t> parts = {200, 72};
  for (Fp8SourceGeometry g : {Fp8SourceGeometry{128, 128}, Fp8SourceGeometry{1, 0}, Fp8SourceGeometry{0, 0},
                              Fp8SourceGeometry{128, 256}}) {
    SCOPED_TRACE(::testing::Message() << "geometry [" << g.block_rows << ", " << g.block_cols << "]");
    const std::vector<float> reference = source_round_trip(projection_test_weight(272, cols, 5), cols, parts, g);
    const Fp8BlockWeight q = to_fp8_gpu_form(reference, cols, {200, 72}, g);
    EXPECT_EQ(q.rows, 272);
    EXPECT_EQ(q.cols, cols);
    expect_values(gpu_form_values(q), reference, "gpu form");
  }
}

TEST(Fp8Projections, PartsAreQuantizedApart) {
  // A part quantized with its neighbour's rows in one block would take the outlier's factor.
  const int64_t cols = 128;
  const std::vector<float> reference = source_round_trip(projection_test_weight(96, cols, 9), cols, {64, 32}, {128, 128});
  const Fp8BlockWeight apart = to_fp8_gpu_form(reference, cols, {64, 32}, {128, 128});
  expect_values(gpu_form_values(apart), reference, "parts apart");
  const Fp8BlockWeight together = to_fp8_gpu_form(reference, cols, {96}, {128, 128});
  EXPECT_NE(together.scale_inv.back(), apart.scale_inv.back());
}

TEST(Fp8Projections, BlockWidthsOtherThanMultiplesOf128AreRefused) {
  const std::vector<float> w = projection_test_weight(64, 256, 1);
  try {
    to_fp8_gpu_form(w, 256, {64}, {128, 64});
    FAIL() << "a 64-column block was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("64 columns"), std::string::npos) << e.what();
  }
}

std::filesystem::path projection_test_dir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() / ("tachyon-fp8proj-" + std::to_string(::getpid()) + "-" + tag);
  std::filesystem::remove_all(dir);
  return dir;
}

// Dequantized GPU projections against the CPU reference's f32 weights; the rest bf16-rounded.
// `exact`: every FP8 value is the reference's own (online FP8, quantized once as the reference is).
void expect_matches_reference(const Fp8GpuWeights& gpu, const ModelWeights& reference, Fp8RoutedExperts experts,
                              bool exact) {
  ASSERT_EQ(gpu.fp8.size(), reference.layers.size());
  for (size_t l = 0; l < reference.layers.size(); ++l) {
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    const LayerWeights& ref = reference.layers[l];
    const Fp8LayerProjections& f = gpu.fp8[l];
    const auto& b = gpu.bf16.layers[l];
    int fp8_count = 0;
    auto check = [&](const Fp8BlockWeight& q, const std::vector<float>& want, const std::vector<uint16_t>& bf16,
                     const char* what) {
      if (want.empty()) {
        EXPECT_EQ(q.rows, 0) << what;
        return;
      }
      ASSERT_GT(q.rows, 0) << what << " is not FP8";
      EXPECT_TRUE(bf16.empty()) << what << " is uploaded twice";
      expect_values(gpu_form_values(q), want, what, exact);
      ++fp8_count;
    };
    check(f.qkv, ref.qkv, b.qkv, "qkv");
    check(f.o_proj, ref.o_proj, b.o_proj, "o_proj");
    check(f.gate_up, ref.gate_up, b.gate_up, "gate_up");
    check(f.down, ref.down, b.down, "down");
    check(f.shared_gate_up, ref.shared_gate_up, b.shared_gate_up, "shared_gate_up");
    check(f.shared_down, ref.shared_down, b.shared_down, "shared_down");
    check(f.q_a_proj, ref.q_a_proj, b.q_a_proj, "q_a_proj");
    check(f.q_b_proj, ref.q_b_proj, b.q_b_proj, "q_b_proj");
    check(f.kv_a_proj, ref.kv_a_proj, b.kv_a_proj, "kv_a_proj");
    if (experts == Fp8RoutedExperts::kFp8) {
      check(f.experts_gate_up, ref.experts_gate_up, b.experts_gate_up, "experts_gate_up");
      check(f.experts_down, ref.experts_down, b.experts_down, "experts_down");
    } else {
      EXPECT_EQ(f.experts_gate_up.rows + f.experts_down.rows, 0) << "routed experts in FP8";
      ASSERT_EQ(b.experts_down.size(), ref.experts_down.size());
      for (size_t i = 0; i < ref.experts_down.size(); i += 97) {
        ASSERT_EQ(b.experts_down[i], f32_to_bf16(ref.experts_down[i])) << "experts_down " << i;
      }
      ASSERT_EQ(b.experts_gate_up.size(), ref.experts_gate_up.size());
    }
    EXPECT_GE(fp8_count, 2);
    // Kept in bf16: the reference's values rounded.
    EXPECT_EQ(b.input_norm.size(), ref.input_norm.size());
    for (size_t i = 0; i < ref.input_norm.size(); ++i) EXPECT_EQ(b.input_norm[i], f32_to_bf16(ref.input_norm[i]));
    ASSERT_EQ(b.router.size(), ref.router.size());
    for (size_t i = 0; i < ref.router.size(); ++i) ASSERT_EQ(b.router[i], f32_to_bf16(ref.router[i])) << "router " << i;
    if (!ref.kv_b_proj.empty()) {
      EXPECT_EQ(b.kv_b_proj.size(), ref.kv_b_proj.size());
    }
  }
  EXPECT_EQ(gpu.bf16.embed_tokens.size(), reference.embed_tokens.size());
}

TEST(Fp8Projections, CheckpointsAndOnlineFp8MatchTheCpuReference) {
  struct Case {
    const char* arch;
    const char* preset;
    WeightQuantization format;  // kNone: online FP8 of the bf16 checkpoint
  };
  for (const Case& c : {Case{"qwen3", "tiny", WeightQuantization::kNone}, Case{"qwen3", "tiny", WeightQuantization::kFp8Block},
                        Case{"llama", "tiny", WeightQuantization::kFp8Tensor},
                        Case{"qwen3", "tiny", WeightQuantization::kFp8Channel},
                        Case{"llama", "tiny", WeightQuantization::kFbgemmFp8},
                        Case{"llama", "tiny", WeightQuantization::kModeloptFp8},
                        Case{"deepseek_v3", "tiny-deepseek", WeightQuantization::kFp8Block},
                        Case{"deepseek_v3", "tiny-deepseek", WeightQuantization::kNone},
                        Case{"deepseek_v32", "tiny-dsa", WeightQuantization::kFp8Block},
                        Case{"qwen3_moe", "tiny-moe", WeightQuantization::kFp8Block},
                        Case{"mixtral", "tiny-mixtral", WeightQuantization::kNone},
                        Case{"mixtral", "tiny-mixtral", WeightQuantization::kFp8Channel}}) {
    SCOPED_TRACE(std::string(c.arch) + "/" + c.preset + "/" + std::string(weight_quantization_name(c.format)));
    const auto dir = projection_test_dir("model");
    make_model({.arch = c.arch, .preset = c.preset, .seed = 4, .dtype = DType::kBF16, .out_dir = dir,
                .quantization = c.format});
    const ModelConfig config = ModelConfig::from_dir(dir);
    const SafetensorsCheckpoint ckpt(dir);
    const bool online = c.format == WeightQuantization::kNone;
    ModelWeights reference = load_weights(config, ckpt);
    if (online) quantize_weights_fp8(reference);
    for (Fp8RoutedExperts experts : {Fp8RoutedExperts::kBf16, Fp8RoutedExperts::kFp8}) {
      SCOPED_TRACE(experts == Fp8RoutedExperts::kFp8 ? "routed experts in FP8" : "routed experts in bf16");
      expect_matches_reference(load_fp8_gpu_weights(config, ckpt, online, experts), reference, experts, online);
    }
    std::filesystem::remove_all(dir);
  }
}

// The checkpoint's own FP8 flags, as load_fp8_gpu_weights reads them.
StoredAsFp8 stored_as_fp8_in(const SafetensorsCheckpoint& ckpt) {
  return [&ckpt](const std::string& name) { return ckpt.contains(name) && ckpt.at(name).dtype == DType::kF8E4M3; };
}

// The loader goes layer by layer (one layer in f32 at a time); converting the whole f32 model at
// once is the definition it must equal, bit for bit.
TEST(Fp8Projections, TheLayerByLayerLoadEqualsTheWholeModelsConversionBitForBit) {
  struct Case {
    const char* arch;
    const char* preset;
    WeightQuantization format;  // kNone: online FP8 of the bf16 checkpoint
  };
  // The FP8 checkpoints (online FP8 quantizes what goes FP8 once, before the round trip of the
  // rest, so it is held to the reference's exact values above instead).
  for (const Case& c : {Case{"llama", "tiny", WeightQuantization::kFp8Tensor},
                        Case{"qwen3", "tiny", WeightQuantization::kFp8Channel},
                        Case{"deepseek_v3", "tiny-deepseek", WeightQuantization::kFp8Block},
                        Case{"deepseek_v32", "tiny-dsa", WeightQuantization::kFp8Block},
                        Case{"mixtral", "tiny-mixtral", WeightQuantization::kFp8Block}}) {
    SCOPED_TRACE(std::string(c.arch) + "/" + c.preset + "/" + std::string(weight_quantization_name(c.format)));
    const auto dir = projection_test_dir("by-layer");
    make_model({.arch = c.arch, .preset = c.preset, .seed = 6, .dtype = DType::kBF16, .out_dir = dir,
                .quantization = c.format});
    const ModelConfig config = ModelConfig::from_dir(dir);
    const SafetensorsCheckpoint ckpt(dir);
    const Fp8GpuWeights want = make_fp8_gpu_weights(load_weights(config, ckpt),
                                                    fp8_source_geometry(config.quantization), stored_as_fp8_in(ckpt),
                                                    Fp8RoutedExperts::kFp8);
    const Fp8GpuWeights got = load_fp8_gpu_weights(config, ckpt, false, Fp8RoutedExperts::kFp8);
    ASSERT_EQ(got.fp8.size(), want.fp8.size());
    ASSERT_EQ(got.bf16.layers.size(), want.bf16.layers.size());
    for (size_t l = 0; l < want.fp8.size(); ++l) {
      EXPECT_TRUE(got.fp8[l] == want.fp8[l]) << "layer " << l << "'s FP8 projections";
      EXPECT_TRUE(got.bf16.layers[l] == want.bf16.layers[l]) << "layer " << l << "'s bf16 tensors";
    }
    EXPECT_EQ(got.bf16.embed_tokens, want.bf16.embed_tokens);
    EXPECT_EQ(got.bf16.final_norm, want.bf16.final_norm);
    EXPECT_EQ(got.bf16.lm_head, want.bf16.lm_head);
    std::filesystem::remove_all(dir);
  }
}

// The layers as load_weights reads them; the rest as load_weights_bf16 does (an f32 checkpoint's
// rounded to bf16 alike).
TEST(WeightsByLayer, EachLayerIsHandedOverInOrderAsLoadWeightsReadsItAndNoneIsKept) {
  for (auto [preset, dtype] : {std::pair{"tiny", DType::kBF16}, std::pair{"tiny-deepseek", DType::kF32}}) {
    SCOPED_TRACE(preset);
    const auto dir = projection_test_dir("layers");
    make_model({.arch = std::string(preset) == "tiny" ? "llama" : "deepseek_v3", .preset = preset, .seed = 2,
                .dtype = dtype, .out_dir = dir});
    const ModelConfig config = ModelConfig::from_dir(dir);
    const SafetensorsCheckpoint ckpt(dir);
    const ModelWeights whole = load_weights(config, ckpt);
    const Bf16ModelWeights whole_bf16 = load_weights_bf16(config, ckpt);
    int64_t next = 0;
    const Bf16ModelWeights rest = load_weights_by_layer(config, ckpt, [&](int64_t l, LayerWeights&& layer) {
      ASSERT_EQ(l, next++);
      EXPECT_TRUE(layer == whole.layers[static_cast<size_t>(l)]) << "layer " << l;
    });
    EXPECT_EQ(next, config.num_hidden_layers);
    ASSERT_EQ(rest.layers.size(), whole.layers.size());
    for (const auto& layer : rest.layers) EXPECT_TRUE(layer == BasicLayerWeights<uint16_t>{}) << "a layer was kept";
    EXPECT_FALSE(rest.embed_tokens.empty());
    EXPECT_EQ(rest.embed_tokens, whole_bf16.embed_tokens);
    EXPECT_EQ(rest.final_norm, whole_bf16.final_norm);
    EXPECT_EQ(rest.lm_head, whole_bf16.lm_head);
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace tachyon::model
