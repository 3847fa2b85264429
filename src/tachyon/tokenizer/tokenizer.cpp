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

// tokenizer.json parsed with the entries of model.vocab and the elements of model.merges moved
// into `tables` as the parser reads them, not into the DOM (whose model object keeps an empty
// "vocab" and "merges"): as JSON values they were half of the parse of Llama-3's 9 MB file (a map
// node per token, a string per merge).
nlohmann::json parse_moving_bpe_tables(const std::string& text, BpeTables& tables, const std::string& source) {
  std::string top_key, model_key;  // the keys being read at depth 1 and, inside "model", depth 2
  auto filter = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::key) {
      if (depth == 1) top_key = parsed.get<std::string>();
      if (depth == 2 && top_key == "model") model_key = parsed.get<std::string>();
      if (depth == 3 && top_key == "model" && model_key == "vocab") {
        tables.vocab.emplace_back(std::move(parsed.get_ref<std::string&>()), -1);
        return false;  // the pair stays out of the DOM; its value is still read, below
      }
      return true;
    }
    if (depth != 3 || top_key != "model") return true;
    if (model_key == "vocab" && event == Event::value) {
      tables.vocab.back().second = parsed.get<int32_t>();
      return false;
    }
    const bool element = event == Event::value || event == Event::array_end || event == Event::object_end;
    if (model_key == "merges" && element) {
      tables.merges.push_back(BpeTables::merge_of(parsed, tables.merges.size(), source));  // throws for an object
      return false;
    }
    return true;
  };
  return nlohmann::json::parse(text, filter);
}

}  // namespace

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  const auto json_path = dir / "tokenizer.json";
  TACHYON_CHECK(std::filesystem::exists(json_path)) << "no tokenizer.json in " << dir.string();
  BpeTables tables;
  nlohmann::json tokenizer_json;
  try {
    tokenizer_json = parse_moving_bpe_tables(read_file(json_path), tables, json_path.string());
  } catch (const nlohmann::json::exception& e) {
    TACHYON_FAIL() << "malformed tokenizer JSON " << json_path.string() << ": " << e.what();
  }
  const auto config_path = dir / "tokenizer_config.json";
  const nlohmann::json config =
      std::filesystem::exists(config_path) ? read_json_file(config_path) : nlohmann::json::object();
  return assemble(tokenizer_json, config, &tables, json_path.string());
}

Tokenizer Tokenizer::from_json(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config,
                               const std::string& source) {
  return assemble(tokenizer_json, tokenizer_config, nullptr, source);
}

Tokenizer Tokenizer::assemble(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config,
                              const BpeTables* streamed, const std::string& source) {
  auto state = std::make_shared<State>();
  try {
    TACHYON_CHECK(tokenizer_json.is_object() && tokenizer_json.contains("model")) << "no \"model\" in " << source;
    const auto& model = tokenizer_json.at("model");
    const std::string model_type = model.value("type", "BPE");  // older files omit the type of BPE
    TACHYON_CHECK(model_type == "BPE") << "unsupported model type '" << model_type << "' in " << source;
    auto get = [&](const char* key) { return tokenizer_json.contains(key) ? tokenizer_json.at(key) : nlohmann::json(); };
    state->normalizer = make_normalizer(get("normalizer"), source);
    state->pre_tokenizer = make_pre_tokenizer(get("pre_tokenizer"), source);
    if (streamed != nullptr) {  // what from_json's reads of model.vocab and model.merges require
      TACHYON_CHECK(model.contains("vocab") && model.at("vocab").is_object() && model.contains("merges") &&
                    model.at("merges").is_array())
          << "the model's \"vocab\" must be an object and its \"merges\" an array in " << source;
    }
    state->model =
        streamed != nullptr ? BpeModel::from_tables(model, *streamed, source) : BpeModel::from_json(model, source);
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
