// The FP8 checkpoint formats we load, in one place: what config.json's `quantization_config`
// says, which companion tensor holds a weight's scale, and how the stored E4M3 values and that
// scale make the weight. The CPU loader dequantizes at load time (model_weights.cpp), so the
// forward sees f32 (or bf16) weights as from any other checkpoint; FP8 compute is the GPU's
// business. make-model writes the same formats (make_model.h), so tests need no download.
//
//   format       config.json                                      X.weight  scale tensor             w =
//   kFp8Block    quant_method fp8, fmt e4m3, weight_block_size     F8_E4M3   X.weight_scale_inv f32   fp8 * s[r/128, c/128]
//                [128, 128] (DeepSeek-V3/V3.2, GLM-5, Qwen3-FP8)             [ceil(out/128), ceil(in/128)]
//   kFp8Tensor   compressed-tensors float-quantized, 8-bit float  F8_E4M3   X.weight_scale f32 [] / [1] fp8 * s
//                weights, strategy tensor
//   kFp8Channel  the same, strategy channel                       F8_E4M3   X.weight_scale f32 [out, 1] fp8 * s[r]
//   kFbgemmFp8   quant_method fbgemm_fp8                          F8_E4M3   X.weight_scale f32 [out, 1] fp8 * s[r]
//   kModeloptFp8 quant_method modelopt, quant_algo FP8 (NVIDIA    F8_E4M3   X.weight_scale f32 [] / [1] fp8 * s
//                Model Optimizer; in config.json or, from older
//                exports, hf_quant_config.json beside it)
//
// A tensor stored in another dtype (norms, embeddings, lm_head, routers, whatever the format keeps
// unquantized) has no scale and loads as usual. Activation scales (X.input_scale, static schemes)
// are ignored: how activations are quantized is the compute side's concern, not the weights'. So
// are calibrated KV-cache scales (ModelOpt's kv_cache_quant_algo FP8, compressed-tensors' 8-bit
// float kv_cache_scheme): the FP8 KV cache (--kv-cache-dtype fp8) keeps a scale per cached row.
// Tests: tests/unit/test_fp8_checkpoints.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tachyon::model {

struct TensorView;

enum class WeightQuantization { kNone, kFp8Block, kFp8Tensor, kFp8Channel, kFbgemmFp8, kModeloptFp8 };

struct QuantizationConfig {
  WeightQuantization format = WeightQuantization::kNone;
  int64_t block_rows = 128, block_cols = 128;  // kFp8Block's weight_block_size
  // Module names the config keeps unquantized (modules_to_not_convert / ignore), as written;
  // informative: the loader goes by each tensor's dtype.
  std::vector<std::string> not_quantized;
  bool static_activation_scales = false;  // the checkpoint carries X.input_scale (ignored on load)
  // Calibrated KV-cache scales in the checkpoint, skipped on load: ModelOpt's kv_cache_quant_algo
  // FP8 (X.k_proj.k_scale), compressed-tensors' 8-bit float kv_cache_scheme (X.self_attn.k_scale;
  // older exports X.k_proj.output_scale).
  bool kv_cache_scales = false;

  bool quantized() const { return format != WeightQuantization::kNone; }
  // "X.weight_scale_inv" (kFp8Block) or "X.weight_scale" for weight "X.weight".
  std::string scale_name(const std::string& weight_name) const;
};

// make-model's names: "fp8-block", "fp8-tensor", "fp8-channel", "fbgemm-fp8", "modelopt-fp8" ("none"
// for kNone).
std::string_view weight_quantization_name(WeightQuantization format);
// The inverse; throws Error listing the names otherwise.
WeightQuantization weight_quantization_from_name(std::string_view name);

// Parses config.json's "quantization_config" (absent or null: kNone). Any other quant_method,
// scheme, bit width or block size throws one Error naming it and listing what is supported.
QuantizationConfig parse_quantization_config(const nlohmann::json& config_json, const std::string& source);
// The "quantization_config" object a checkpoint of this format carries (inverse of the parse).
nlohmann::json quantization_config_to_json(const QuantizationConfig& q);

// ModelOpt's side file: older exports leave config.json without a quantization_config and write
// hf_quant_config.json ({"producer": {"name": "modelopt", ...}, "quantization": {"quant_algo": ...}})
// beside it. The file's name, the quantization_config it stands for (refused like any other when
// it is not one we load), and the file a ModelOpt checkpoint gets from make-model.
inline constexpr const char* kModeloptSideFile = "hf_quant_config.json";
nlohmann::json quantization_config_from_side_file(const nlohmann::json& side_file, const std::string& source);
nlohmann::json modelopt_side_file(const QuantizationConfig& q);

// The shape of a [rows, cols] weight's scale tensor as the format writes it.
std::vector<int64_t> fp8_scale_shape(const QuantizationConfig& q, int64_t rows, int64_t cols);

// A checkpoint's tensors the loader may skip when quantized (activation scales; KV-cache scales
// when its config declares them).
bool is_ignorable_quantization_tensor(const QuantizationConfig& q, const std::string& name);
// The calibrated scales a checkpoint of this format stores for linear weight `weight_name`
// ("X.weight"), all of which the loader skips: X.input_scale (static activation scales) and, for a
// k_proj / v_proj with declared KV-cache scales, ModelOpt's X.k_scale on the projection or
// compressed-tensors' k_scale on the attention module. make-model writes them.
std::vector<std::string> calibration_scale_names(const QuantizationConfig& q, const std::string& weight_name);

// weight: [rows, cols] F8_E4M3; scale: the companion named by scale_name, any float dtype.
// Writes the dequantized [rows, cols] weight into `out`; errors name both tensors and the file.
void dequantize_fp8_weight(const QuantizationConfig& q, const TensorView& weight, const TensorView& scale, float* out);

// The inverse, for make-model: a [rows, cols] f32 weight as the format stores it.
struct Fp8QuantizedWeight {
  std::vector<uint8_t> data;         // [rows, cols] e4m3
  std::vector<float> scale;          // the scale tensor's values
  std::vector<int64_t> scale_shape;  // as the format writes it ([1] for per-tensor)
};
Fp8QuantizedWeight quantize_fp8_weight(const QuantizationConfig& q, std::span<const float> weight, int64_t rows,
                                       int64_t cols);

}  // namespace tachyon::model
