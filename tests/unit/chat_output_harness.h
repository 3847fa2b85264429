// Shared by the chat output tests: run a text through ChatOutput whole, byte by byte and in
// pieces of a few bytes, and check every chunking gives the same answer.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tachyon/server/chat_output.h"

namespace tachyon::server::testing {

struct Answer {
  std::string content;
  std::string reasoning;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool operator==(const Answer&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const Answer& a) {
  os << "{content=" << ::testing::PrintToString(a.content) << " reasoning=" << ::testing::PrintToString(a.reasoning)
     << " calls=[";
  for (const auto& [name, args] : a.calls) os << name << ::testing::PrintToString(args) << " ";
  return os << "]}";
}

// The pieces in order must make sense: a call's arguments follow its opening, indices count up.
inline void check_order(const std::vector<ChatPiece>& pieces, int32_t& opened) {
  for (const ChatPiece& piece : pieces) {
    if (piece.kind == ChatPiece::Kind::kToolCallStart) {
      EXPECT_EQ(piece.tool_index, opened) << "calls open in order";
      EXPECT_FALSE(piece.text.empty()) << "a call opens with its name";
      ++opened;
    } else if (piece.kind == ChatPiece::Kind::kToolCallArguments) {
      EXPECT_EQ(piece.tool_index, opened - 1) << "arguments belong to the open call";
    }
  }
}

inline Answer run_chunks(const ChatOutputConfig& config, const std::vector<std::string>& chunks) {
  ChatOutput output(config, [] { return std::string("call_x"); });
  CompletionChoiceResult choice;
  int32_t opened = 0;
  for (const std::string& chunk : chunks) {
    std::vector<ChatPiece> pieces = output.push(chunk, {});
    check_order(pieces, opened);
    append_pieces(pieces, choice);
  }
  std::vector<ChatPiece> last = output.finish();
  check_order(last, opened);
  append_pieces(last, choice);
  Answer answer{choice.text, choice.reasoning, {}};
  for (const ToolCall& call : choice.tool_calls) answer.calls.emplace_back(call.name, call.arguments);
  return answer;
}

inline std::vector<std::string> split_every(const std::string& text, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size(); i += n) out.push_back(text.substr(i, n));
  return out;
}

// Whole, byte by byte, and in pieces of 2, 3, 5 and 7 bytes: all must equal `expected`.
inline void expect_answer(const ChatOutputConfig& config, const std::string& text, const Answer& expected) {
  EXPECT_EQ(run_chunks(config, {text}), expected) << "whole: " << text;
  for (size_t n : {1, 2, 3, 5, 7}) {
    EXPECT_EQ(run_chunks(config, split_every(text, n)), expected) << "pieces of " << n << ": " << text;
  }
}

inline ChatOutputConfig tools_config(const std::string& parser, nlohmann::ordered_json tools = nullptr) {
  ChatOutputConfig config;
  config.tool_parser = parser;
  config.tools = std::move(tools);
  return config;
}

}  // namespace tachyon::server::testing
