// One small class per HF normalizer type, and the factory that reads them from JSON.
#include "tachyon/tokenizer/normalizer.h"

#include <optional>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/regex.h"
#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer {
namespace {

class NfcNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override { return nfc(text); }
};

// Prepends only to non-empty text, as HF does (an empty stretch between two added tokens stays empty).
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return std::string();
    return prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

// Replaces every non-overlapping occurrence, left to right, of a literal string or a regex.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::optional<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}

  std::string normalize(std::string_view text) const override {
    std::string out;
    std::size_t last = 0;
    if (regex_) {
      for (const auto& [start, end] : regex_->find_all(text)) {
        out.append(text.substr(last, start - last));
        out += content_;
        last = end;
      }
    } else if (!literal_.empty()) {
      for (std::size_t pos = text.find(literal_); pos != std::string_view::npos; pos = text.find(literal_, last)) {
        out.append(text.substr(last, pos - last));
        out += content_;
        last = pos + literal_.size();
      }
    }
    out.append(text.substr(last));
    return out;
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string current(text);
    for (const auto& step : steps_) current = step->normalize(current);
    return current;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config, const std::string& source) {
  if (config.is_null()) return nullptr;
  const std::string type = config.value("type", "");
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(config.at("prepend").get<std::string>());
  if (type == "Replace") {
    const auto& pattern = config.at("pattern");
    const std::string content = config.at("content").get<std::string>();
    if (pattern.contains("Regex")) {
      return std::make_unique<ReplaceNormalizer>("", Regex(pattern.at("Regex").get<std::string>()), content);
    }
    return std::make_unique<ReplaceNormalizer>(pattern.at("String").get<std::string>(), std::nullopt, content);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : config.at("normalizers")) steps.push_back(make_normalizer(step, source));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  TACHYON_FAIL() << "unsupported normalizer type '" << type << "' in " << source;
}

}  // namespace tachyon::tokenizer
