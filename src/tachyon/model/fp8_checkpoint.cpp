#include "tachyon/model/fp8_checkpoint.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tachyon/base/check.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::model {
namespace {

constexpr const char* kSupported =
    "supported: quant_method fp8 with fmt e4m3 and weight_block_size [128, 128]; compressed-tensors with format "
    "float-quantized and 8-bit float weights, strategy tensor or channel; fbgemm_fp8; modelopt with quant_algo FP8 "
    "(kv_cache_quant_algo FP8 or none); KV-cache scales of 8-bit float KV caches (skipped)";

// Throws; every refusal names the quant_method and what of it is unsupported, and lists what is.
void refuse(const std::string& source, const std::string& method, const std::string& what) {
  TACHYON_FAIL() << source << ": quantization_config with quant_method '" << method << "': " << what
                 << " is not supported (" << kSupported << ")";
}

std::vector<std::string> string_list(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  for (const auto& item : j[key]) out.push_back(item.get<std::string>());
  return out;
}

// DeepSeek's / transformers' FineGrainedFP8: block-scaled e4m3 weights.
void parse_block_fp8(const nlohmann::json& j, const std::string& source, QuantizationConfig& q) {
  const std::string fmt = j.value("fmt", "e4m3");
  if (fmt != "e4m3") refuse(source, "fp8", fmt::format("fmt '{}'", fmt));
  if (!j.contains("weight_block_size") || j["weight_block_size"].is_null()) {
    refuse(source, "fp8", "per-tensor fp8 without weight_block_size");
  }
  const nlohmann::json& block = j["weight_block_size"];
  if (block != nlohmann::json::array({128, 128})) refuse(source, "fp8", fmt::format("weight_block_size {}", block.dump()));
  q.format = WeightQuantization::kFp8Block;
  q.block_rows = q.block_cols = 128;
  q.static_activation_scales = j.value("activation_scheme", "dynamic") == "static";
  q.not_quantized = string_list(j, "modules_to_not_convert");
  for (const std::string& name : string_list(j, "ignored_layers")) q.not_quantized.push_back(name);
}

// compressed-tensors (llm-compressor) float-quantized: per-tensor or per-channel e4m3 weights.
void parse_compressed_tensors(const nlohmann::json& j, const std::string& source, QuantizationConfig& q) {
  const std::string method = "compressed-tensors";
  const std::string format = j.value("format", "");
  if (format != "float-quantized") refuse(source, method, fmt::format("format '{}'", format));
  if (j.contains("kv_cache_scheme") && !j["kv_cache_scheme"].is_null()) {
    const nlohmann::json& kv = j["kv_cache_scheme"];
    const int64_t bits = kv.is_object() ? kv.value("num_bits", int64_t{0}) : 0;
    const std::string type = kv.is_object() ? kv.value("type", "") : "";
    if (bits != 8 || type != "float") refuse(source, method, fmt::format("kv_cache_scheme of {}-bit {} values", bits, type));
    q.kv_cache_scales = true;
  }
  TACHYON_CHECK(j.contains("config_groups") && j["config_groups"].is_object() && !j["config_groups"].empty())
      << source << ": quantization_config (compressed-tensors) has no config_groups";
  std::string strategy;
  for (const auto& [group, scheme] : j["config_groups"].items()) {
    TACHYON_CHECK(scheme.contains("weights") && scheme["weights"].is_object())
        << source << ": quantization_config config_groups." << group << " has no weights scheme";
    const nlohmann::json& w = scheme["weights"];
    const int64_t bits = w.value("num_bits", int64_t{0});
    const std::string type = w.value("type", "");
    if (bits != 8 || type != "float") refuse(source, method, fmt::format("{}-bit {} weights", bits, type));
    const std::string s = w.value("strategy", "");
    if (s != "tensor" && s != "channel") refuse(source, method, fmt::format("weight strategy '{}'", s));
    if (!w.value("symmetric", true)) refuse(source, method, "asymmetric weights");
    if (w.value("dynamic", false)) refuse(source, method, "dynamic weight scales");
    if (!strategy.empty() && s != strategy) refuse(source, method, "config groups of different weight strategies");
    strategy = s;
    const nlohmann::json* in = scheme.contains("input_activations") ? &scheme["input_activations"] : nullptr;
    if (in != nullptr && in->is_object() && !in->value("dynamic", true)) q.static_activation_scales = true;
  }
  q.format = strategy == "tensor" ? WeightQuantization::kFp8Tensor : WeightQuantization::kFp8Channel;
  q.not_quantized = string_list(j, "ignore");
}

// NVIDIA Model Optimizer's per-tensor FP8: config.json's flat form ({"quant_method": "modelopt",
// "quant_algo": "FP8", ...}) or the side file's, {"quantization": {"quant_algo": ...}}.
void parse_modelopt(const nlohmann::json& j, const std::string& source, QuantizationConfig& q) {
  const std::string method = "modelopt";
  const nlohmann::json& body = j.contains("quantization") && j["quantization"].is_object() ? j["quantization"] : j;
  const auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  const std::string algo = body.contains("quant_algo") ? text(body["quant_algo"]) : "";
  if (algo != "FP8") refuse(source, method, algo.empty() ? "no quant_algo" : fmt::format("quant_algo '{}'", algo));
  if (body.contains("kv_cache_quant_algo") && !body["kv_cache_quant_algo"].is_null()) {
    const std::string kv = text(body["kv_cache_quant_algo"]);
    if (kv != "FP8") refuse(source, method, fmt::format("kv_cache_quant_algo '{}'", kv));
    q.kv_cache_scales = true;
  }
  q.format = WeightQuantization::kModeloptFp8;
  q.static_activation_scales = true;  // ModelOpt's FP8 calibrates X.input_scale
  q.not_quantized = string_list(body, "exclude_modules");
}

// One factor for the whole weight.
bool per_tensor(WeightQuantization format) {
  return format == WeightQuantization::kFp8Tensor || format == WeightQuantization::kModeloptFp8;
}

std::string scale_shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

std::string QuantizationConfig::scale_name(const std::string& weight_name) const {
  return weight_name + (format == WeightQuantization::kFp8Block ? "_scale_inv" : "_scale");
}

std::string_view weight_quantization_name(WeightQuantization format) {
  switch (format) {
    case WeightQuantization::kNone: return "none";
    case WeightQuantization::kFp8Block: return "fp8-block";
    case WeightQuantization::kFp8Tensor: return "fp8-tensor";
    case WeightQuantization::kFp8Channel: return "fp8-channel";
    case WeightQuantization::kFbgemmFp8: return "fbgemm-fp8";
    case WeightQuantization::kModeloptFp8: return "modelopt-fp8";
  }
  TACHYON_FAIL() << "unknown weight quantization";
}

WeightQuantization weight_quantization_from_name(std::string_view name) {
  for (WeightQuantization f : {WeightQuantization::kNone, WeightQuantization::kFp8Block, WeightQuantization::kFp8Tensor,
                               WeightQuantization::kFp8Channel, WeightQuantization::kFbgemmFp8,
                               WeightQuantization::kModeloptFp8}) {
    if (weight_quantization_name(f) == name) return f;
  }
  TACHYON_FAIL() << "unknown quantization format '" << name << "' (supported: fp8-block, fp8-tensor, fp8-channel, "
                 << "fbgemm-fp8, modelopt-fp8)";
}

QuantizationConfig parse_quantization_config(const nlohmann::json& config_json, const std::string& source) {
  QuantizationConfig q;
  if (!config_json.contains("quantization_config") || config_json["quantization_config"].is_null()) return q;
  const nlohmann::json& j = config_json["quantization_config"];
  TACHYON_CHECK(j.is_object()) << source << ": field 'quantization_config' must be an object";
  try {  // the parsers read fields with their JSON types; a value of another type throws
    const std::string method = j.value("quant_method", "");
    if (method == "fp8") {
      parse_block_fp8(j, source, q);
    } else if (method == "compressed-tensors") {
      parse_compressed_tensors(j, source, q);
    } else if (method == "fbgemm_fp8") {
      q.format = WeightQuantization::kFbgemmFp8;
      q.not_quantized = string_list(j, "modules_to_not_convert");
    } else if (method == "modelopt") {
      parse_modelopt(j, source, q);
    } else {
      TACHYON_FAIL() << source << ": quantization_config quant_method '" << method << "' is not supported ("
                     << kSupported << ")";
    }
  } catch (const nlohmann::json::exception& e) {
    TACHYON_FAIL() << source << ": quantization_config has a value of the wrong type (" << e.what() << ")";
  }
  return q;
}

nlohmann::json quantization_config_to_json(const QuantizationConfig& q) {
  switch (q.format) {
    case WeightQuantization::kNone: return nullptr;
    case WeightQuantization::kFp8Block: {
      nlohmann::json j = {{"quant_method", "fp8"},
                          {"fmt", "e4m3"},
                          {"activation_scheme", q.static_activation_scales ? "static" : "dynamic"},
                          {"weight_block_size", {q.block_rows, q.block_cols}}};
      if (!q.not_quantized.empty()) j["modules_to_not_convert"] = q.not_quantized;
      return j;
    }
    case WeightQuantization::kFp8Tensor:
    case WeightQuantization::kFp8Channel: {
      const bool tensor = q.format == WeightQuantization::kFp8Tensor;
      nlohmann::json weights = {{"num_bits", 8}, {"type", "float"}, {"strategy", tensor ? "tensor" : "channel"},
                                {"symmetric", true}, {"dynamic", false}};
      nlohmann::json inputs = {{"num_bits", 8}, {"type", "float"}, {"strategy", tensor ? "tensor" : "token"},
                               {"symmetric", true}, {"dynamic", !q.static_activation_scales}};
      nlohmann::json j = {
          {"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", inputs}}}}},
          {"ignore", q.not_quantized}};
      if (q.kv_cache_scales) {
        j["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}, {"dynamic", false},
                                {"symmetric", true}};
      }
      return j;
    }
    case WeightQuantization::kFbgemmFp8:
      return {{"quant_method", "fbgemm_fp8"}, {"activation_scale_ub", 1200.0}, {"modules_to_not_convert", q.not_quantized}};
    case WeightQuantization::kModeloptFp8:
      return {{"quant_method", "modelopt"},
              {"quant_algo", "FP8"},
              {"kv_cache_quant_algo", q.kv_cache_scales ? nlohmann::json("FP8") : nlohmann::json(nullptr)},
              {"exclude_modules", q.not_quantized}};
  }
  TACHYON_FAIL() << "unknown weight quantization";
}

