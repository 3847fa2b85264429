#include "tachyon/server/http/http_util.h"

#include <algorithm>
#include <cctype>

namespace tachyon::server {

std::string percent_decoded(std::string_view text, bool plus_is_space) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (plus_is_space && text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::map<std::string, std::string> query_parameters(std::string_view query) {
  std::map<std::string, std::string> out;
  for (size_t pos = 0; pos <= query.size();) {
    const size_t end = std::min(query.find('&', pos), query.size());
    const std::string_view pair = query.substr(pos, end - pos);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      out[percent_decoded(pair.substr(0, eq), true)] =
          eq == std::string_view::npos ? "" : percent_decoded(pair.substr(eq + 1), true);
    }
    pos = end + 1;
  }
  return out;
}

}  // namespace tachyon::server
