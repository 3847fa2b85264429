// Jinja filters with jinja2/filters.py semantics; see filters.h.
#include "tachyon/tokenizer/jinja/filters.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/json_dump.h"
#include "tachyon/tokenizer/jinja/operators.h"
#include "tachyon/tokenizer/jinja/py_string.h"

namespace tachyon::tokenizer::jinja {
namespace {

bool flag(const CallArgs& args, size_t pos, const char* name, bool fallback) {
  const Value* v = args.get(pos, name);
  return v == nullptr ? fallback : truthy(*v);
}

// The remaining positional arguments from `from` on (for map/select and friends).
CallArgs rest(const CallArgs& args, size_t from) {
  CallArgs out;
  for (size_t i = from; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
  return out;
}

int64_t length(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return static_cast<int64_t>(utf8_length(v.text));
    case Kind::kList: return static_cast<int64_t>(v.list->size());
    case Kind::kDict: return static_cast<int64_t>(v.dict->items.size());
    default: TACHYON_FAIL() << "object of type '" << type_name(v) << "' has no len()";
  }
  return 0;
}

Value tojson(const Value& v, const CallArgs& args) {
  JsonDumpOptions o;
  o.ensure_ascii = flag(args, 0, "ensure_ascii", false);
  const Value* indent = args.get(1, "indent");
  if (indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) o.indent = indent->text;
    else o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent->as_int())), ' ');
    o.item_separator = ",";
  }
  const Value* separators = args.get(2, "separators");
  if (separators != nullptr && !separators->is_none()) {
    TACHYON_CHECK(separators->kind == Kind::kList && separators->list->size() == 2)
        << "tojson: separators must be a (item, key) pair";
    o.item_separator = to_str((*separators->list)[0]);
    o.key_separator = to_str((*separators->list)[1]);
  }
  o.sort_keys = flag(args, 3, "sort_keys", false);
  return Value::from_string(json_dump(v, o));
}

// Sort key for sort/dictsort/unique/min/max: lower-cased strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::from_string(py_lower(v.text));
  return v;
}

Value sorted(const Value& v, const CallArgs& args) {
  bool reverse = flag(args, 0, "reverse", false);
  bool case_sensitive = flag(args, 1, "case_sensitive", false);
  const Value* attribute = args.get(2, "attribute");
  ValueList items = iterate(v);
  auto key = [&](const Value& item) {
    return sort_key(attribute ? attribute_path(item, to_str(*attribute)) : item, case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? compare("<", key(b), key(a)) : compare("<", key(a), key(b));
  });
  return Value::from_list(std::move(items));
}

Value dictsort(const Value& v, const CallArgs& args) {
  TACHYON_CHECK(v.kind == Kind::kDict) << "dictsort expects a dict, got " << type_name(v);
  bool case_sensitive = flag(args, 0, "case_sensitive", false);
  const Value* by = args.get(1, "by");
  bool by_value = by != nullptr && to_str(*by) == "value";
  bool reverse = flag(args, 2, "reverse", false);
  ValueList items;
  for (const auto& [k, item] : v.dict->items) items.push_back(Value::from_list({Value::from_string(k), item}, true));
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const Value& x = (*a.list)[by_value ? 1 : 0];
    const Value& y = (*b.list)[by_value ? 1 : 0];
    return reverse ? compare("<", sort_key(y, case_sensitive), sort_key(x, case_sensitive))
                   : compare("<", sort_key(x, case_sensitive), sort_key(y, case_sensitive));
  });
  return Value::from_list(std::move(items));
}

Value min_max(const Value& v, const CallArgs& args, bool want_max) {
  bool case_sensitive = flag(args, 0, "case_sensitive", false);
  const Value* attribute = args.get(1, "attribute");
  ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    return sort_key(attribute ? attribute_path(item, to_str(*attribute)) : item, case_sensitive);
  };
  const Value* best = &items[0];
  for (const Value& item : items) {
    if (compare(want_max ? ">" : "<", key(item), key(*best))) best = &item;
  }
  return *best;
}

Value select(const Value& v, const CallArgs& args, bool by_attribute, bool keep) {
  ValueList out;
  size_t test_pos = by_attribute ? 1 : 0;
  std::string attribute = by_attribute ? to_str(args.positional.at(0)) : "";
  for (const Value& item : iterate(v)) {
    Value subject = by_attribute ? attribute_path(item, attribute) : item;
    bool ok = args.positional.size() > test_pos
                  ? apply_test(to_str(args.positional[test_pos]), subject, rest(args, test_pos + 1))
                  : truthy(subject);
    if (ok == keep) out.push_back(item);
  }
  return Value::from_list(std::move(out));
}

