// FP8 checkpoints (model/fp8_checkpoint.h): make-model writes each format from the same random
// f32 weights as the plain model; the loader's weights equal the format's formula applied here,
// independently, to what the file holds; the dequantized model's logits stay close to the plain
// model's; unsupported quantization configs are refused naming what is unsupported.
// Run: build/tests/unit_tests --gtest_filter='Fp8*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::model {
namespace {

std::filesystem::path temp_dir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() / ("tachyon-fp8-" + std::to_string(::getpid()) + "-" + tag);
  std::filesystem::remove_all(dir);
  return dir;
}

struct Case {
  const char* arch;
  const char* preset;
  WeightQuantization format;
  double max_logit_error;  // relative L2 error of all the prompt's logits vs the plain model's
  int64_t min_top1;        // positions of 16 whose argmax agrees
};

std::string case_name(const Case& c) {
  return std::string(c.arch) + "/" + c.preset + "/" + std::string(weight_quantization_name(c.format));
}

std::vector<float> floats(const TensorView& view) {
  std::vector<float> out(static_cast<size_t>(view.numel()));
  convert_to_f32(view.data, view.dtype, out.size(), out.data());
  return out;
}

// The format's definition, written out here rather than calling the loader's code.
std::vector<float> dequantize_by_hand(const SafetensorsCheckpoint& ckpt, const std::string& name,
                                      WeightQuantization format) {
  const TensorView& w = ckpt.at(name);
  EXPECT_EQ(w.dtype, DType::kF8E4M3) << name;
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const bool block = format == WeightQuantization::kFp8Block;
  const std::vector<float> s = floats(ckpt.at(name + (block ? "_scale_inv" : "_scale")));
  const auto* q = reinterpret_cast<const uint8_t*>(w.data);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float factor = 0.0f;
      switch (format) {
        case WeightQuantization::kFp8Block: factor = s[(r / 128) * ((cols + 127) / 128) + c / 128]; break;
        case WeightQuantization::kFp8Tensor:
        case WeightQuantization::kModeloptFp8: factor = s[0]; break;
        default: factor = s[r]; break;  // per channel: [out, 1]
      }
      out[r * cols + c] = fp8_e4m3_to_f32(q[r * cols + c]) * factor;
    }
  }
  return out;
}

// The quantization the format implies, by hand: block (tensor/fp8.h's round trip, tested on its
// own), or one amax / 448 scale per tensor or per row.
std::vector<float> round_trip_by_hand(std::vector<float> w, int64_t rows, int64_t cols, WeightQuantization format) {
  if (format == WeightQuantization::kFp8Block) {
    fp8_block_round_trip(w, rows, cols);
    return w;
  }
  const bool per_tensor = format == WeightQuantization::kFp8Tensor || format == WeightQuantization::kModeloptFp8;
  const int64_t groups = per_tensor ? 1 : rows, size = rows * cols / groups;
  for (int64_t g = 0; g < groups; ++g) {
    float amax = 0.0f;
    for (int64_t i = g * size; i < (g + 1) * size; ++i) amax = std::max(amax, std::fabs(w[i]));
    const float scale = amax / 448.0f;
    for (int64_t i = g * size; i < (g + 1) * size; ++i) w[i] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(w[i] / scale)) * scale;
  }
  return w;
}

