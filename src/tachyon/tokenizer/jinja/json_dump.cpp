// Python json.dumps layout and string escaping; see json_dump.h.
#include "tachyon/tokenizer/jinja/json_dump.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/py_string.h"

namespace tachyon::tokenizer::jinja {
namespace {

void append_escape(std::string& out, unsigned code_unit) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", code_unit);
  out += buf;
}

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          append_escape(out, c);
        } else if (ensure_ascii && c > 0x7E) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            append_escape(out, 0xD800 + (v >> 10));
            append_escape(out, 0xDC00 + (v & 0x3FF));
          } else {
            append_escape(out, c);
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += '"';
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  auto newline = [&](int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o.indent;
  };
  switch (v.kind) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.boolean ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.integer); return;
    case Kind::kFloat:
      if (std::isnan(v.number)) out += "NaN";
      else if (std::isinf(v.number)) out += v.number > 0 ? "Infinity" : "-Infinity";
      else out += format_float(v.number);
      return;
    case Kind::kString: dump_string(out, v.text, o.ensure_ascii); return;
    case Kind::kList: {
      if (v.list->empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i > 0) out += o.item_separator;
        if (o.indent) newline(depth + 1);
        dump(out, (*v.list)[i], o, depth + 1);
      }
      if (o.indent) newline(depth);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (v.dict->items.empty()) { out += "{}"; return; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.dict->items) items.push_back(&item);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return decode_utf8(a->first) < decode_utf8(b->first); });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += o.item_separator;
        if (o.indent) newline(depth + 1);
        dump_string(out, items[i]->first, o.ensure_ascii);
        out += o.key_separator;
        dump(out, items[i]->second, o, depth + 1);
      }
      if (o.indent) newline(depth);
      out += '}';
      return;
    }
    default:
      TACHYON_FAIL() << "tojson: Object of type " << type_name(v) << " is not JSON serializable"
                     << (v.is_undefined() && !v.text.empty() ? " (" + v.text + ")" : "");
  }
}

}  // namespace

std::string json_dump(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  dump(out, value, options, 0);
  return out;
}

}  // namespace tachyon::tokenizer::jinja
