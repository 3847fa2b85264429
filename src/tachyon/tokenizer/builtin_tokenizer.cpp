#include "tachyon/tokenizer/builtin_tokenizer.h"

#include <nlohmann/json.hpp>

#include "tachyon/base/file_util.h"
#include "tachyon/tokenizer/byte_level.h"

namespace tachyon::tokenizer {
namespace {

constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

void write_builtin_tokenizer(const std::filesystem::path& dir) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int byte = 0; byte < 256; ++byte) {
    const char raw = static_cast<char>(byte);
    vocab[byte_level_encode(std::string_view(&raw, 1))] = byte;
  }
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  int id = 256;
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id++}, {"content", special}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  nlohmann::ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}};
  nlohmann::ordered_json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
        {"merges", nlohmann::ordered_json::array()}}},
  };
  nlohmann::ordered_json config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"}, {"bos_token", nullptr}, {"eos_token", "<|im_end|>"},
      {"pad_token", "<|endoftext|>"}, {"chat_template", kChatMlTemplate}};
  write_file(dir / "tokenizer.json", tokenizer.dump(1) + "\n");
  write_file(dir / "tokenizer_config.json", config.dump(1) + "\n");
}

}  // namespace tachyon::tokenizer