void expect_same(std::span<const float> loaded, const std::vector<float>& expected, const std::string& what) {
  ASSERT_GE(loaded.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(loaded[i], expected[i]) << what << " [" << i << "]";
}

// Logits of every position of one prompt.
std::vector<float> prompt_logits(const ModelWeights& weights) {
  const DenseModel model(weights);
  const std::vector<int32_t> tokens = {1, 17, 300, 42, 5, 99, 250, 7, 64, 128, 3, 511, 200, 33, 77, 150};
  SequenceKvCache cache(model.config(), static_cast<int64_t>(tokens.size()));
  return model.forward(tokens, cache, /*all_logits=*/true);
}

// Measured (seed 3, the 16-token prompt above): relative L2 error of all logits, top-1 agreement.
//   qwen3 tiny                fp8-block 8.5% 13/16, fp8-tensor and modelopt 8.9% 13/16, fp8-channel and
//                             fbgemm 8.1% 13/16
//   deepseek_v3 tiny-deepseek fp8-block and fp8-tensor 31% 11/16, fp8-channel and fbgemm 34% 9/16
//   deepseek_v32 tiny-dsa     fp8-block 43% 9/16
//   mixtral tiny-mixtral      fp8-channel 19% 12/16
// Every FP8 weight is within E4M3's rounding of the plain one (2.6% relative RMS: 3 mantissa bits),
// and the first layer's outputs are off by about that much (q 2.8%, attention 4%); random
// untrained weights then amplify it layer by layer (qwen3 tiny: 4% -> 7% -> 8% at the logits), and
// routing flips in MoE layers more so (tiny-deepseek: 6%, 26%, 50% at its three layers' outputs).
// So these bounds guard against gross errors; what pins the values exactly are the checks above
// (loaded == the format's formula on the file == the plain weights quantized). Tiny dims are all
// under 128, so a block is a whole tensor there except qwen3's 160-wide MLP.
TEST(Fp8Checkpoints, LoadedWeightsAreTheFormatsDequantizationAndLogitsStayClose) {
  const std::vector<Case> cases = {
      {"qwen3", "tiny", WeightQuantization::kFp8Block, 0.12, 12},
      {"qwen3", "tiny", WeightQuantization::kFp8Tensor, 0.12, 12},
      {"qwen3", "tiny", WeightQuantization::kFp8Channel, 0.12, 12},
      {"qwen3", "tiny", WeightQuantization::kFbgemmFp8, 0.12, 12},
      {"qwen3", "tiny", WeightQuantization::kModeloptFp8, 0.12, 12},
      {"deepseek_v3", "tiny-deepseek", WeightQuantization::kFp8Block, 0.45, 8},
      {"deepseek_v3", "tiny-deepseek", WeightQuantization::kFp8Tensor, 0.45, 8},
      {"deepseek_v3", "tiny-deepseek", WeightQuantization::kFp8Channel, 0.45, 8},
      {"deepseek_v3", "tiny-deepseek", WeightQuantization::kFbgemmFp8, 0.45, 8},
      {"deepseek_v32", "tiny-dsa", WeightQuantization::kFp8Block, 0.55, 7},
      {"mixtral", "tiny-mixtral", WeightQuantization::kFp8Channel, 0.25, 10},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(case_name(c));
    const auto plain_dir = temp_dir("plain"), fp8_dir = temp_dir("fp8");
    make_model({.arch = c.arch, .preset = c.preset, .seed = 3, .out_dir = plain_dir});
    make_model({.arch = c.arch, .preset = c.preset, .seed = 3, .out_dir = fp8_dir, .quantization = c.format});
    const ModelConfig config = ModelConfig::from_dir(fp8_dir);
    ASSERT_EQ(config.quantization.format, c.format);
    const SafetensorsCheckpoint ckpt(fp8_dir);
    const ModelWeights fp8 = load_weights(config, ckpt);
    const ModelWeights plain = load_weights(ModelConfig::from_dir(plain_dir), SafetensorsCheckpoint(plain_dir));

    // (a) The loaded weights are the dequantization of what the file holds.
    const LayerWeights& l0 = fp8.layers[0];
    const LayerWeights& l1 = fp8.layers[1];
    const SafetensorsCheckpoint plain_ckpt(plain_dir);
    const auto check = [&](const std::string& name, std::span<const float> loaded) {
      const std::vector<float> file = dequantize_by_hand(ckpt, name, c.format);
      expect_same(loaded, file, name);
      // ... and the file holds the plain model's values quantized (so the logits below differ
      // by FP8 rounding alone).
      const TensorView& original = plain_ckpt.at(name);
      expect_same(file, round_trip_by_hand(floats(original), original.shape[0], original.shape[1], c.format),
                  name + " (plain, round-tripped)");
    };
    if (config.is_mla()) {
      check("model.layers.0.self_attn.q_a_proj.weight", l0.q_a_proj);
      check("model.layers.0.self_attn.kv_b_proj.weight", l0.kv_b_proj);
      check("model.layers.0.mlp.down_proj.weight", l0.down);
      check("model.layers.1.mlp.experts.0.down_proj.weight", l1.experts_down);
      check("model.layers.1.mlp.shared_experts.gate_proj.weight", l1.shared_gate_up);
      if (config.has_sparse_attention()) check("model.layers.0.self_attn.indexer.wk.weight", l0.indexer_wk);
    } else if (config.is_moe()) {
      check("model.layers.0.block_sparse_moe.experts.0.w1.weight", l0.experts_gate_up);
      check("model.layers.0.self_attn.o_proj.weight", l0.o_proj);
    } else {
      check("model.layers.0.self_attn.q_proj.weight", l0.qkv);
      check("model.layers.1.mlp.down_proj.weight", l1.down);
    }
    // What stays unquantized is the plain model's, bit for bit.
    EXPECT_EQ(fp8.embed_tokens, plain.embed_tokens);
    EXPECT_EQ(fp8.output_embedding(), plain.output_embedding());
    EXPECT_EQ(l0.input_norm, plain.layers[0].input_norm);
    EXPECT_EQ(l1.router, plain.layers[1].router);
    // The bf16 loader goes through the same dequantization.
    const Bf16ModelWeights bf16 = load_weights_bf16(config, ckpt);
    EXPECT_EQ(bf16.layers[0].o_proj[5], f32_to_bf16(l0.o_proj[5]));

    // (b) Logits close to the plain model's.
    const std::vector<float> got = prompt_logits(fp8), want = prompt_logits(plain);
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
    const int64_t vocab = config.vocab_size, positions = static_cast<int64_t>(want.size()) / vocab;
    int64_t agree = 0;
    for (int64_t p = 0; p < positions; ++p) {
      const auto argmax = [&](const std::vector<float>& v) {
        return std::max_element(v.begin() + p * vocab, v.begin() + (p + 1) * vocab) - (v.begin() + p * vocab);
      };
      agree += argmax(got) == argmax(want);
    }
    const double relative = std::sqrt(diff / norm);
    std::printf("[fp8] %-40s relative logit error %.4f, top-1 %lld/%lld\n", case_name(c).c_str(), relative,
                static_cast<long long>(agree), static_cast<long long>(positions));
    EXPECT_LT(relative, c.max_logit_error);
    EXPECT_GE(agree, c.min_top1);
    std::filesystem::remove_all(plain_dir);
    std::filesystem::remove_all(fp8_dir);
  }
}

std::vector<float> all_logits(const std::filesystem::path& dir) {
  return prompt_logits(load_weights(ModelConfig::from_dir(dir), SafetensorsCheckpoint(dir)));
}

// NVIDIA's ModelOpt FP8 is per-tensor FP8 in another container: the same seed's fp8-tensor and
// modelopt-fp8 checkpoints hold the same codes and factors, so their logits agree bit for bit, read
// from config.json or, as older exports have it, from hf_quant_config.json alone. The calibrated
// input and KV-cache scales are skipped only while the config declares them.
TEST(Fp8Checkpoints, ModeloptFp8IsPerTensorFp8InNvidiasContainer) {
  const auto tensor_dir = temp_dir("tensor"), modelopt_dir = temp_dir("modelopt");
  make_model({.arch = "llama", .preset = "tiny", .seed = 5, .out_dir = tensor_dir,
              .quantization = WeightQuantization::kFp8Tensor});
  make_model({.arch = "llama", .preset = "tiny", .seed = 5, .out_dir = modelopt_dir,
              .quantization = WeightQuantization::kModeloptFp8});
  {
    const SafetensorsCheckpoint ckpt(modelopt_dir);
    const std::string q = "model.layers.1.self_attn.q_proj.";
    EXPECT_EQ(ckpt.at(q + "weight").dtype, DType::kF8E4M3);
    EXPECT_EQ(ckpt.at(q + "weight_scale").shape, std::vector<int64_t>{});  // a scalar, as ModelOpt writes it
    EXPECT_EQ(ckpt.at(q + "input_scale").dtype, DType::kF32);
    EXPECT_TRUE(ckpt.contains("model.layers.1.self_attn.k_proj.k_scale"));
    EXPECT_TRUE(ckpt.contains("model.layers.1.self_attn.v_proj.v_scale"));
    EXPECT_EQ(ckpt.at("lm_head.weight").dtype, DType::kF32);
  }
  const nlohmann::json config = read_json_file(modelopt_dir / "config.json");
  EXPECT_EQ(config["quantization_config"]["quant_method"], "modelopt");
  EXPECT_EQ(config["quantization_config"]["quant_algo"], "FP8");
  EXPECT_EQ(config["quantization_config"]["kv_cache_quant_algo"], "FP8");
  const nlohmann::json side = read_json_file(modelopt_dir / kModeloptSideFile);
  EXPECT_EQ(side["producer"]["name"], "modelopt");
  EXPECT_EQ(side["quantization"]["exclude_modules"], nlohmann::json::array({"lm_head"}));

  const std::vector<float> want = all_logits(tensor_dir);
  EXPECT_EQ(all_logits(modelopt_dir), want);

  nlohmann::json older = config;  // the side file alone says how the weights are quantized
  older.erase("quantization_config");
  write_file(modelopt_dir / "config.json", older.dump(2));
  EXPECT_EQ(ModelConfig::from_dir(modelopt_dir).quantization.format, WeightQuantization::kModeloptFp8);
  EXPECT_TRUE(ModelConfig::from_dir(modelopt_dir).quantization.kv_cache_scales);
  EXPECT_EQ(all_logits(modelopt_dir), want);

  nlohmann::json undeclared = config;  // KV-cache scales in the files, none in the config: refused by name
  undeclared["quantization_config"]["kv_cache_quant_algo"] = nullptr;
  write_file(modelopt_dir / "config.json", undeclared.dump(2));
  try {
    all_logits(modelopt_dir);
    FAIL() << "loaded KV-cache scales the config does not declare";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("_scale'"), std::string::npos) << e.what();
  }

  std::filesystem::remove(modelopt_dir / "config.json");  // a side file that is not ModelOpt's is refused
  write_file(modelopt_dir / "config.json", older.dump(2));
  write_file(modelopt_dir / kModeloptSideFile,
             R"({"producer": {"name": "other"}, "quantization": {"quant_algo": "FP8"}})");
  EXPECT_THROW(ModelConfig::from_dir(modelopt_dir), Error);
  write_file(modelopt_dir / kModeloptSideFile,
             R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}})");
  try {
    ModelConfig::from_dir(modelopt_dir);
    FAIL() << "accepted NVFP4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quant_algo 'NVFP4'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(kModeloptSideFile), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(tensor_dir);
  std::filesystem::remove_all(modelopt_dir);
}

