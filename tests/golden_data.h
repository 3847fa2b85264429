// Reading the golden files that tools/make_goldens.py writes: logits travel as base64 of
// little-endian float32 (JSON numbers would be 3x larger and slower to parse).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tachyon {

inline std::vector<float> decode_base64_f32(const std::string& text) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  uint32_t buffer = 0;
  int bits = 0;
  for (char ch : text) {
    if (ch == '=') break;
    auto pos = kAlphabet.find(ch);
    if (pos == std::string::npos) continue;
    buffer = (buffer << 6) | static_cast<uint32_t>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<char>((buffer >> bits) & 0xff));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

}  // namespace tachyon
