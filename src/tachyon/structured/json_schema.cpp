#include "tachyon/structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "tachyon/structured/integer_multiples.h"
#include "tachyon/structured/integer_range.h"
#include "tachyon/structured/json_schema_exclusive.h"
#include "tachyon/structured/regex_grammar.h"
#include "tachyon/structured/schema_bounds.h"
#include "tachyon/structured/string_formats.h"
#include "tachyon/structured/unique_items.h"
#include "tachyon/structured/utf8_ranges.h"

namespace tachyon::structured {
namespace {

using Json = nlohmann::ordered_json;

// The most oneOf branches checked for exclusivity pair by pair (about a third of a second on one
// core); more must be shown exclusive by their values (exclusive_by_values).
constexpr size_t kMaxPairwiseOneOf = 512;
// The steps every pairwise proof of one grammar's schemas may take together (about half a second
// on one core): many oneOfs of up to 512 branches each, or pairs whose proofs recurse deep, must
// not hold a request thread for minutes.
constexpr int64_t kMaxExclusiveSteps = 2'000'000;

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "$defs", "definitions"};
const std::set<std::string, std::less<>> kKeywords = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
    "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format", "nullable", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "prefixItems", "additionalItems", "minProperties", "maxProperties",
    "propertyNames", "patternProperties", "multipleOf", "uniqueItems"};

}  // namespace

// The rules of any JSON value (string, number, object, ...) are built once per grammar and shared
// by every schema added to it; "$ref"s resolve within the document being added.
class JsonSchemaBuilder::Compiler {
 public:
  explicit Compiler(Grammar& grammar) : g_(grammar) {}

  Sequence add(const Json& document, const std::string& what) {
    root_ = &document;
    what_ = what;
    refs_.clear();
    return schema(document, "", 0);
  }

  Sequence object_any() {
    if (object_ < 0) {
      object_ = g_.add_rule("json_object");
      const Sequence member = concat({string_any(), g_.literal(": "), value_any()});
      g_.add_alternative(object_, g_.literal("{}"));
      g_.add_alternative(object_, concat({g_.literal("{"), member, g_.star(concat({g_.literal(", "), member}), "json_members"), g_.literal("}")}));
    }
    return Grammar::ref(object_);
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw StructuredError(what_ + (path.empty() ? std::string() : " at '" + path + "'") + ": " + message);
  }
  static std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

