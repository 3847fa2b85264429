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
// held back). Tests: tests/unit/test_reasoning_parser.cpp (ctest -R unit.reasoning_parser).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/server/tool_parser.h"

namespace tachyon::server {

class ReasoningParser {
 public:
  ReasoningParser(std::string start, std::string end, bool starts_inside);
  // Appends kReasoning and kContent pieces to `out`.
  void push(std::string_view text, std::vector<ChatPiece>& out);
  void finish(std::vector<ChatPiece>& out);

 private:
  enum class State { kStart, kReasoning, kAfter, kContent };
  void parse(bool at_end, std::vector<ChatPiece>& out);

  std::string start_, end_;
  State state_;
  std::string buffer_;
};

// Names for --reasoning-parser: qwen3, deepseek_r1, deepseek_v3, glm45 (one format, <think>).
std::vector<std::string> reasoning_parser_names();
bool is_reasoning_parser_name(std::string_view name);
// The format a chat template's model reasons in ("" when it shows none).
std::string reasoning_parser_for_template(std::string_view chat_template);
std::vector<std::string> reasoning_parser_markers(std::string_view name);
// Whether `prompt` (rendered) leaves the answer inside an open reasoning block.
bool prompt_opens_reasoning(std::string_view name, std::string_view prompt);
std::unique_ptr<ReasoningParser> make_reasoning_parser(std::string_view name, bool starts_inside);

}  // namespace tachyon::server
