// TemplateProcessing resolves each SpecialToken piece of the "single" template through the
// template's own "special_tokens" table, as HF does, not through the vocabulary.
#include "tachyon/tokenizer/post_processor.h"

#include "tachyon/base/check.h"

namespace tachyon::tokenizer {
namespace {

class TemplatePostProcessor : public PostProcessor {
 public:
  // One element of the template: the encoded sequence itself, or the ids of a special token.
  struct Piece {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };
  explicit TemplatePostProcessor(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const auto& piece : pieces_) {
      if (piece.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), piece.ids.begin(), piece.ids.end());
      }
    }
    return out;
  }

 private:
  std::vector<Piece> pieces_;
};

class IdentityPostProcessor : public PostProcessor {
 public:
  std::vector<int32_t> process(std::vector<int32_t> ids) const override { return ids; }
};

class SequencePostProcessor : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& step : steps_) ids = step->process(std::move(ids));
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

std::unique_ptr<PostProcessor> make_template(const nlohmann::json& config, const std::string& source) {
  const auto& specials = config.contains("special_tokens") ? config.at("special_tokens") : nlohmann::json::object();
  std::vector<TemplatePostProcessor::Piece> pieces;
  for (const auto& item : config.at("single")) {
    TemplatePostProcessor::Piece piece;
    if (item.contains("Sequence")) {
      piece.is_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      TACHYON_CHECK(specials.contains(name)) << "TemplateProcessing special token '" << name
                                             << "' has no entry in special_tokens in " << source;
      piece.ids = specials.at(name).at("ids").get<std::vector<int32_t>>();
    } else {
      TACHYON_FAIL() << "unsupported TemplateProcessing piece " << item.dump() << " in " << source;
    }
    pieces.push_back(std::move(piece));
  }
  return std::make_unique<TemplatePostProcessor>(std::move(pieces));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& config, const std::string& source) {
  if (config.is_null()) return nullptr;
  const std::string type = config.value("type", "");
  if (type == "TemplateProcessing") return make_template(config, source);
  if (type == "ByteLevel") return std::make_unique<IdentityPostProcessor>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const auto& step : config.at("processors")) steps.push_back(make_post_processor(step, source));
    return std::make_unique<SequencePostProcessor>(std::move(steps));
  }
  TACHYON_FAIL() << "unsupported post_processor type '" << type << "' in " << source;
}

}  // namespace tachyon::tokenizer
