#include "tachyon/server/json_scan.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace tachyon::server {

bool is_json_whitespace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_whitespace(std::string_view text, size_t pos) {
  while (pos < text.size() && is_json_whitespace(text[pos])) ++pos;
  return pos;
}

std::string trim_json_whitespace(std::string_view text) {
  const size_t begin = skip_whitespace(text, 0);
  size_t end = text.size();
  while (end > begin && is_json_whitespace(text[end - 1])) --end;
  return std::string(text.substr(begin, end - begin));
}

namespace {

// The string literal starting at text[begin] ('"').
JsonValueScan scan_string(std::string_view text, size_t begin) {
  for (size_t i = begin + 1; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
    } else if (text[i] == '"') {
      return {ScanStatus::kComplete, i + 1};
    } else if (static_cast<unsigned char>(text[i]) < 0x20) {
      return {ScanStatus::kInvalid, i};
    }
  }
  return {ScanStatus::kIncomplete, text.size()};
}

bool is_scalar_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '+' ||
         c == '.';
}

// Objects and arrays: brackets matched through a stack, strings skipped whole.
JsonValueScan scan_container(std::string_view text, size_t begin) {
  std::vector<char> closers;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      JsonValueScan s = scan_string(text, i);
      if (s.status != ScanStatus::kComplete) return {s.status, s.status == ScanStatus::kInvalid ? s.end : text.size()};
      i = s.end - 1;
    } else if (c == '{') {
      closers.push_back('}');
    } else if (c == '[') {
      closers.push_back(']');
    } else if (c == '}' || c == ']') {
      if (closers.empty() || closers.back() != c) return {ScanStatus::kInvalid, i};
      closers.pop_back();
      if (closers.empty()) return {ScanStatus::kComplete, i + 1};
    } else if (!is_json_whitespace(c) && !is_scalar_char(c) && c != ':' && c != ',') {
      return {ScanStatus::kInvalid, i};
    }
  }
  return {ScanStatus::kIncomplete, text.size()};
}

}  // namespace

JsonValueScan scan_json_value(std::string_view text, size_t begin) {
  if (begin >= text.size()) return {ScanStatus::kIncomplete, text.size()};
  const char c = text[begin];
  if (c == '"') return scan_string(text, begin);
  if (c == '{' || c == '[') return scan_container(text, begin);
  if (!is_scalar_char(c)) return {ScanStatus::kInvalid, begin};
  size_t i = begin;
  while (i < text.size() && is_scalar_char(text[i])) ++i;
  if (i == text.size()) return {ScanStatus::kIncomplete, text.size()};
  return {ScanStatus::kComplete, i};
}

std::optional<std::string> decode_json_string(std::string_view literal) {
  nlohmann::json value = nlohmann::json::parse(literal, nullptr, /*allow_exceptions=*/false);
  if (!value.is_string()) return std::nullopt;
  return value.get<std::string>();
}

CallObjectScan scan_call_object(std::string_view text, size_t begin, const std::vector<std::string_view>& name_keys,
                                const std::vector<std::string_view>& argument_keys) {
  CallObjectScan scan;
  auto incomplete = [&] {
    scan.status = ScanStatus::kIncomplete;
    scan.end = text.size();
    return scan;
  };
  auto invalid = [&](size_t at) {
    scan.status = ScanStatus::kInvalid;
    scan.end = at;
    return scan;
  };
  if (begin >= text.size()) return incomplete();
  if (text[begin] != '{') return invalid(begin);
  size_t pos = skip_whitespace(text, begin + 1);
  if (pos < text.size() && text[pos] == '}') {
    scan.status = ScanStatus::kComplete;
    scan.end = pos + 1;
    return scan;
  }
  while (true) {
    if (pos >= text.size()) return incomplete();
    if (text[pos] != '"') return invalid(pos);
    JsonValueScan key = scan_string(text, pos);
    if (key.status != ScanStatus::kComplete) return key.status == ScanStatus::kInvalid ? invalid(key.end) : incomplete();
    std::optional<std::string> key_text = decode_json_string(text.substr(pos, key.end - pos));
    if (!key_text) return invalid(pos);
    pos = skip_whitespace(text, key.end);
    if (pos >= text.size()) return incomplete();
    if (text[pos] != ':') return invalid(pos);
    pos = skip_whitespace(text, pos + 1);
    if (pos >= text.size()) return incomplete();
    const bool is_name = std::find(name_keys.begin(), name_keys.end(), *key_text) != name_keys.end();
    const bool is_arguments = std::find(argument_keys.begin(), argument_keys.end(), *key_text) != argument_keys.end();
    if (is_arguments && scan.arguments_begin == std::string_view::npos) scan.arguments_begin = pos;
    JsonValueScan value = scan_json_value(text, pos);
    if (value.status == ScanStatus::kInvalid) return invalid(value.end);
    if (value.status == ScanStatus::kIncomplete) return incomplete();
    if (is_name && !scan.name) {
      scan.name = decode_json_string(text.substr(pos, value.end - pos));
      if (!scan.name) return invalid(pos);  // a name must be a string
    }
    if (is_arguments && scan.arguments_end == std::string_view::npos) scan.arguments_end = value.end;
    pos = skip_whitespace(text, value.end);
    if (pos >= text.size()) return incomplete();
    if (text[pos] == '}') {
      scan.status = ScanStatus::kComplete;
      scan.end = pos + 1;
      return scan;
    }
    if (text[pos] != ',') return invalid(pos);
    pos = skip_whitespace(text, pos + 1);
  }
}

size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

}  // namespace tachyon::server