  // --- The JSON value rules, built once per grammar ---
  Sequence character() {
    if (char_ < 0) {
      // A string character: any but control characters, '"' and '\' (which must be escaped),
      // or an escape sequence.
      const Sequence plain = utf8_class(g_, {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}}, "json_char_plain");
      ByteSet escapable;
      for (char c : std::string("\"\\/bfnrt")) escapable.set(static_cast<uint8_t>(c));
      ByteSet hex;
      hex.set_range('0', '9');
      hex.set_range('a', 'f');
      hex.set_range('A', 'F');
      const Sequence h = g_.bytes(hex);
      char_ = g_.rule_of("json_char", {plain, concat({g_.literal("\\"), g_.bytes(escapable)}),
                                       concat({g_.literal("\\u"), h, h, h, h})});
    }
    return Grammar::ref(char_);
  }
  Sequence string_any() {
    if (string_ < 0) string_ = g_.rule_of("json_string", {concat({g_.literal("\""), g_.star(character(), "json_chars"), g_.literal("\"")})});
    return Grammar::ref(string_);
  }
  Sequence digits_star() { return g_.star(g_.bytes(ByteSet::range('0', '9')), "json_digits"); }
  Sequence integer_any() {
    if (integer_ < 0) {
      integer_ = g_.rule_of("json_integer", {g_.literal("0"), concat({g_.optional(g_.literal("-"), "json_minus"),
                                                                       g_.bytes(ByteSet::range('1', '9')), digits_star()})});
    }
    return Grammar::ref(integer_);
  }
  Sequence number_any() {
    if (number_ < 0) {
      const Sequence digit = g_.bytes(ByteSet::range('0', '9'));
      const Sequence int_part = Grammar::ref(g_.rule_of("json_int_part", {g_.literal("0"), concat({g_.bytes(ByteSet::range('1', '9')), digits_star()})}));
      const Sequence fraction = g_.optional(concat({g_.literal("."), digit, digits_star()}), "json_fraction");
      ByteSet e;
      e.set('e');
      e.set('E');
      ByteSet sign;
      sign.set('+');
      sign.set('-');
      const Sequence exponent = g_.optional(concat({g_.bytes(e), g_.optional(g_.bytes(sign), "json_sign"), digit, digits_star()}), "json_exponent");
      number_ = g_.rule_of("json_number", {concat({g_.optional(g_.literal("-"), "json_minus"), int_part, fraction, exponent})});
    }
    return Grammar::ref(number_);
  }
  Sequence value_any() {
    if (value_ < 0) {
      value_ = g_.add_rule("json_value");
      for (const Sequence& s : {object_any(), array_any(), string_any(), number_any(), g_.literal("true"), g_.literal("false"), g_.literal("null")}) {
        g_.add_alternative(value_, s);
      }
    }
    return Grammar::ref(value_);
  }
  Sequence array_any() {
    if (array_ < 0) {
      array_ = g_.add_rule("json_array");
      g_.add_alternative(array_, g_.literal("[]"));
      g_.add_alternative(array_, concat({g_.literal("["), value_any(), g_.star(concat({g_.literal(", "), value_any()}), "json_items"), g_.literal("]")}));
    }
    return Grammar::ref(array_);
  }

  // --- Schemas ---
  Sequence schema(const Json& s, const std::string& path, int depth) {
    if (depth > 64) fail(path, "the schema nests too deeply (more than 64 levels)");
    if (s.is_boolean()) {
      if (s.get<bool>()) return value_any();
      fail(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items()) {
      if (kAnnotations.count(key) == 0 && kKeywords.count(key) == 0) {
        fail(join(path, key), "the keyword '" + key + "' is not supported (supported: type, properties, required, "
             "additionalProperties, minProperties, maxProperties, propertyNames and patternProperties on maps, items, "
             "prefixItems, additionalItems, minItems, maxItems, uniqueItems over a few values, enum, const, anyOf, "
             "oneOf, allOf with one member, $ref, $defs, minLength, maxLength, pattern, format, minimum, maximum, "
             "exclusiveMinimum and exclusiveMaximum on integers and numbers, multipleOf on integers)");
      }
    }
    if (const auto it = s.find("nullable"); it != s.end() && !it->is_boolean()) {
      fail(join(path, "nullable"), "'nullable' must be true or false");
    }
    if (const auto it = s.find("$ref"); it != s.end()) {
      if (s.size() > 1 && (s.contains("type") || s.contains("properties") || s.contains("items"))) {
        fail(path, "'$ref' beside other constraining keywords is not supported");
      }
      return reference(*it, join(path, "$ref"), depth);
    }
    if (const auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) fail(join(path, "allOf"), "only 'allOf' with exactly one schema is supported");
      if (has_constraints(s, "allOf")) fail(path, "'allOf' beside other constraining keywords is not supported");
      return schema((*it)[0], join(path, "allOf[0]"), depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const auto it = s.find(key); it != s.end()) {
        if (!it->is_array() || it->empty()) fail(join(path, key), std::string("'") + key + "' must be a non-empty array");
        if (has_constraints(s, key)) fail(path, std::string("'") + key + "' beside other constraining keywords is not supported");
        std::vector<Sequence> alternatives;
        for (size_t i = 0; i < it->size(); ++i) {
          alternatives.push_back(schema((*it)[i], join(path, std::string(key) + "[" + std::to_string(i) + "]"), depth + 1));
        }
        if (std::string(key) == "oneOf") check_exclusive(*it, join(path, key));
        return Grammar::ref(g_.rule_of("any_of", alternatives));
      }
    }
    if (const auto it = s.find("const"); it != s.end()) return g_.literal(it->dump());
    if (const auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) fail(join(path, "enum"), "'enum' must be a non-empty array");
      std::vector<Sequence> alternatives;
      for (const Json& v : *it) alternatives.push_back(g_.literal(v.dump()));
      return Grammar::ref(g_.rule_of("enum", alternatives));
    }
    std::vector<std::string> types;
    if (const auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const Json& t : *it) {
          if (!t.is_string()) fail(join(path, "type"), "'type' must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        fail(join(path, "type"), "'type' must be a string or an array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("minProperties") ||
               s.contains("maxProperties") || s.contains("propertyNames") || s.contains("patternProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems") ||
               s.contains("uniqueItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") || s.contains("format")) {
      types.push_back("string");
    } else {
      for_each_bound(s, [&](const char* key, bool, bool, const Json&) {
        fail(join(path, key), std::string("'") + key + "' is supported with \"type\": \"integer\" or \"number\" only");
      });
      if (s.contains("multipleOf")) fail(join(path, "multipleOf"), "'multipleOf' is supported with \"type\": \"integer\" only");
      return value_any();  // no type: any JSON value
    }
    if (s.value("nullable", false)) types.push_back("null");
    std::vector<Sequence> alternatives;
    for (const std::string& t : types) alternatives.push_back(typed(s, t, path, depth));
    if (alternatives.size() == 1) return alternatives[0];
    return Grammar::ref(g_.rule_of("types", alternatives));
  }

  // The grammar of a oneOf is its branches' union, exact only when no output of one branch is
  // valid under another (json_schema_exclusive.h); any other oneOf is refused, naming the pair.
  void check_exclusive(const Json& branches, const std::string& path) {
    const SchemaResolver resolve = [this](const std::string& ref) { return pointer(ref); };
    if (exclusive_by_values(branches, resolve)) return;
    // Pair by pair costs branches^2 proofs (5,000 branches held a request thread for 29 s).
    if (branches.size() > kMaxPairwiseOneOf) {
      fail(path, "a oneOf of " + std::to_string(branches.size()) + " branches is checked for exclusivity pair by "
                     "pair only up to " + std::to_string(kMaxPairwiseOneOf) + " branches; give every branch a "
                     "required property with a const of its own (a discriminated union), make them all const or enum "
                     "values, or use 'anyOf'");
    }
    for (size_t i = 0; i < branches.size(); ++i) {
      for (size_t j = 0; j < branches.size(); ++j) {
        if (i == j || never_valid_under(branches[i], branches[j], resolve, &exclusive_steps_left_)) continue;
        if (exclusive_steps_left_ < 0) {
          fail(path, "proving this schema's oneOf branches exclusive took more than " +
                         std::to_string(kMaxExclusiveSteps) + " steps; give each oneOf's branches a required property "
                         "with a const of their own (a discriminated union), or use 'anyOf'");
        }
        fail(path, "branches " + std::to_string(std::min(i, j)) + " and " + std::to_string(std::max(i, j)) +
                       " may both match one value, and a grammar cannot enforce that exactly one does; make the "
                       "branches exclusive (different types, different const or enum values, or a required "
                       "property with a different const in each) or use 'anyOf'");
      }
    }
  }

  // True when s has a keyword other than `except` that constrains values.
  static bool has_constraints(const Json& s, const std::string& except) {
    for (const auto& [key, value] : s.items()) {
      if (key != except && kAnnotations.count(key) == 0 && key != "nullable") return true;
    }
    return false;
  }

  Sequence typed(const Json& s, const std::string& type, const std::string& path, int depth) {
    if (type == "object") return object(s, path, depth);
    if (type == "array") return array(s, path, depth);
    if (type == "string") return string(s, path);
    if (type == "integer") return integer(s, path);
    if (type == "number") return number(s, path);
    if (type == "boolean") return Grammar::ref(g_.rule_of("boolean", {g_.literal("true"), g_.literal("false")}));
    if (type == "null") return g_.literal("null");
    fail(join(path, "type"), "unknown type '" + type + "'");
  }

  int64_t count(const Json& s, const char* key, const std::string& path, int64_t fallback) const {
    const auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) fail(join(path, key), std::string("'") + key + "' must be a non-negative integer");
    return it->get<int64_t>();
  }

  // minimum / maximum (inclusive) and exclusiveMinimum / exclusiveMaximum (draft 6+: numbers)
  // as integer bounds; a fractional bound rounds inward.
  Sequence integer(const Json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    for_each_bound(s, [&](const char* key, bool lower, bool exclusive, const Json& value) {
      check_bound_is_number(key, value, path);
      const double v = value.get<double>();
      const bool too_big = value.is_number_unsigned() ? value.get<uint64_t>() > uint64_t{INT64_MAX}
                                                      : !(v >= -9223372036854775808.0 && v < 9223372036854775808.0);
      if (too_big) fail(join(path, key), std::string("'") + key + "' is outside the 64-bit integers");
      int64_t b = value.is_number_integer() ? value.get<int64_t>() : static_cast<int64_t>(lower ? std::ceil(v) : std::floor(v));
      if (exclusive && (value.is_number_integer() || static_cast<double>(b) == v)) {
        if (b == (lower ? INT64_MAX : INT64_MIN)) fail(join(path, key), "the bounds leave no integer");
        b += lower ? 1 : -1;
      }
      if (lower) lo = lo ? std::max(*lo, b) : b;
      else hi = hi ? std::min(*hi, b) : b;
    });
    const std::optional<int64_t> k = multiple_of(s, path);
    if (!lo && !hi && !k) return integer_any();
    try {
      return k ? integer_multiples(g_, *k, lo, hi) : integer_range(g_, lo, hi);
    } catch (const StructuredError& e) {
      fail(path, e.what());
    }
  }

  // "multipleOf" on an integer: a positive whole number (a fractional one is refused: validators
  // differ on it, 3 / 0.1 is not a whole number in floating point).
  std::optional<int64_t> multiple_of(const Json& s, const std::string& path) const {
    const auto it = s.find("multipleOf");
    if (it == s.end()) return {};
    const std::string where = join(path, "multipleOf");
    if (!it->is_number() || !(it->get<double>() > 0)) fail(where, "'multipleOf' must be a number above 0");
    const double v = it->get<double>();
    if (!(v == std::floor(v)) || v > static_cast<double>(kMaxMultipleOf)) {
      fail(where, "'multipleOf' on integers is supported for whole numbers from 1 to " + std::to_string(kMaxMultipleOf));
    }
    return static_cast<int64_t>(v);
  }

  // A JSON string whose contents match `regex` whole (`where`: the pattern's path, for errors).
  Sequence quoted_regex(const std::string& regex, const std::string& where) {
    return concat({g_.literal("\""), compile_regex(g_, regex, RegexContext::kJsonString, what_ + " at '" + where + "'"),
                   g_.literal("\"")});
  }

  void check_bound_is_number(const char* key, const Json& value, const std::string& path) const {
    if (!value.is_number()) fail(join(path, key), std::string("'") + key + "' must be a number (draft 4's boolean form is not supported)");
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers) on a number: the decimals
  // in range (number_range.h), without an exponent.
  Sequence number(const Json& s, const std::string& path) {
    if (s.contains("multipleOf")) fail(join(path, "multipleOf"), "'multipleOf' is supported with \"type\": \"integer\" only");
    for_each_bound(s, [&](const char* key, bool, bool, const Json& value) { check_bound_is_number(key, value, path); });
    const NumberInterval bounds = number_interval(s);
    if (!bounds.lo && !bounds.hi) return number_any();
    try {
      return number_range(g_, bounds.lo, bounds.hi);
    } catch (const StructuredError& e) {
      fail(path, e.what());
    }
  }

  Sequence string(const Json& s, const std::string& path) {
    const int64_t min = count(s, "minLength", path, 0);
    const int64_t max = count(s, "maxLength", path, -1);
    if (max >= 0 && max < min) fail(path, "'maxLength' is below 'minLength'");
    const auto pattern = s.find("pattern");
    const auto format = s.find("format");
    if (pattern != s.end() || format != s.end()) {
      if (pattern != s.end() && format != s.end()) fail(path, "'pattern' together with 'format' is not supported");
      if (pattern != s.end()) {
        if (min > 0 || max >= 0) fail(path, "'minLength'/'maxLength' together with 'pattern' is not supported");
        if (!pattern->is_string()) fail(join(path, "pattern"), "'pattern' must be a string");
        return quoted_regex(pattern->get<std::string>(), join(path, "pattern"));
      }
      if (!format->is_string()) fail(join(path, "format"), "'format' must be a string");
      const std::string name = format->get<std::string>();
      const StringFormat* f = find_string_format(name);
      if (f == nullptr) {
        fail(join(path, "format"), "the format '" + name + "' is not supported (supported: " + supported_string_formats() + ")");
      }
      // Lengths beside a format: only when every string of the format meets them.
      if (min > f->min_length || (max >= 0 && (f->max_length < 0 || max < f->max_length))) {
        fail(path, "'minLength'/'maxLength' together with the format '" + name + "' are supported when every such "
                   "string meets them (" + std::to_string(f->min_length) + " to " +
                   (f->max_length < 0 ? std::string("any number of") : std::to_string(f->max_length)) + " characters)");
      }
      return quoted_regex(f->regex, join(path, "format"));
    }
    if (min == 0 && max < 0) return string_any();
    return concat({g_.literal("\""), g_.repeat(character(), min, max, "string_chars"), g_.literal("\"")});
  }

  Sequence array(const Json& s, const std::string& path, int depth) {
    const int64_t min = count(s, "minItems", path, 0);
    const int64_t max = count(s, "maxItems", path, -1);
    if (max >= 0 && max < min) fail(path, "'maxItems' is below 'minItems'");
    // A tuple: prefixItems (draft 2020-12) with `items` for the rest, or draft 4's `items` as an
    // array with `additionalItems` for the rest.
    const auto items = s.find("items"), prefix = s.find("prefixItems"), additional = s.find("additionalItems");
    if (prefix != s.end() && items != s.end() && items->is_array()) {
      fail(join(path, "items"), "'items' as an array beside 'prefixItems' is not supported; use 'prefixItems'");
    }
    if (additional != s.end() && (items == s.end() || !items->is_array())) {
      fail(join(path, "additionalItems"), "'additionalItems' is supported with 'items' as an array only");
    }
    if (const auto unique = s.find("uniqueItems"); unique != s.end()) {
      if (!unique->is_boolean()) fail(join(path, "uniqueItems"), "'uniqueItems' must be true or false");
      if (unique->get<bool>() && (max < 0 || max > 1)) return unique_array(s, min, max, path);
    }
    if (prefix != s.end()) return tuple(*prefix, "prefixItems", items == s.end() ? nullptr : &*items, min, max, path, depth);
    if (items != s.end() && items->is_array()) {
      return tuple(*items, "items", additional == s.end() ? nullptr : &*additional, min, max, path, depth);
    }
    const Sequence item = items != s.end() ? schema(*items, join(path, "items"), depth + 1) : value_any();
    const int32_t rule = g_.add_rule("array");
    if (min == 0) g_.add_alternative(rule, g_.literal("[]"));
    if (max != 0) {
      const Sequence rest = g_.repeat(concat({g_.literal(", "), item}), std::max<int64_t>(min - 1, 0), max < 0 ? -1 : max - 1, "array_items");
      g_.add_alternative(rule, concat({g_.literal("["), item, rest, g_.literal("]")}));
    }
    return Grammar::ref(rule);
  }

  // uniqueItems over items that are a few known values (unique_items.h); other items are refused:
  // a grammar cannot keep strings or numbers apart.
  Sequence unique_array(const Json& s, int64_t min, int64_t max, const std::string& path) {
    const auto items = s.find("items");
    std::optional<std::vector<std::string>> values;
    if (items != s.end() && !s.contains("prefixItems") && !items->is_array()) values = finite_values(*items, 0);
    if (!values || values->size() > kMaxUniqueValues) {
      fail(join(path, "uniqueItems"), "'uniqueItems' is supported when 'items' allows at most " +
           std::to_string(kMaxUniqueValues) + " values (an enum, a const or booleans) or 'maxItems' is at most 1: "
           "a grammar cannot keep other items distinct");
    }
    try {
      return unique_items(g_, *values, min, max);
    } catch (const StructuredError& e) {
      fail(path, e.what());
    }
  }

  // The JSON texts of the values a schema allows, as schema() writes them, when it is a const, an
  // enum (a "type" beside them changes nothing there; equal values once, by JSON Schema's
  // equality: 1 and 1.0 alike, keys in any order), a boolean or null type, or a reference to one;
  // nullopt otherwise. Past kMaxUniqueValues distinct values it stops (the caller refuses).
  std::optional<std::vector<std::string>> finite_values(const Json& s, int depth) const {
    if (depth > 64 || !s.is_object()) return {};
    if (const auto ref = s.find("$ref"); ref != s.end()) {
      const Json* node = ref->is_string() && s.size() == 1 ? pointer(ref->get<std::string>()) : nullptr;
      return node == nullptr ? std::nullopt : finite_values(*node, depth + 1);
    }
    for (const auto& [key, value] : s.items()) {
      if (kAnnotations.count(key) == 0 && key != "const" && key != "enum" && key != "type") return {};
    }
    std::vector<nlohmann::json> values;
    if (const auto it = s.find("const"); it != s.end()) {
      values.push_back(nlohmann::json::parse(it->dump()));
    } else if (const auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array()) return {};
      for (const Json& v : *it) values.push_back(nlohmann::json::parse(v.dump()));
    } else if (const auto type = s.find("type"); type != s.end() && *type == "boolean") {
      values = {true, false};
    } else if (type != s.end() && *type == "null") {
      values = {nullptr};
    } else {
      return {};
    }
    // Compared with the distinct values so far, and no further than one past what uniqueItems
    // takes: a long enum costs a pass, not a comparison of every pair.
    std::vector<nlohmann::json> distinct;
    std::vector<std::string> texts;
    for (size_t i = 0; i < values.size() && distinct.size() <= kMaxUniqueValues; ++i) {
      if (std::find(distinct.begin(), distinct.end(), values[i]) != distinct.end()) continue;
      distinct.push_back(values[i]);
      texts.push_back(s.contains("const") ? s["const"].dump() : s.contains("enum") ? s["enum"][i].dump() : values[i].dump());
    }
    return texts;
  }

  // An array whose item i < P is prefix[i] and whose later items are `rest` (null: any value;
  // false: none), with at most max items (max < 0: unbounded). Every prefix item is written, as
  // xgrammar (vLLM's and SGLang's engine) writes them: JSON Schema would also take a shorter
  // array, but a tuple cut short is rarely what a caller means; the outputs are valid either way.
  Sequence tuple(const Json& prefix, const char* prefix_key, const Json* rest, int64_t min, int64_t max,
                 const std::string& path, int depth) {
    if (!prefix.is_array() || prefix.empty()) fail(join(path, prefix_key), std::string("'") + prefix_key + "' must be a non-empty array of schemas");
    const std::string rest_key = std::string(prefix_key) == "prefixItems" ? "items" : "additionalItems";
    const auto size = static_cast<int64_t>(prefix.size());
    if (rest != nullptr && rest->is_boolean() && !rest->get<bool>()) max = max < 0 ? size : std::min(max, size);
    if (max >= 0 && max < min) fail(path, "'minItems' asks for more items than the tuple allows");
    if (max >= 0 && max < size) fail(join(path, "maxItems"), "'maxItems' below the number of '" + std::string(prefix_key) + "' is not supported (every prefix item is written)");
    Sequence out = g_.literal("[");
    for (int64_t i = 0; i < size; ++i) {
      if (i > 0) append(out, g_.literal(", "));
      append(out, schema(prefix[static_cast<size_t>(i)], join(path, prefix_key) + "[" + std::to_string(i) + "]", depth + 1));
    }
    const int64_t more = max < 0 ? -1 : max - size;  // items past the prefix, at most
    if (more != 0) {
      const Sequence item = rest == nullptr ? value_any() : schema(*rest, join(path, rest_key), depth + 1);
      append(out, g_.repeat(concat({g_.literal(", "), item}), std::max<int64_t>(min - size, 0), more, "tuple_rest"));
    }
    append(out, g_.literal("]"));
    return out;
  }

  Sequence object(const Json& s, const std::string& path, int depth) {
    const auto props = s.find("properties");
    const auto extra = s.find("additionalProperties");
    if (extra != s.end() && !extra->is_boolean() && !extra->is_object()) {
      fail(join(path, "additionalProperties"), "'additionalProperties' must be a boolean or a schema");
    }
    std::set<std::string> required;
    if (const auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) fail(join(path, "required"), "'required' must be an array of strings");
      for (const Json& r : *it) {
        if (!r.is_string()) fail(join(path, "required"), "'required' must be an array of strings");
        if (props == s.end() || !props->contains(r.get<std::string>())) {
          fail(join(path, "required"), "the required property '" + r.get<std::string>() + "' is not in 'properties'");
        }
        required.insert(r.get<std::string>());
      }
    }
    if (props == s.end()) return map(s, extra == s.end() ? nullptr : &*extra, path, depth);
    // With properties, only they are written (strict), whatever additionalProperties allows
    // beside them: the outputs are valid either way, and the grammar cannot keep a listed key
    // from coming again as an extra one.
    if (!props->is_object()) fail(join(path, "properties"), "'properties' must be an object");
    for (const char* key : {"propertyNames", "patternProperties"}) {
      if (s.contains(key)) fail(join(path, key), std::string("'") + key + "' beside 'properties' is not supported (use it on a map)");
    }
    struct Property {
      Sequence member;  // "key": value
      bool required;
    };
    std::vector<Property> properties;
    for (const auto& [key, value] : props->items()) {
      const Sequence v = schema(value, join(join(path, "properties"), key), depth + 1);
      properties.push_back({concat({g_.literal(Json(key).dump()), g_.literal(": "), v}), required.count(key) > 0});
    }
    if (s.contains("minProperties") || s.contains("maxProperties")) return counted_members(s, properties, path);
    // rest[i][first]: the members from property i on; `first` when none was written yet (no
    // separator before the next). Built from the end; optional properties may be skipped.
    const size_t n = properties.size();
    std::vector<std::array<Sequence, 2>> rest(n + 1);
    for (size_t i = n; i-- > 0;) {
      for (int first = 0; first < 2; ++first) {
        std::vector<Sequence> alternatives;
        alternatives.push_back(concat({first ? Sequence{} : g_.literal(", "), properties[i].member, rest[i + 1][0]}));
        if (!properties[i].required) alternatives.push_back(rest[i + 1][first]);
        rest[i][first] = Grammar::ref(g_.rule_of("members_" + std::to_string(i), alternatives));
      }
    }
    return concat({g_.literal("{"), rest[0][1], g_.literal("}")});
  }

  // The members with minProperties / maxProperties: the listed properties are written at most
  // once each, so their number is the object's number of keys. State (i, c): properties i on,
  // c written; only states from which [min, max] is still reachable get a rule.
  template <typename Property>
  Sequence counted_members(const Json& s, const std::vector<Property>& properties, const std::string& path) {
    const auto n = static_cast<int64_t>(properties.size());
    const int64_t min = count(s, "minProperties", path, 0);
    const int64_t max = std::min(count(s, "maxProperties", path, n), n);
    std::vector<int64_t> required_from(static_cast<size_t>(n) + 1, 0);  // required ones in [i, n)
    for (int64_t i = n; i-- > 0;) required_from[i] = required_from[i + 1] + properties[static_cast<size_t>(i)].required;
    if (required_from[0] > max) fail(join(path, "maxProperties"), "'maxProperties' is below the number of required properties");
    if (min > n) fail(join(path, "minProperties"), "'minProperties' is above the number of properties (only they are written)");
    if (max < min) fail(path, "'maxProperties' is below 'minProperties'");
    auto feasible = [&](int64_t i, int64_t c) { return c + required_from[static_cast<size_t>(i)] <= max && c + (n - i) >= min; };
    std::map<std::pair<int64_t, int64_t>, Sequence> rest;  // (i, c) -> the members from i on
    for (int64_t i = n; i >= 0; --i) {
      for (int64_t c = std::min(i, max); c >= 0; --c) {
        if (!feasible(i, c)) continue;
        if (i == n) {
          rest[{i, c}] = Sequence{};
          continue;
        }
        const Property& p = properties[static_cast<size_t>(i)];
        std::vector<Sequence> alternatives;
        if (const auto next = rest.find({i + 1, c + 1}); next != rest.end()) {
          alternatives.push_back(concat({c == 0 ? Sequence{} : g_.literal(", "), p.member, next->second}));
        }
        if (const auto next = rest.find({i + 1, c}); !p.required && next != rest.end()) alternatives.push_back(next->second);
        rest[{i, c}] = Grammar::ref(g_.rule_of("members_" + std::to_string(i) + "_" + std::to_string(c), alternatives));
      }
    }
    return concat({g_.literal("{"), rest.at({0, 0}), g_.literal("}")});
  }

  // An object without properties: a map whose values are `extra` (null or true: any value;
  // false: none), with minProperties / maxProperties members. minProperties above 1 is refused:
  // the grammar cannot keep the keys distinct, and a key written twice counts once.
  Sequence map(const Json& s, const Json* extra, const std::string& path, int depth) {
    const int64_t min = count(s, "minProperties", path, 0);
    int64_t max = count(s, "maxProperties", path, -1);
    if (min > 1) {
      fail(join(path, "minProperties"), "'minProperties' above 1 is not supported: the grammar cannot keep the keys "
                                        "distinct, and a key written twice counts once");
    }
    // patternProperties: keys written by its one pattern (whole match), values by its schema; the
    // keys never fall to additionalProperties. Two patterns are refused: a key matching both
    // would owe both schemas.
    const auto patterns = s.find("patternProperties");
    if (patterns != s.end()) {
      if (!patterns->is_object() || patterns->size() != 1) {
        fail(join(path, "patternProperties"), "'patternProperties' with exactly one pattern is supported (a key "
                                              "matching two patterns would owe both schemas)");
      }
      if (s.contains("propertyNames")) fail(join(path, "propertyNames"), "'propertyNames' beside 'patternProperties' is not supported");
    }
    if (patterns == s.end() && extra != nullptr && extra->is_boolean() && !extra->get<bool>()) max = 0;
    if (max >= 0 && max < min) fail(path, "'maxProperties' (or 'additionalProperties': false) leaves no object");
    if (max == 0) return g_.literal("{}");
    const bool any_value = extra == nullptr || (extra->is_boolean() && extra->get<bool>());
    if (patterns == s.end() && any_value && min == 0 && max < 0 && !s.contains("propertyNames")) return object_any();
    Sequence key, value;
    if (patterns != s.end()) {
      // (A structured binding to *items().begin() would bind the proxy of a temporary iterator.)
      const auto first = patterns->begin();
      const std::string& regex = first.key();
      const Json& value_schema = first.value();
      const std::string pattern_path = join(join(path, "patternProperties"), regex);
      key = quoted_regex(regex, pattern_path);
      value = schema(value_schema, pattern_path, depth + 1);
    } else {
      key = key_names(s, path, depth);
      value = any_value ? value_any() : schema(*extra, join(path, "additionalProperties"), depth + 1);
    }
    const Sequence member = concat({key, g_.literal(": "), value});
    const int32_t rule = g_.add_rule("map");
    if (min == 0) g_.add_alternative(rule, g_.literal("{}"));
    if (max != 0) {
      const Sequence rest = g_.repeat(concat({g_.literal(", "), member}), 0, max < 0 ? -1 : max - 1, "map_members");
      g_.add_alternative(rule, concat({g_.literal("{"), member, rest, g_.literal("}")}));
    }
    return Grammar::ref(rule);
  }

  // A map's keys: any string, or those `propertyNames` allows (a schema of strings: its pattern,
  // format, lengths, enum or const).
  Sequence key_names(const Json& s, const std::string& path, int depth) {
    const auto names = s.find("propertyNames");
    if (names == s.end()) return string_any();
    const std::string names_path = join(path, "propertyNames");
    const bool strings = [&] {
      if (!names->is_object()) return false;
      for (const char* key : {"$ref", "anyOf", "oneOf", "allOf"}) {
        if (names->contains(key)) return false;
      }
      if (const auto e = names->find("enum"); e != names->end()) {
        return e->is_array() && std::all_of(e->begin(), e->end(), [](const Json& v) { return v.is_string(); });
      }
      if (const auto c = names->find("const"); c != names->end()) return c->is_string();
      if (const auto t = names->find("type"); t != names->end()) return *t == "string";
      return names->contains("pattern") || names->contains("format") || names->contains("minLength") ||
             names->contains("maxLength");
    }();
    if (!strings) {
      fail(names_path, "'propertyNames' must be a schema of strings (type string, a pattern, a format, lengths, or "
                       "an enum or const of strings)");
    }
    return schema(*names, names_path, depth + 1);
  }

  Sequence reference(const Json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) fail(path, "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return Grammar::ref(it->second);
    if (target.empty() || target[0] != '#') fail(path, "only local references ('#', '#/$defs/...') are supported, not '" + target + "'");
    const Json* node = pointer(target);
    if (node == nullptr) fail(path, "'" + target + "' points to nothing in the schema");
    // The rule exists before its body, so a schema may refer to itself (recursive structures).
    const int32_t rule = g_.add_rule("ref");
    refs_.emplace(target, rule);
    g_.add_alternative(rule, schema(*node, target, depth + 1));
    return Grammar::ref(rule);
  }

  // An array index of a JSON pointer (RFC 6901): "0" or digits without a leading zero; nullopt
  // for any other token, and for one too large to be an index of any array.
  static std::optional<size_t> array_index(const std::string& token) {
    if (token.empty() || token.size() > 18 || token.find_first_not_of("0123456789") != std::string::npos) return {};
    if (token.size() > 1 && token[0] == '0') return {};
    return static_cast<size_t>(std::stoull(token));
  }

  // The schema a local reference ("#", "#/$defs/a") points to in the document; null when none.
  const Json* pointer(const std::string& target) const {
    if (target.empty() || target[0] != '#') return nullptr;
    const Json* node = root_;
    if (target.size() > 1) {
      // ordered_json has its own pointer type; walk by the pointer's tokens.
      std::string rest = target.substr(1);
      size_t pos = 1;
      while (pos <= rest.size() && !rest.empty()) {
        const size_t next = rest.find('/', pos);
        std::string token = rest.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
        for (size_t k; (k = token.find("~1")) != std::string::npos;) token.replace(k, 2, "/");
        for (size_t k; (k = token.find("~0")) != std::string::npos;) token.replace(k, 2, "~");
        const std::optional<size_t> index = node->is_array() ? array_index(token) : std::nullopt;
        if (node->is_object() && node->contains(token)) {  // an object's key may be "00"
          node = &(*node)[token];
        } else if (index && *index < node->size()) {
          node = &(*node)[*index];
        } else {
          return nullptr;
        }
        if (next == std::string::npos) break;
        pos = next + 1;
      }
    }
    return node;
  }

  Grammar& g_;
  const Json* root_ = nullptr;  // the document being added ("$ref" targets)
  std::string what_;            // names it in messages
  std::map<std::string, int32_t> refs_;
  int64_t exclusive_steps_left_ = kMaxExclusiveSteps;  // check_exclusive's budget, shared by every oneOf
  int32_t char_ = -1, string_ = -1, integer_ = -1, number_ = -1, value_ = -1, object_ = -1, array_ = -1;
};

JsonSchemaBuilder::JsonSchemaBuilder(Grammar& grammar) : compiler_(std::make_unique<Compiler>(grammar)) {}
JsonSchemaBuilder::~JsonSchemaBuilder() = default;

Sequence JsonSchemaBuilder::value(const nlohmann::ordered_json& schema, const std::string& what) {
  return compiler_->add(schema, what);
}

Sequence JsonSchemaBuilder::any_object() { return compiler_->object_any(); }

Grammar json_schema_grammar(const nlohmann::ordered_json& schema) {
  Grammar g;
  const int32_t root = g.add_rule("root");
  g.add_alternative(root, JsonSchemaBuilder(g).value(schema, "json_schema"));
  g.set_root(root);
  return g;
}

Grammar json_object_grammar() {
  Grammar g;
  const int32_t root = g.add_rule("root");
  g.add_alternative(root, JsonSchemaBuilder(g).any_object());
  g.set_root(root);
  return g;
}

}  // namespace tachyon::structured