// llm-compressor's FP8-KV exports: an 8-bit float kv_cache_scheme with calibrated scales on the
// attention (self_attn.k_scale; older ones k_proj.output_scale), skipped while declared; the
// logits are those of the same checkpoint without them.
TEST(Fp8Checkpoints, CompressedTensorsKvCacheScalesAreSkippedWhileDeclared) {
  const auto plain_dir = temp_dir("ct"), kv_dir = temp_dir("ct-kv");
  make_model({.arch = "qwen3", .preset = "tiny", .seed = 7, .out_dir = plain_dir,
              .quantization = WeightQuantization::kFp8Channel});
  make_model({.arch = "qwen3", .preset = "tiny", .seed = 7, .out_dir = kv_dir,
              .quantization = WeightQuantization::kFp8Channel, .kv_cache_scales = true});
  {
    const SafetensorsCheckpoint ckpt(kv_dir);
    EXPECT_TRUE(ckpt.contains("model.layers.0.self_attn.k_scale"));
    EXPECT_TRUE(ckpt.contains("model.layers.1.self_attn.v_scale"));
  }
  const nlohmann::json config = read_json_file(kv_dir / "config.json");
  EXPECT_EQ(config["quantization_config"]["kv_cache_scheme"]["num_bits"], 8);
  EXPECT_TRUE(ModelConfig::from_dir(kv_dir).quantization.kv_cache_scales);
  EXPECT_EQ(all_logits(kv_dir), all_logits(plain_dir));

  nlohmann::json undeclared = config;
  undeclared["quantization_config"].erase("kv_cache_scheme");
  write_file(kv_dir / "config.json", undeclared.dump(2));
  EXPECT_THROW(all_logits(kv_dir), Error);
  EXPECT_THROW(make_model({.arch = "qwen3", .preset = "tiny", .out_dir = kv_dir,
                           .quantization = WeightQuantization::kFp8Block, .kv_cache_scales = true}),
               Error);
  std::filesystem::remove_all(plain_dir);
  std::filesystem::remove_all(kv_dir);
}

