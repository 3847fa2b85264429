#include "tachyon/cli/default_model.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"

// The bytes come in through the assembler's .incbin: the 10 MB of weights as a C++ array literal
// would take minutes to compile. CMake passes the folder and a hash of the files' contents (so a
// new model changes this translation unit and no compiler cache serves the old object).
#define TACHYON_EMBED(symbol, file)                                                   \
  asm(".section .rodata\n.balign 64\n.global " #symbol "_begin\n" #symbol "_begin:\n" \
      ".incbin \"" TACHYON_CANARY_DIR "/" file "\"\n.global " #symbol "_end\n" #symbol "_end:\n.previous\n")

TACHYON_EMBED(tachyon_canary_config, "config.json");
TACHYON_EMBED(tachyon_canary_generation_config, "generation_config.json");
TACHYON_EMBED(tachyon_canary_weights, "model.safetensors");
TACHYON_EMBED(tachyon_canary_tokenizer, "tokenizer.json");
TACHYON_EMBED(tachyon_canary_tokenizer_config, "tokenizer_config.json");

extern "C" {
extern const char tachyon_canary_config_begin[], tachyon_canary_config_end[];
extern const char tachyon_canary_generation_config_begin[], tachyon_canary_generation_config_end[];
extern const char tachyon_canary_weights_begin[], tachyon_canary_weights_end[];
extern const char tachyon_canary_tokenizer_begin[], tachyon_canary_tokenizer_end[];
extern const char tachyon_canary_tokenizer_config_begin[], tachyon_canary_tokenizer_config_end[];
}

namespace tachyon::cli {
namespace {

struct EmbeddedFile {
  const char* name;
  const char* begin;
  const char* end;
};

const EmbeddedFile kCanaryFiles[] = {
    {"config.json", tachyon_canary_config_begin, tachyon_canary_config_end},
    {"generation_config.json", tachyon_canary_generation_config_begin, tachyon_canary_generation_config_end},
    {"model.safetensors", tachyon_canary_weights_begin, tachyon_canary_weights_end},
    {"tokenizer.json", tachyon_canary_tokenizer_begin, tachyon_canary_tokenizer_end},
    {"tokenizer_config.json", tachyon_canary_tokenizer_config_begin, tachyon_canary_tokenizer_config_end},
};

}  // namespace

std::filesystem::path default_model_dir() {
  const std::filesystem::path dir = user_cache_dir() / ("canary-" + std::string(TACHYON_CANARY_HASH));
  // model.safetensors is written last, so a folder that has it is complete.
  if (std::filesystem::exists(dir / "model.safetensors")) return dir;
  const std::filesystem::path staging = dir.string() + ".tmp-" + std::to_string(::getpid());
  std::filesystem::create_directories(staging);
  for (const EmbeddedFile& file : kCanaryFiles) {
    std::ofstream out(staging / file.name, std::ios::binary);
    out.write(file.begin, file.end - file.begin);
    out.close();
    TACHYON_CHECK(out.good()) << "cannot write the default model into " << staging.string()
                              << " (set XDG_CACHE_HOME to a writable folder, or name a model)";
  }
  std::error_code ignored;
  std::filesystem::rename(staging, dir, ignored);  // another process may have won the race
  std::filesystem::remove_all(staging, ignored);
  return dir;
}

}  // namespace tachyon::cli
