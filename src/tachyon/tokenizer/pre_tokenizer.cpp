// Split follows HF's NormalizedString::split: the regex cuts the text into matches and gaps, the
// behaviour decides which of them stay and what merges with what, and empty pieces vanish.
#include "tachyon/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/byte_level.h"
#include "tachyon/tokenizer/regex.h"

namespace tachyon::tokenizer {
namespace {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Segment {
  std::size_t start;
  std::size_t end;
  bool is_match;
};

// Matches and the gaps between them, in order, covering all of `text`.
std::vector<Segment> segments(const Regex& regex, std::string_view text, bool invert) {
  std::vector<Segment> out;
  std::size_t prev = 0;
  for (const auto& [start, end] : regex.find_all(text)) {
    if (prev != start) out.push_back({prev, start, invert});
    out.push_back({start, end, !invert});
    prev = end;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), invert});
  return out;
}

// Applies the behaviour: returns the kept [start, end) ranges.
std::vector<std::pair<std::size_t, std::size_t>> apply_behavior(const std::vector<Segment>& segs, SplitBehavior behavior) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& s : segs) out.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : segs) {
        if (!s.is_match) out.emplace_back(s.start, s.end);
      }
      break;
    case SplitBehavior::kContiguous:
      for (const auto& s : segs) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : segs) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->start;
        } else {
          out.emplace_back(it->start, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

SplitBehavior parse_behavior(const std::string& name, const std::string& source) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  TACHYON_FAIL() << "unsupported Split behavior '" << name << "' in " << source;
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  void split(std::string_view text, std::vector<std::string>& out) const override {
    for (const auto& [start, end] : apply_behavior(segments(regex_, text, invert_), behavior_)) {
      if (end > start) out.emplace_back(text.substr(start, end - start));
    }
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's pattern, used when ByteLevel has use_regex=true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern);
  }

  void split(std::string_view text, std::vector<std::string>& out) const override {
    std::string spaced;
    if (add_prefix_space_ && (text.empty() || text.front() != ' ')) {
      spaced = " " + std::string(text);
      text = spaced;
    }
    if (!regex_) {
      if (!text.empty()) out.push_back(byte_level_encode(text));
      return;
    }
    for (const auto& s : apply_behavior(segments(*regex_, text, false), SplitBehavior::kIsolated)) {
      if (s.second > s.first) out.push_back(byte_level_encode(text.substr(s.first, s.second - s.first)));
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::string_view text, std::vector<std::string>& out) const override {
    std::vector<std::string> pieces{std::string(text)};
    for (const auto& step : steps_) pieces = step->split_all(pieces);
    for (auto& p : pieces) out.push_back(std::move(p));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::vector<std::string> PreTokenizer::split_all(const std::vector<std::string>& pieces) const {
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const auto& p : pieces) split(p, out);
  return out;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config, const std::string& source) {
  if (config.is_null()) return nullptr;
  const std::string type = config.value("type", "");
  if (type == "Split") {
    const auto& pattern = config.at("pattern");
    std::string regex = pattern.contains("Regex") ? pattern.at("Regex").get<std::string>()
                                                  : Regex::escape(pattern.at("String").get<std::string>());
    return std::make_unique<SplitPreTokenizer>(Regex(regex), parse_behavior(config.at("behavior").get<std::string>(), source),
                                               config.value("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(config.value("add_prefix_space", true), config.value("use_regex", true));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& step : config.at("pretokenizers")) steps.push_back(make_pre_tokenizer(step, source));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  TACHYON_FAIL() << "unsupported pre_tokenizer type '" << type << "' in " << source;
}

}  // namespace tachyon::tokenizer
