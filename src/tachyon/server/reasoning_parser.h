// ReasoningParser: splits a chat answer into its reasoning (<think> ... </think>) and the content
// after it, whole or piece by piece as it streams, for Qwen3, DeepSeek-R1 / V3.1+ and GLM-4.5+.
// All of them mark reasoning with the same two strings; what differs is whether the chat
// template already opened <think> in the prompt (DeepSeek-R1's does; Qwen3's and GLM's close an
// empty one when enable_thinking is false). So the one rule, decided per request from the
// rendered prompt and never from the answer's text:
//  - the prompt ends (whitespace aside) with the start marker: the answer starts inside the
//    reasoning, which runs to the end marker (or to the end of the answer);
//  - otherwise the answer is reasoning only when it begins (whitespace aside) with the start
//    marker; else it is all content, byte for byte.
// Reasoning is passed verbatim; the whitespace between the end marker and the content is
// dropped. The same text gives the same pieces whatever the chunking (a possible marker start is
// held back).
//
// Markers by id: where the tokenizer has a marker as one token (Qwen3's and DeepSeek-R1's <think>
// and </think> are added tokens), the model writes that token, and the same characters in
// ordinary pieces ("<", "think", ">") are text it wrote, not a marker. The caller then says where
// in the answer's text each marker token sits (note_marker_token, from the token ids:
// ChatOutput), and only text at those offsets is a marker; ordinary text is never held back. A
// marker token whose text is still held back upstream (a stop string may be completing) is
// waited for at its offset, so a marker split across deltas is still found.
// Tests: tests/unit/test_reasoning_parser.cpp, test_reasoning_marker_ids.cpp (ctest -R reasoning).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/server/tool_parser.h"

namespace tachyon::server {

class ReasoningParser {
 public:
  // markers_by_id: the markers are found at the offsets note_marker_token gives, never by text alone.
  ReasoningParser(std::string start, std::string end, bool starts_inside, bool markers_by_id = false);
  // A marker token's text starts at byte `offset` of the answer's text (offsets ascending; before
  // the text that holds it is pushed).
  void note_marker_token(size_t offset) { marker_offsets_.push_back(offset); }
  // Appends kReasoning and kContent pieces to `out`.
  void push(std::string_view text, std::vector<ChatPiece>& out);
  void finish(std::vector<ChatPiece>& out);
  // Where the reasoning ends in the answer's text, its end marker included: 0 once the answer is
  // known to have none, std::string::npos while it runs on (or the parser has not decided yet).
  // usage's reasoning_tokens counts the tokens before it (ChatOutput::reasoning_tokens).
  size_t reasoning_end() const { return reasoning_end_; }

 private:
  enum class State { kStart, kReasoning, kAfter, kContent };
  // Where `marker` is in buffer_ (npos: not there), and how many bytes of buffer_ may be released
  // before it (all but a possible marker start).
  struct Found {
    size_t at;
    size_t safe;
  };
  void parse(bool at_end, std::vector<ChatPiece>& out);
  Found find_marker(std::string_view marker, bool at_end);
  void drop(size_t n);  // erases buffer_'s first n bytes

  std::string start_, end_;
  State state_;
  bool markers_by_id_;
  std::string buffer_;
  size_t buffer_offset_ = 0;               // offset of buffer_[0] in the answer's text
  std::vector<size_t> marker_offsets_;     // ascending; those before buffer_offset_ are spent
  size_t next_marker_ = 0;                 // first of marker_offsets_ not yet spent
  size_t reasoning_end_ = std::string::npos;  // see reasoning_end()
};

// Names for --reasoning-parser: qwen3, deepseek_r1, deepseek_v3, glm45 (one format, <think>).
std::vector<std::string> reasoning_parser_names();
bool is_reasoning_parser_name(std::string_view name);
// The format a chat template's model reasons in ("" when it shows none).
std::string reasoning_parser_for_template(std::string_view chat_template);
std::vector<std::string> reasoning_parser_markers(std::string_view name);
// Whether `prompt` (rendered) leaves the answer inside an open reasoning block.
bool prompt_opens_reasoning(std::string_view name, std::string_view prompt);
std::unique_ptr<ReasoningParser> make_reasoning_parser(std::string_view name, bool starts_inside,
                                                       bool markers_by_id = false);

}  // namespace tachyon::server