TEST(Fp8Checkpoints, FileHoldsFp8LinearsAndScalesOnly) {
  const auto dir = temp_dir("names");
  make_model({.arch = "deepseek_v3", .preset = "tiny-deepseek", .out_dir = dir,
              .quantization = WeightQuantization::kFp8Block});
  const SafetensorsCheckpoint ckpt(dir);
  EXPECT_EQ(ckpt.at("model.layers.0.self_attn.q_b_proj.weight").dtype, DType::kF8E4M3);
  EXPECT_EQ(ckpt.at("model.layers.0.self_attn.q_b_proj.weight_scale_inv").shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(ckpt.at("model.layers.1.mlp.experts.3.up_proj.weight").dtype, DType::kF8E4M3);
  for (const char* kept : {"model.embed_tokens.weight", "lm_head.weight", "model.layers.1.mlp.gate.weight",
                           "model.layers.0.input_layernorm.weight", "model.layers.1.mlp.gate.e_score_correction_bias"}) {
    EXPECT_EQ(ckpt.at(kept).dtype, DType::kF32) << kept;
    EXPECT_FALSE(ckpt.contains(std::string(kept) + "_scale_inv")) << kept;
  }
  std::filesystem::remove_all(dir);
}

// A channel scale written [out] instead of [out, 1], and a per-tensor one as a scalar [], load too.
TEST(Fp8Checkpoints, ScaleShapesAreCheckedAndNamed) {
  QuantizationConfig q;
  q.format = WeightQuantization::kFp8Channel;
  const std::vector<uint8_t> data = {f32_to_fp8_e4m3(1.0f), f32_to_fp8_e4m3(-2.0f), f32_to_fp8_e4m3(0.5f),
                                     f32_to_fp8_e4m3(4.0f)};
  const std::vector<float> scales = {0.5f, 2.0f};
  TensorView w{"x.weight", DType::kF8E4M3, {2, 2}, reinterpret_cast<const std::byte*>(data.data()), "f"};
  TensorView s{"x.weight_scale", DType::kF32, {2}, reinterpret_cast<const std::byte*>(scales.data()), "f"};
  std::vector<float> out(4);
  dequantize_fp8_weight(q, w, s, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1.0f, 1.0f, 8.0f}));
  q.format = WeightQuantization::kFp8Tensor;
  s.shape = {};
  dequantize_fp8_weight(q, w, s, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1.0f, 0.25f, 2.0f}));
  s.shape = {1, 2};
  try {
    dequantize_fp8_weight(q, w, s, out.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.weight_scale"), std::string::npos) << e.what();
  }
}

