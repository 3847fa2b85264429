// ChatOutput: one chat choice's answer text -> what the client sees: reasoning, content and tool
// calls, in order. Text pieces go in as the detokenizer releases them (streamed or not: the
// non-streamed answer is the same pieces, collected); the reasoning parser runs first, the tool
// parser on the content it leaves. Without parsers the text passes through untouched.
//
// The route turns pieces into JSON with append_pieces (the non-streamed message) or chat_deltas
// (one delta per stream chunk); these, with chat_response / chat_chunk, are the whole response
// assembly, tested as a unit in tests/unit/test_chat_output.cpp (ctest -R unit.chat_output).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tachyon/server/openai_responses.h"
#include "tachyon/server/reasoning_parser.h"
#include "tachyon/server/tool_parser.h"
#include "tachyon/tokenizer/incremental_detokenizer.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server {

class ChatOutput;

// `usage` with the reasoning tokens of a request's chat outputs (one per choice), where they parse
// reasoning (Usage::reasoning_tokens stays unset otherwise).
Usage with_reasoning_tokens(Usage usage, const ChatOutput& output);
Usage with_reasoning_tokens(Usage usage, const std::vector<std::unique_ptr<ChatOutput>>& outputs);

// The served model's chat output parsers, resolved once at start-up.
struct ChatParsers {
  std::string tool;       // canonical tool parser name; "": tool calls are not parsed
  std::string reasoning;  // reasoning parser name; "": no reasoning split
  // Whether the format's markers are special tokens of this tokenizer, which the detokenizer
  // would drop: the answers that parse them are then detokenized with special tokens kept.
  bool tool_markers_special = false;
  bool reasoning_markers_special = false;
};

// "auto" | "none" | a name -> the parser in use (throws Error naming the known ones).
ChatParsers resolve_chat_parsers(const std::string& tool_option, const std::string& reasoning_option,
                                 const tokenizer::Tokenizer& tokenizer);
// The same for a chat template other than the tokenizer's (its ChatTemplate::source(): the native
// DeepSeek-V3.2 renderer's picks its DSML tool format and <think> reasoning).
ChatParsers resolve_chat_parsers(const std::string& tool_option, const std::string& reasoning_option,
                                 const tokenizer::Tokenizer& tokenizer, const std::string& template_source);

// Per request, from the served model's parsers and the request.
struct ChatOutputConfig {
  std::string tool_parser;        // a tool_parser_names() entry; "": calls are not parsed
  nlohmann::ordered_json tools;   // the request's tools (GLM reads parameter types)
  std::string reasoning_parser;   // a reasoning_parser_names() entry; "": no reasoning split
  bool reasoning_starts_inside = false;  // the prompt opened the reasoning block
  bool parallel_tool_calls = true;       // false: calls after the first are dropped
  // Set (it must outlive the output): reasoning markers that this tokenizer has as one token are
  // found by their ids (reasoning_parser.h), the ids being decoded as the answer's text was
  // (skip_special_tokens as the generation's). Unset: by their text.
  const tokenizer::Tokenizer* tokenizer = nullptr;
  bool skip_special_tokens = true;
};

class ChatOutput {
 public:
  // make_id: the ids of tool calls (default: "call_" and 24 random letters and digits).
  explicit ChatOutput(const ChatOutputConfig& config, std::function<std::string()> make_id = {});
  ~ChatOutput();

  // `text`: the answer's next text; `token_ids`: the tokens generated since the last push (their
  // text may come later, never earlier), which place the marker tokens.
  std::vector<ChatPiece> push(std::string_view text, std::span<const int32_t> token_ids);
  std::vector<ChatPiece> finish();  // once, at the end of the answer
  bool called_tools() const { return calls_ > 0; }
  // Tokens of the answer so far that belong to its reasoning, its markers included (usage's
  // reasoning_tokens): those whose text ends at or before the reasoning's end, every token while
  // the reasoning runs on. Counted when the output parses reasoning and knows the tokenizer; else 0.
  int64_t reasoning_tokens() const;
  bool parses_reasoning() const { return reasoning_ != nullptr; }
  // The engine's finish reason as the client sees it: "stop" after tool calls is "tool_calls".
  std::string finish_reason(const std::string& engine_reason) const;

 private:
  std::vector<ChatPiece> tidy(std::vector<ChatPiece> pieces);
  void route(std::vector<ChatPiece>& from_reasoning, std::vector<ChatPiece>& out, bool at_end);

  void note_marker_tokens(std::span<const int32_t> token_ids);

  std::unique_ptr<ReasoningParser> reasoning_;
  // The answer's ids decoded once more, to know where each token's text ends: where the marker
  // tokens sit (by id: marker_tokens_) and which tokens the reasoning spans.
  std::vector<std::pair<int32_t, std::string>> marker_tokens_;  // (id, its text)
  std::unique_ptr<tokenizer::IncrementalDetokenizer> answer_detokenizer_;
  size_t decoded_bytes_ = 0;
  std::vector<size_t> token_ends_;  // [tokens so far] decoded_bytes_ after each token
  std::unique_ptr<ToolParser> tools_;
  std::function<std::string()> make_id_;
  bool parallel_tool_calls_ = true;
  int32_t calls_ = 0;
};

// Which of an answer's tokens belong to its output text, for logprobs reported with that text (the
// Responses API's output_text.logprobs): the tokens after the reasoning, its markers excluded.
// Released as ChatOutput::reasoning_tokens() allows: while the reasoning runs on (or the parser has
// not decided) every token so far counts as reasoning and none is released; once it is known where
// the reasoning ends, the tokens after it are, and each later token as it comes.
class ContentTokens {
 public:
  // After the output took `new_tokens` more tokens; `reasoning`: its reasoning_tokens() then.
  // Returns [begin, end): the answer's tokens released now (empty: begin == end).
  std::pair<size_t, size_t> next(size_t new_tokens, int64_t reasoning);

 private:
  size_t tokens_ = 0;    // the answer's tokens so far
  size_t released_ = 0;  // tokens before this are released or reasoning
};

// "call_" and 24 random letters and digits.
std::string make_tool_call_id();

// Non-streamed: adds pieces to the choice (content to text, reasoning, tool calls).
void append_pieces(const std::vector<ChatPiece>& pieces, CompletionChoiceResult& choice);
// Streamed: one delta per chunk, in order; a tool call's opening piece is a delta of its own.
std::vector<ChatDelta> chat_deltas(const std::vector<ChatPiece>& pieces);

// What the chat route does with one step's text of one choice (finish_reason: the engine's,
// set on the choice's last step). Non-streamed: into the choice, its finish reason mapped.
void add_chat_text(ChatOutput& output, std::string_view text, std::span<const int32_t> token_ids,
                   const std::optional<std::string>& finish_reason, CompletionChoiceResult& choice);
// Streamed: the chunks to send, one per delta, the logprobs on the first and the (mapped) finish
// reason on the last; a step that says nothing yet still sends one chunk with content "".
std::vector<nlohmann::ordered_json> chat_text_chunks(ChatOutput& output, std::string_view id, int64_t created,
                                                     std::string_view model, int32_t index, std::string_view text,
                                                     std::span<const int32_t> token_ids,
                                                     const std::optional<std::string>& finish_reason,
                                                     const LogprobsDelta* logprobs, const TokenTextFn& token_text = {});

}  // namespace tachyon::server