nlohmann::json quantization_config_from_side_file(const nlohmann::json& side_file, const std::string& source) {
  TACHYON_CHECK(side_file.is_object() && side_file.contains("quantization") && side_file["quantization"].is_object())
      << source << ": no 'quantization' object (ModelOpt's " << kModeloptSideFile << " has one)";
  if (side_file.contains("producer") && side_file["producer"].is_object()) {
    const nlohmann::json& name = side_file["producer"].value("name", nlohmann::json("modelopt"));
    TACHYON_CHECK(name == "modelopt") << source << ": producer " << name.dump() << " is not supported (" << kSupported
                                      << ")";
  }
  nlohmann::json q = side_file["quantization"];
  q["quant_method"] = "modelopt";
  return q;
}

nlohmann::json modelopt_side_file(const QuantizationConfig& q) {
  TACHYON_CHECK(q.format == WeightQuantization::kModeloptFp8) << "internal: a side file for a ModelOpt checkpoint only";
  nlohmann::json body = quantization_config_to_json(q);
  body.erase("quant_method");
  return {{"producer", {{"name", "modelopt"}}}, {"quantization", body}};
}

std::vector<int64_t> fp8_scale_shape(const QuantizationConfig& q, int64_t rows, int64_t cols) {
  switch (q.format) {
    case WeightQuantization::kFp8Block:
      return {(rows + q.block_rows - 1) / q.block_rows, (cols + q.block_cols - 1) / q.block_cols};
    case WeightQuantization::kFp8Tensor: return {1};
    case WeightQuantization::kModeloptFp8: return {};  // a scalar, as ModelOpt writes it
    case WeightQuantization::kFp8Channel:
    case WeightQuantization::kFbgemmFp8: return {rows, 1};
    case WeightQuantization::kNone: break;
  }
  TACHYON_FAIL() << "no FP8 scale without a quantization format";
}

