// Text typed on a command line: "\n", "\t" and "\\" become the characters, so stop strings such
// as a blank line can be passed as --stop '\n\n' (eval, generate).
#pragma once

#include <string>

namespace tachyon::cli {

inline std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'n' || s[i + 1] == 't' || s[i + 1] == '\\')) {
      out += s[i + 1] == 'n' ? '\n' : s[i + 1] == 't' ? '\t' : '\\';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace tachyon::cli
