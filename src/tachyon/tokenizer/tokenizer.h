// Tokenizer: a Hugging Face tokenizer.json (byte-level BPE as in Llama-3, Qwen3, DeepSeek-V3, or
// SentencePiece-style BPE with byte fallback as in Llama-2) that gives the ids HF `tokenizers`
// gives. The pipeline is HF's: added tokens cut from the raw text -> normalizer -> normalized
// added tokens -> pre-tokenizer -> BPE per piece -> post-processor. Copies share one immutable
// state, and every method is const, so one Tokenizer serves all HTTP threads.
// Tests: tests/unit/test_tokenizer_*.cpp (conformance goldens from tools/tokenizer_reference.py).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tachyon::tokenizer {

struct BpeTables;  // bpe_model.h

class Tokenizer {
 public:
  // `dir` holds tokenizer.json and optionally tokenizer_config.json (bos/eos token, chat template).
  static Tokenizer from_dir(const std::filesystem::path& dir);
  // `source` names the JSON in error messages (the file path when read from disk).
  static Tokenizer from_json(const nlohmann::json& tokenizer_json,
                             const nlohmann::json& tokenizer_config = nlohmann::json::object(),
                             const std::string& source = "tokenizer.json");

  // Invalid UTF-8 in `text` is first repaired (each maximal invalid subpart -> U+FFFD), so any
  // byte string encodes. add_special_tokens applies the post-processor (BOS for Llama-2).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Unknown ids are skipped, as HF does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  // max id + 1, counting added tokens
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Throws tachyon::Error for an id with no token.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;

  // From tokenizer_config.json; "" when absent.
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  const std::string& chat_template() const;

 private:
  struct State;
  explicit Tokenizer(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  // from_json with the BPE model's vocabulary and merges taken from `streamed` when not null
  // (from_dir's parse moved them out of tokenizer_json; bpe_model.h BpeTables).
  static Tokenizer assemble(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config,
                            const BpeTables* streamed, const std::string& source);
  std::shared_ptr<const State> state_;
};

}  // namespace tachyon::tokenizer
