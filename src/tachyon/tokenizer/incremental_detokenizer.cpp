// Window decoding as HF's DecodeStream: text is held back while the window ends in U+FFFD (an
// incomplete character), and after each emission the window shrinks to the tokens that produced
// it, which then serve as context for the next step.
#include "tachyon/tokenizer/incremental_detokenizer.h"

namespace tachyon::tokenizer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool ends_with_replacement(const std::string& text) {
  return text.size() >= kReplacement.size() && text.compare(text.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  window_.push_back(id);
  std::string text = tokenizer_->decode(window_, skip_special_tokens_);
  // Hold back while nothing new appeared, a character is incomplete, or the context decodes
  // differently with the new tokens (only possible around invalid byte runs).
  if (text.size() <= context_text_.size() || ends_with_replacement(text) ||
      text.compare(0, context_text_.size(), context_text_) != 0) {
    return "";
  }
  std::string delta = text.substr(context_text_.size());
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(context_len_));
  context_len_ = window_.size();
  // The context text must be the decode of the context tokens alone (a leading-space strip may
  // apply to them now that earlier tokens are gone).
  context_text_ = tokenizer_->decode(window_, skip_special_tokens_);
  return delta;
}

std::string IncrementalDetokenizer::flush() {
  std::string text = tokenizer_->decode(window_, skip_special_tokens_);
  std::string delta;
  if (text.size() > context_text_.size() && text.compare(0, context_text_.size(), context_text_) == 0) {
    delta = text.substr(context_text_.size());
  }
  window_.clear();
  context_len_ = 0;
  context_text_.clear();
  return delta;
}

}  // namespace tachyon::tokenizer