bool is_ignorable_quantization_tensor(const QuantizationConfig& q, const std::string& name) {
  if (!q.quantized()) return false;
  if (name.ends_with(".input_scale")) return true;
  // ModelOpt's k_proj.k_scale, llm-compressor's self_attn.k_scale, its older k_proj.output_scale
  return q.kv_cache_scales && (name.ends_with(".k_scale") || name.ends_with(".v_scale") ||
                               name.ends_with(".k_proj.output_scale") || name.ends_with(".v_proj.output_scale"));
}

std::vector<std::string> calibration_scale_names(const QuantizationConfig& q, const std::string& weight_name) {
  const std::string module = weight_name.substr(0, weight_name.size() - std::string_view("weight").size());
  std::vector<std::string> names;
  if (q.static_activation_scales) names.push_back(module + "input_scale");
  if (!q.kv_cache_scales) return names;
  for (const std::string kv : {"k", "v"}) {
    const std::string proj = kv + "_proj.";
    if (!module.ends_with("self_attn." + proj)) continue;
    // ModelOpt keeps the scale on the projection, compressed-tensors on the attention module.
    const bool on_projection = q.format == WeightQuantization::kModeloptFp8;
    names.push_back((on_projection ? module : module.substr(0, module.size() - proj.size())) + kv + "_scale");
  }
  return names;
}

