// tachyon make-model: writes a random-weight HF model directory (see model/make_model.h).
#include <cstdio>
#include <memory>
#include <string>

#include "tachyon/cli/commands.h"
#include "tachyon/model/make_model.h"

namespace tachyon::cli {

void add_make_model_command(CLI::App& app) {
  auto options = std::make_shared<model::MakeModelOptions>();
  auto dtype = std::make_shared<std::string>();
  auto tokenizer = std::make_shared<std::string>();
  auto list = std::make_shared<bool>(false);
  auto quantization = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("make-model", "write a random-weight HF-format model directory");
  cmd->add_option("--arch", options->arch,
                  "llama | mistral | qwen2 | qwen3 | qwen3_moe | mixtral | deepseek_v3 | deepseek_v32 | glm_moe_dsa");
  cmd->add_option("--preset", options->preset, "shape preset (--list shows them)");
  cmd->add_option("--seed", options->seed, "random seed")->default_val(0);
  cmd->add_option("--dtype", *dtype, "f32 | f16 | bf16 (default: the preset's)");
  cmd->add_option("--tokenizer", *tokenizer, "folder with tokenizer.json (+ tokenizer_config.json) to copy");
  cmd->add_option("--out", options->out_dir, "output folder");
  cmd->add_option("--shard-size", options->shard_bytes, "bytes per safetensors shard (0: preset default)");
  cmd->add_option("--num-layers", options->num_layers, "keep only the preset's first N layers (default: all)");
  cmd->add_option("--quantization-format", *quantization,
                  "fp8-block | fp8-tensor | fp8-channel | fbgemm-fp8 | modelopt-fp8: write the linear weights "
                  "as an FP8 checkpoint of that format (default: unquantized)");
  cmd->add_flag("--list", *list, "list presets and exit");
  cmd->callback([options, dtype, tokenizer, list, quantization] {
    if (*list) {
      for (const auto& preset : model::model_presets()) {
        std::printf("%-18s %-8s %s\n", preset.name.c_str(), preset.only_arch.empty() ? "any" : preset.only_arch.c_str(),
                    preset.description.c_str());
      }
      return;
    }
    if (options->arch.empty() || options->preset.empty() || options->out_dir.empty()) {
      throw CLI::ValidationError("make-model", "--arch, --preset and --out are required");
    }
    if (!dtype->empty()) {
      if (*dtype == "f32") options->dtype = DType::kF32;
      else if (*dtype == "f16") options->dtype = DType::kF16;
      else if (*dtype == "bf16") options->dtype = DType::kBF16;
      else throw CLI::ValidationError("--dtype", "must be f32, f16 or bf16");
    }
    if (!tokenizer->empty()) options->tokenizer_dir = *tokenizer;
    if (!quantization->empty()) {
      options->quantization = model::weight_quantization_from_name(*quantization);
      if (options->quantization == model::WeightQuantization::kNone) {
        throw CLI::ValidationError("--quantization-format", "must be fp8-block, fp8-tensor, fp8-channel, fbgemm-fp8 or modelopt-fp8");
      }
    }
    model::ModelConfig config = model::make_model(*options);
    const std::string fp8 = config.quantization.quantized()
                                ? ", linear weights " + std::string(model::weight_quantization_name(config.quantization.format))
                                : "";
    std::printf("wrote %s: %s, %lld layers, hidden %lld, vocab %lld, %s%s\n", options->out_dir.c_str(),
                config.architecture.c_str(), static_cast<long long>(config.num_hidden_layers),
                static_cast<long long>(config.hidden_size), static_cast<long long>(config.vocab_size),
                config.torch_dtype.c_str(), fp8.c_str());
  });
}

}  // namespace tachyon::cli
