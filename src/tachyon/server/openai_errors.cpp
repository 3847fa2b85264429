#include "tachyon/server/openai_errors.h"

#include <nlohmann/json.hpp>

namespace tachyon::server {

namespace {

// Length of the well-formed UTF-8 sequence at text[i], or 0 when the bytes there are ill-formed
// (Unicode 3.9, table 3-7: no overlongs, no surrogates, nothing above U+10FFFF).
size_t utf8_sequence_length(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + 1 >= text.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (i + k >= text.size() || byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

// Bytes of the maximal ill-formed subpart at text[i] (at least 1): a valid lead byte followed by
// valid continuation bytes that stop short is replaced as one unit.
size_t ill_formed_length(std::string_view text, size_t i) {
  size_t k = i + 1;
  unsigned char b0 = static_cast<unsigned char>(text[i]);
  size_t want = (b0 >= 0xC2 && b0 <= 0xDF) ? 2 : (b0 >= 0xE0 && b0 <= 0xEF) ? 3 : (b0 >= 0xF0 && b0 <= 0xF4) ? 4 : 1;
  while (k < i + want && k < text.size()) {  // extend while it could still become valid
    unsigned char b = static_cast<unsigned char>(text[k]);
    if (b < 0x80 || b > 0xBF) break;
    if (k == i + 1) {
      if ((b0 == 0xE0 && b < 0xA0) || (b0 == 0xED && b > 0x9F) || (b0 == 0xF0 && b < 0x90) || (b0 == 0xF4 && b > 0x8F))
        break;
    }
    ++k;
  }
  return k - i;
}

}  // namespace

std::string to_valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t length = utf8_sequence_length(text, i);
    if (length > 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out.append("\xEF\xBF\xBD");
      i += ill_formed_length(text, i);
    }
  }
  return out;
}

std::string error_body(const ApiError& error) {
  nlohmann::ordered_json inner;
  inner["message"] = to_valid_utf8(error.message);
  inner["type"] = to_valid_utf8(error.type);
  inner["param"] =
      error.param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(to_valid_utf8(error.param));
  inner["code"] =
      error.code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(to_valid_utf8(error.code));
  nlohmann::ordered_json body;
  body["error"] = std::move(inner);
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

ApiError bad_request(std::string param, std::string message) {
  return ApiError{.status = 400, .message = std::move(message), .param = std::move(param)};
}

ApiError model_not_found(std::string_view requested, std::string_view served) {
  return ApiError{.status = 404,
                  .message = "The model `" + std::string(requested) + "` does not exist. This server serves `" +
                             std::string(served) + "`.",
                  .type = "NotFoundError",
                  .param = "model",
                  .code = "model_not_found"};
}

}  // namespace tachyon::server
