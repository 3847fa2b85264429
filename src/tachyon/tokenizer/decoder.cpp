// Each decoder mirrors its HF counterpart exactly, down to how invalid UTF-8 turns into U+FFFD:
// ByteLevel repairs the joined bytes once (from_utf8_lossy), ByteFallback emits one U+FFFD per
// byte of a run of byte tokens that is not valid UTF-8.
#include "tachyon/tokenizer/decoder.h"

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/byte_level.h"
#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer {
namespace {

class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      const auto decoded = byte_level_decode(t);
      bytes += decoded ? *decoded : t;
    }
    return {utf8_lossy(bytes)};
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    if (pattern_.empty()) return tokens;
    for (auto& t : tokens) {
      std::string out;
      std::size_t last = 0;
      for (std::size_t pos = t.find(pattern_); pos != std::string::npos; pos = t.find(pattern_, last)) {
        out.append(t, last, pos - last);
        out += content_;
        last = pos + pattern_.size();
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  std::string pattern_;
  std::string content_;
};


class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string run;  // pending bytes of consecutive byte tokens
    auto flush = [&]() {
      if (run.empty()) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (std::size_t i = 0; i < run.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
    };
    for (auto& t : tokens) {
      const int b = byte_token_value(t);
      if (b >= 0) {
        run.push_back(static_cast<char>(b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string joined;
    for (const auto& t : tokens) joined += t;
    return {joined};
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    if (content_.empty()) return tokens;
    const std::size_t n = content_.size();
    for (auto& t : tokens) {
      std::size_t begin = 0;
      for (std::size_t k = 0; k < start_ && t.compare(begin, n, content_) == 0; ++k) begin += n;
      std::size_t end = t.size();
      for (std::size_t k = 0; k < stop_ && end >= begin + n && t.compare(end - n, n, content_) == 0; ++k) end -= n;
      t = t.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  std::size_t start_;
  std::size_t stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_) tokens = step->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]);
  const int lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  std::string out;
  for (const auto& piece : decode_chain(std::move(tokens))) out += piece;
  return out;
}

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config, const std::string& source) {
  if (config.is_null()) return nullptr;
  const std::string type = config.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    const auto& pattern = config.at("pattern");
    TACHYON_CHECK(pattern.contains("String")) << "Replace decoder supports only String patterns in " << source;
    return std::make_unique<ReplaceDecoder>(pattern.at("String").get<std::string>(), config.at("content").get<std::string>());
  }
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(config.at("content").get<std::string>(), config.value("start", 0u),
                                          config.value("stop", 0u));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& step : config.at("decoders")) steps.push_back(make_decoder(step, source));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  TACHYON_FAIL() << "unsupported decoder type '" << type << "' in " << source;
}

}  // namespace tachyon::tokenizer