void expect_refused(nlohmann::json quantization, const std::vector<std::string>& mentions) {
  nlohmann::json j = make_model_config({.arch = "deepseek_v3", .preset = "tiny-deepseek"}).to_json();
  j["quantization_config"] = std::move(quantization);
  try {
    ModelConfig::from_json(j);
    FAIL() << "accepted " << j["quantization_config"].dump();
  } catch (const Error& e) {
    for (const std::string& m : mentions) EXPECT_NE(std::string(e.what()).find(m), std::string::npos) << e.what();
  }
}

TEST(Fp8Checkpoints, UnsupportedQuantizationIsRefusedNamingIt) {
  const std::string supported = "modelopt with quant_algo FP8";  // the supported list every refusal carries
  using nlohmann::json;
  expect_refused(json::parse(R"({"quant_method": "awq", "bits": 4})"), {"quant_method 'awq'", supported});
  expect_refused(json::parse(R"({"quant_method": "gptq", "bits": 4})"), {"'gptq'", supported});
  expect_refused(json::parse(R"({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [64, 64]})"),
                 {"'fp8'", "weight_block_size [64,64]", supported});
  expect_refused(json::parse(R"({"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]})"),
                 {"'fp8'", "fmt 'e5m2'", supported});
  expect_refused(json::parse(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
                                 "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}})"),
                 {"'compressed-tensors'", "format 'pack-quantized'", supported});
  expect_refused(json::parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
                                 "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float",
                                                                           "strategy": "group"}}}})"),
                 {"strategy 'group'", supported});
  expect_refused(json::parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
                                 "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float",
                                                                           "strategy": "tensor"}}},
                                 "kv_cache_scheme": {"num_bits": 8, "type": "int"}})"),
                 {"kv_cache_scheme of 8-bit int values", supported});
  expect_refused(json::parse(R"({"quant_method": "modelopt", "quant_algo": "NVFP4"})"),
                 {"'modelopt'", "quant_algo 'NVFP4'", supported});
  expect_refused(json::parse(R"({"quant_method": "modelopt", "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"})"),
                 {"quant_algo 'FP8_PER_CHANNEL_PER_TOKEN'", supported});
  expect_refused(json::parse(R"({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"})"),
                 {"kv_cache_quant_algo 'NVFP4'", supported});
  expect_refused(json::parse(R"({"quant_method": "modelopt"})"), {"no quant_algo", supported});
  // A value of the wrong JSON type is an error naming the config, not a bare JSON library message.
  expect_refused(json::parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
                                 "config_groups": {"group_0": {"weights": {"num_bits": "8", "type": "float"}}}})"),
                 {"config.json: quantization_config has a value of the wrong type", "type must be number"});
  // Each supported format round-trips through config.json.
  for (WeightQuantization f : {WeightQuantization::kFp8Block, WeightQuantization::kFp8Tensor,
                               WeightQuantization::kFp8Channel, WeightQuantization::kFbgemmFp8,
                               WeightQuantization::kModeloptFp8}) {
    const ModelConfig c = make_model_config({.arch = "qwen3", .preset = "tiny", .quantization = f});
    EXPECT_EQ(ModelConfig::from_json(c.to_json()).quantization.format, f);
  }
  EXPECT_THROW(weight_quantization_from_name("int4"), Error);
}

}  // namespace
}  // namespace tachyon::model