void dequantize_fp8_weight(const QuantizationConfig& q, const TensorView& weight, const TensorView& scale, float* out) {
  TACHYON_CHECK(q.quantized()) << weight.file << ": tensor '" << weight.name << "' is F8_E4M3 but config.json has "
                               << "no quantization_config saying how it is scaled";
  TACHYON_CHECK(weight.dtype == DType::kF8E4M3 && weight.shape.size() == 2)
      << weight.file << ": quantized weight '" << weight.name << "' must be a 2-D F8_E4M3 tensor";
  TACHYON_CHECK(scale.dtype != DType::kF8E4M3) << scale.file << ": scale '" << scale.name << "' must be a float tensor";
  const int64_t rows = weight.shape[0], cols = weight.shape[1];
  std::vector<float> s(static_cast<size_t>(scale.numel()));
  convert_to_f32(scale.data, scale.dtype, s.size(), s.data());
  const std::span<const uint8_t> fp8(reinterpret_cast<const uint8_t*>(weight.data), static_cast<size_t>(rows * cols));
  // The scale shape the format writes, and the other spelling some checkpoints use.
  const std::vector<int64_t> want = fp8_scale_shape(q, rows, cols);
  std::vector<int64_t> alt = want;
  if (q.format == WeightQuantization::kFp8Tensor) alt = {};
  if (q.format == WeightQuantization::kModeloptFp8) alt = {1};
  if (q.format == WeightQuantization::kFp8Channel || q.format == WeightQuantization::kFbgemmFp8) alt = {rows};
  TACHYON_CHECK(scale.shape == want || scale.shape == alt)
      << scale.file << ": scale '" << scale.name << "' of weight '" << weight.name << "' " << scale_shape_string(weight.shape)
      << " has shape " << scale_shape_string(scale.shape) << " but " << weight_quantization_name(q.format) << " needs "
      << scale_shape_string(want);
  if (q.format == WeightQuantization::kFp8Block) {
    dequantize_fp8_blocks(fp8, s, rows, cols, q.block_rows, q.block_cols, std::span<float>(out, fp8.size()));
    return;
  }
  const bool per_row = !per_tensor(q.format);
  for (int64_t r = 0; r < rows; ++r) {
    const float factor = s[per_row ? static_cast<size_t>(r) : 0];
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      out[i] = fp8_e4m3_to_f32(fp8[i]) * factor;
    }
  }
}

Fp8QuantizedWeight quantize_fp8_weight(const QuantizationConfig& q, std::span<const float> weight, int64_t rows,
                                       int64_t cols) {
  TACHYON_CHECK(weight.size() == static_cast<size_t>(rows * cols)) << "FP8 quantization of a [" << rows << ", " << cols
                                                                   << "] weight from " << weight.size() << " values";
  Fp8QuantizedWeight out;
  if (q.format == WeightQuantization::kFp8Block) {
    Fp8BlockWeight b = quantize_fp8_blocks(weight, rows, cols, q.block_rows, q.block_cols);
    out.scale_shape = {b.scale_rows(), b.scale_cols()};
    out.data = std::move(b.data);
    out.scale = std::move(b.scale_inv);
    return out;
  }
  TACHYON_CHECK(q.quantized()) << "FP8 quantization without a format";
  // One scale over the whole weight (tensor) or per output row (channel, fbgemm): amax / 448.
  const int64_t groups = per_tensor(q.format) ? 1 : rows;
  const int64_t group_size = rows * cols / groups;
  out.scale_shape = fp8_scale_shape(q, rows, cols);
  out.data.resize(weight.size());
  out.scale.resize(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    const std::span<const float> values = weight.subspan(static_cast<size_t>(g * group_size), static_cast<size_t>(group_size));
    float amax = 0.0f;
    for (float v : values) amax = std::max(amax, std::fabs(v));
    const float scale = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
    out.scale[static_cast<size_t>(g)] = scale;
    for (int64_t i = 0; i < group_size; ++i) {
      out.data[static_cast<size_t>(g * group_size + i)] = f32_to_fp8_e4m3(values[static_cast<size_t>(i)] / scale);
    }
  }
  return out;
}

}  // namespace tachyon::model
