// Tokenizer assembly from JSON and the encode/decode pipelines. Component parsing lives with each
// component (make_normalizer, make_pre_tokenizer, ...); this file only wires them together.
#include "tachyon/tokenizer/tokenizer.h"

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/tokenizer/added_vocabulary.h"
#include "tachyon/tokenizer/bpe_model.h"
#include "tachyon/tokenizer/decoder.h"
#include "tachyon/tokenizer/normalizer.h"
#include "tachyon/tokenizer/post_processor.h"
#include "tachyon/tokenizer/pre_tokenizer.h"
#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer {

struct Tokenizer::State {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  BpeModel model;
  AddedVocabulary added;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  std::string bos_token;
  std::string eos_token;
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  std::string chat_template;

  // Model ids of one stretch of text that holds no raw added token.
  void encode_text(std::string_view text, std::vector<int32_t>& ids) const {
    const std::string normalized = normalizer ? normalizer->normalize(text) : std::string(text);
    for (const TextSegment& segment : added.split_normalized(normalized)) {
      if (segment.id) {
        ids.push_back(*segment.id);
        continue;
      }
      if (!pre_tokenizer) {
        const auto piece_ids = model.tokenize(segment.text);
        ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
        continue;
      }
      std::vector<std::string> pieces;
      pre_tokenizer->split(segment.text, pieces);
      for (const auto& piece : pieces) {
        const auto piece_ids = model.tokenize(piece);
        ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
      }
    }
  }
};

namespace {

// A tokenizer_config.json token entry: a plain string or an AddedToken object {"content": ...}.
std::string config_token(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const auto& value = config.at(key);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string()) {
    return value.at("content").get<std::string>();
  }
  return "";
}

// "chat_template" is a string, or a list of {name, template} of which "default" is the one.
std::string config_chat_template(const nlohmann::json& config) {
  if (!config.contains("chat_template")) return "";
  const auto& value = config.at("chat_template");
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    for (const auto& entry : value) {
      if (entry.is_object() && entry.value("name", "") == "default") return entry.value("template", "");
    }
  }
  return "";
}

}  // namespace

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  const auto json_path = dir / "tokenizer.json";
  TACHYON_CHECK(std::filesystem::exists(json_path)) << "no tokenizer.json in " << dir.string();
  const nlohmann::json tokenizer_json = read_json_file(json_path);
  const auto config_path = dir / "tokenizer_config.json";
  const nlohmann::json config =
      std::filesystem::exists(config_path) ? read_json_file(config_path) : nlohmann::json::object();
  return from_json(tokenizer_json, config, json_path.string());
}

Tokenizer Tokenizer::from_json(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config,
                               const std::string& source) {
  auto state = std::make_shared<State>();
  try {
    TACHYON_CHECK(tokenizer_json.is_object() && tokenizer_json.contains("model")) << "no \"model\" in " << source;
    const auto& model = tokenizer_json.at("model");
    const std::string model_type = model.value("type", "BPE");  // older files omit the type of BPE
    TACHYON_CHECK(model_type == "BPE") << "unsupported model type '" << model_type << "' in " << source;
    auto get = [&](const char* key) { return tokenizer_json.contains(key) ? tokenizer_json.at(key) : nlohmann::json(); };
    state->normalizer = make_normalizer(get("normalizer"), source);
    state->pre_tokenizer = make_pre_tokenizer(get("pre_tokenizer"), source);
    state->model = BpeModel::from_json(model, source);
    state->added = AddedVocabulary(AddedVocabulary::parse(get("added_tokens")), state->normalizer.get());
    state->post_processor = make_post_processor(get("post_processor"), source);
    state->decoder = make_decoder(get("decoder"), source);
  } catch (const nlohmann::json::exception& e) {
    TACHYON_FAIL() << "malformed tokenizer JSON " << source << ": " << e.what();
  }
  if (tokenizer_config.is_object()) {
    state->bos_token = config_token(tokenizer_config, "bos_token");
    state->eos_token = config_token(tokenizer_config, "eos_token");
    state->chat_template = config_chat_template(tokenizer_config);
  }
  Tokenizer tokenizer(state);
  if (!state->bos_token.empty()) state->bos_id = tokenizer.token_to_id(state->bos_token);
  if (!state->eos_token.empty()) state->eos_id = tokenizer.token_to_id(state->eos_token);
  return tokenizer;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const State& s = *state_;
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const TextSegment& segment : s.added.split_raw(text)) {
    if (segment.id) {
      ids.push_back(*segment.id);
    } else {
      s.encode_text(segment.text, ids);
    }
  }
  if (add_special_tokens && s.post_processor) ids = s.post_processor->process(std::move(ids));
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const State& s = *state_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* added = s.added.find(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* token = s.model.id_to_token(id)) {
      tokens.push_back(*token);
    }
  }
  if (s.decoder) return s.decoder->decode(std::move(tokens));
  std::string joined;
  for (std::size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
  return joined;
}

int32_t Tokenizer::vocab_size() const { return std::max(state_->model.max_id(), state_->added.max_id()) + 1; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = state_->added.token_to_id(token)) return id;
  return state_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* added = state_->added.find(id)) return added->content;
  const std::string* token = state_->model.id_to_token(id);
  TACHYON_CHECK(token != nullptr) << "token id " << id << " is out of range (vocab size " << vocab_size() << ")";
  return *token;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* added = state_->added.find(id);
  return added != nullptr && added->special;
}

const std::string& Tokenizer::bos_token() const { return state_->bos_token; }
const std::string& Tokenizer::eos_token() const { return state_->eos_token; }
std::optional<int32_t> Tokenizer::bos_id() const { return state_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return state_->eos_id; }
const std::string& Tokenizer::chat_template() const { return state_->chat_template; }

}  // namespace tachyon::tokenizer