Value map(const Value& v, const CallArgs& args) {
  ValueList out;
  const Value* attribute = args.get(99, "attribute");
  for (const Value& item : iterate(v)) {
    if (attribute != nullptr) {
      Value got = attribute_path(item, to_str(*attribute));
      const Value* fallback = args.get(99, "default");
      out.push_back(got.is_undefined() && fallback ? *fallback : got);
    } else {
      TACHYON_CHECK(!args.positional.empty()) << "map needs a filter name or attribute=";
      out.push_back(apply_filter(to_str(args.positional[0]), item, rest(args, 1)));
    }
  }
  return Value::from_list(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value indent(const Value& v, const CallArgs& args) {
  const Value* width = args.get(0, "width");
  std::string pad = width == nullptr ? "    " : width->is_string() ? width->text
                                                 : std::string(static_cast<size_t>(width->as_int()), ' ');
  bool first = flag(args, 1, "first", false);
  bool blank = flag(args, 2, "blank", false);
  std::vector<std::string> lines = py_split(to_str(v) + "\n", std::string("\n"), -1, false);
  lines.pop_back();  // the piece after the final newline
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n" + ((blank || !lines[i].empty()) ? pad : "");
    out += lines[i];
  }
  return Value::from_string(first ? pad + out : out);
}

Value round_filter(const Value& v, const CallArgs& args) {
  TACHYON_CHECK(v.is_number()) << "round expects a number, got " << type_name(v);
  const Value* precision = args.get(0, "precision");
  const Value* method = args.get(1, "method");
  std::string how = method ? to_str(*method) : "common";
  double scale = std::pow(10.0, precision ? static_cast<double>(precision->as_int()) : 0.0);
  double x = v.as_double() * scale;
  double r = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::nearbyint(x);
  return Value::from_float(r / scale);
}

Value to_int(const Value& v, const CallArgs& args) {
  const Value* fallback = args.get(0, "default");
  Value def = fallback ? *fallback : Value::from_int(0);
  if (v.is_integral()) return Value::from_int(v.as_int());
  if (v.kind == Kind::kFloat) return Value::from_int(static_cast<int64_t>(v.number));
  if (v.is_string()) {
    std::string s = py_strip(v.text, std::nullopt, true, true);
    try {
      size_t used = 0;
      int64_t i = std::stoll(s, &used, 10);
      if (used == s.size()) return Value::from_int(i);
      double d = std::stod(s, &used);
      if (used == s.size()) return Value::from_int(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return def;
}

Value to_float(const Value& v, const CallArgs& args) {
  const Value* fallback = args.get(0, "default");
  if (v.is_number()) return Value::from_float(v.as_double());
  if (v.is_string()) {
    try {
      size_t used = 0;
      std::string s = py_strip(v.text, std::nullopt, true, true);
      double d = std::stod(s, &used);
      if (used == s.size()) return Value::from_float(d);
    } catch (const std::exception&) {
    }
  }
  return fallback ? *fallback : Value::from_float(0.0);
}

}  // namespace

Value attribute_path(const Value& value, const std::string& path) {
  Value cur = value;
  for (const std::string& part : py_split(path, std::string("."), -1, false)) {
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = numeric ? get_item(cur, Value::from_int(std::stoll(part))) : get_item(cur, Value::from_string(part));
  }
  return cur;
}

namespace {

// Filters on text and on any value as text: tojson, trim, default, case, replace, ...
std::optional<Value> text_filter(const std::string& name, const Value& v, const CallArgs& args) {
  if (name == "tojson") return tojson(v, args);
  if (name == "length" || name == "count") return Value::from_int(length(v));
  if (name == "default" || name == "d") {
    const Value* fallback = args.get(0, "default_value");
    bool use = v.is_undefined() || (flag(args, 1, "boolean", false) && !truthy(v));
    if (!use) return v;
    return fallback ? *fallback : Value::from_string("");
  }
  if (name == "safe") return v;
  if (name == "string") return Value::from_string(to_str(v));
  if (name == "trim") {
    const Value* chars = args.get(0, "chars");
    std::optional<std::string> set;
    if (chars != nullptr && !chars->is_none()) set = to_str(*chars);
    return Value::from_string(py_strip(to_str(v), set, true, true));
  }
  if (name == "upper") return Value::from_string(py_upper(to_str(v)));
  if (name == "lower") return Value::from_string(py_lower(to_str(v)));
  if (name == "capitalize") return Value::from_string(py_capitalize(to_str(v)));
  if (name == "title") return Value::from_string(py_title(to_str(v)));
  if (name == "e" || name == "escape" || name == "forceescape") return Value::from_string(html_escape(to_str(v)));
  if (name == "replace") {
    const Value* count = args.get(2, "count");
    TACHYON_CHECK(args.positional.size() >= 2) << "replace needs (old, new)";
    return Value::from_string(py_replace(to_str(v), to_str(args.positional[0]), to_str(args.positional[1]),
                                         count && !count->is_none() ? count->as_int() : -1));
  }
  return std::nullopt;
}

// Filters on sequences and mappings: first, join, sort, items, unique, min, sum, ...
std::optional<Value> sequence_filter(const std::string& name, const Value& v, const CallArgs& args) {
  if (name == "first") {
    ValueList items = iterate(v);
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
  }
  if (name == "last") {
    ValueList items = iterate(v);
    return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
  }
  if (name == "join") {
    const Value* sep = args.get(0, "d");
    const Value* attribute = args.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first && sep) out += to_str(*sep);
      first = false;
      out += to_str(attribute ? attribute_path(item, to_str(*attribute)) : item);
    }
    return Value::from_string(std::move(out));
  }
  if (name == "list") return Value::from_list(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) return slice(v, std::nullopt, std::nullopt, -1);
    ValueList items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::from_list(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::from_list({});
    TACHYON_CHECK(v.kind == Kind::kDict) << "items expects a dict, got " << type_name(v);
    return (*get_attribute(v, "items").function)(CallArgs{});
  }
  if (name == "dictsort") return dictsort(v, args);
  if (name == "sort") return sorted(v, args);
  if (name == "unique") {
    ValueList out;
    bool case_sensitive = flag(args, 0, "case_sensitive", false);
    for (const Value& item : iterate(v)) {
      bool seen = std::any_of(out.begin(), out.end(), [&](const Value& o) {
        return equals(sort_key(o, case_sensitive), sort_key(item, case_sensitive));
      });
      if (!seen) out.push_back(item);
    }
    return Value::from_list(std::move(out));
  }
  if (name == "min" || name == "max") return min_max(v, args, name == "max");
  if (name == "sum") {
    const Value* attribute = args.get(0, "attribute");
    const Value* start = args.get(1, "start");
    Value total = start ? *start : Value::from_int(0);
    for (const Value& item : iterate(v)) {
      total = binary_op("+", total, attribute ? attribute_path(item, to_str(*attribute)) : item);
    }
    return total;
  }
  return std::nullopt;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args) {
  if (auto out = text_filter(name, v, args)) return *out;
  if (auto out = sequence_filter(name, v, args)) return *out;
  if (name == "abs") {
    TACHYON_CHECK(v.is_number()) << "bad operand type for abs(): '" << type_name(v) << "'";
    if (v.kind == Kind::kFloat) return Value::from_float(std::fabs(v.number));
    return Value::from_int(std::llabs(v.as_int()));
  }
  if (name == "round") return round_filter(v, args);
  if (name == "int") return to_int(v, args);
  if (name == "float") return to_float(v, args);
  if (name == "map") return map(v, args);
  if (name == "select" || name == "reject") return select(v, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select(v, args, true, name == "selectattr");
  if (name == "indent") return indent(v, args);
  if (name == "attr") {
    // jinja2's attr looks up attributes only, never dict keys: {'a': 1}|attr('a') is undefined.
    TACHYON_CHECK(!args.positional.empty()) << "attr needs an attribute name";
    if (v.kind == Kind::kDict) return Value::undefined("'dict object' has no attribute '" + to_str(args.positional[0]) + "'");
    return get_attribute(v, to_str(args.positional[0]));
  }
  if (name == "wordcount") return Value::from_int(static_cast<int64_t>(py_split(to_str(v), std::nullopt, -1, false).size()));
  TACHYON_FAIL() << "no filter named '" << name << "'";
  return v;
}

}  // namespace tachyon::tokenizer::jinja
