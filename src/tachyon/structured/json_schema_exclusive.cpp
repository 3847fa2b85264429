#include "tachyon/structured/json_schema_exclusive.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tachyon/structured/schema_bounds.h"

namespace tachyon::structured {
namespace {

using Json = nlohmann::ordered_json;

// Past this many nested steps (recursive schemas) nothing is proven: an overlap is assumed.
constexpr int kMaxDepth = 24;
// And past this many steps in all (branches of recursive schemas multiply).
constexpr int kMaxSteps = 20000;
constexpr double kInf = std::numeric_limits<double>::infinity();

// JSON types as bits; integer and number share one (an integer is a number, 1.0 an integer).
enum : unsigned { kObject = 1, kArray = 2, kString = 4, kNumber = 8, kBoolean = 16, kNull = 32, kAll = 63 };

unsigned type_bit(const std::string& t) {
  if (t == "object") return kObject;
  if (t == "array") return kArray;
  if (t == "string") return kString;
  if (t == "integer" || t == "number") return kNumber;
  if (t == "boolean") return kBoolean;
  if (t == "null") return kNull;
  return kAll;
}

unsigned value_type(const Json& v) {
  if (v.is_object()) return kObject;
  if (v.is_array()) return kArray;
  if (v.is_string()) return kString;
  if (v.is_number()) return kNumber;
  if (v.is_boolean()) return kBoolean;
  return kNull;
}

std::set<std::string> names(const Json& s, const char* key) {
  std::set<std::string> out;
  const auto it = s.find(key);
  if (it == s.end()) return out;
  if (it->is_string()) out.insert(it->get<std::string>());
  if (it->is_array()) {
    for (const Json& n : *it) out.insert(n.is_string() ? n.get<std::string>() : n.dump());
  } else if (it->is_object()) {
    for (const auto& [k, v] : it->items()) out.insert(k);
  }
  return out;
}

// Which schema an array's items follow: a tuple's prefix schemas (prefixItems, or draft 4's
// items as an array) and, after them, `rest` (items, or additionalItems); with no prefix, `rest`
// (items) is every item's. Null where absent.
struct ItemSchemas {
  const Json* prefix = nullptr;
  const Json* rest = nullptr;
};
ItemSchemas item_schemas(const Json& s) {
  const auto at = [&](const char* key) {
    const auto it = s.find(key);
    return it == s.end() ? nullptr : &*it;
  };
  const Json *prefix = at("prefixItems"), *items = at("items");
  if (prefix != nullptr && prefix->is_array()) return {prefix, items};
  if (items != nullptr && items->is_array()) return {items, at("additionalItems")};
  return {nullptr, items};
}

// additionalProperties false, and no patternProperties (whose keys it does not refuse).
bool closed(const Json& s) {
  const auto it = s.find("additionalProperties");
  return it != s.end() && it->is_boolean() && !it->get<bool>() && !s.contains("patternProperties");
}

// [lo, hi] of a count keyword pair (minItems/maxItems, minLength/maxLength).
std::pair<double, double> counts(const Json& s, const char* min, const char* max) {
  const auto lo = s.find(min), hi = s.find(max);
  return {lo != s.end() && lo->is_number() ? lo->get<double>() : 0.0, hi != s.end() && hi->is_number() ? hi->get<double>() : kInf};
}

// [lo, hi] of an array's length: minItems / maxItems, and a tuple closed by `items` (or
// `additionalItems`) false holds at most its prefix.
std::pair<double, double> item_counts(const Json& s) {
  auto out = counts(s, "minItems", "maxItems");
  const ItemSchemas items = item_schemas(s);
  if (items.prefix != nullptr && items.rest != nullptr && items.rest->is_boolean() && !items.rest->get<bool>()) {
    out.second = std::min(out.second, static_cast<double>(items.prefix->size()));
  }
  return out;
}

// The integers in s's bounds, as json_schema.cpp rounds them (a fractional bound inward).
std::pair<double, double> integer_bounds(const Json& s) {
  double lo = -kInf, hi = kInf;
  for_each_bound(s, [&](const char*, bool lower, bool exclusive, const Json& value) {
    if (!value.is_number()) return;
    const double x = value.get<double>();
    if (lower) lo = std::max(lo, exclusive ? std::floor(x) + 1 : std::ceil(x));
    else hi = std::min(hi, exclusive ? std::ceil(x) - 1 : std::floor(x));
  });
  return {lo, hi};
}

bool disjoint(std::pair<double, double> a, std::pair<double, double> b) { return a.second < b.first || b.second < a.first; }

size_t codepoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// "nullable": true adds null; json_schema.cpp refuses a value other than true or false.
bool nullable(const Json& s) {
  const auto it = s.find("nullable");
  return it != s.end() && it->is_boolean() && it->get<bool>();
}

// Equality as JSON Schema's enum and const use it: numbers by value (1 and 1.0), objects by
// members whatever their order, true never equal to 1. Two integers compare exactly; an integer
// and a fraction as doubles, which can only call more values equal (refuse more).
bool same_value(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_number_integer() && b.is_number_integer()) {
      if (a.is_number_unsigned() == b.is_number_unsigned()) return a == b;
      const Json& s = a.is_number_unsigned() ? b : a;
      const Json& u = a.is_number_unsigned() ? a : b;
      return s.get<int64_t>() >= 0 && static_cast<uint64_t>(s.get<int64_t>()) == u.get<uint64_t>();
    }
    return a.get<double>() == b.get<double>();
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same_value(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, x] : a.items()) {
      const auto it = b.find(key);
      if (it == b.end() || !same_value(x, *it)) return false;
    }
    return true;
  }
  return a == b;
}

// Equal for values same_value calls equal: numbers hash by their double, objects' members add up.
size_t value_hash(const Json& v) {
  if (v.is_number()) {
    const double x = v.get<double>();
    return std::hash<double>{}(x == 0 ? 0.0 : x);  // -0.0 == 0
  }
  if (v.is_string()) return std::hash<std::string>{}(v.get_ref<const std::string&>());
  if (v.is_array()) {
    size_t h = 0x51ED27;
    for (const Json& x : v) h = h * 1000003 ^ value_hash(x);
    return h;
  }
  if (v.is_object()) {
    size_t h = 0x0B1EC7;
    for (const auto& [key, x] : v.items()) h += std::hash<std::string>{}(key) * 31 ^ value_hash(x);
    return h;
  }
  return static_cast<size_t>(v.type()) * 0x9E3779B9 + (v.is_boolean() && v.get<bool>());
}

// The values of a const or an enum, in order and as a hash set: whether two enums share a value,
// or one holds a value, costs a probe per value instead of a comparison per pair (10 oneOf
// branches of 5000 values took 15 s pairwise).
struct ValueSet {
  struct Hash {
    size_t operator()(const Json* v) const { return value_hash(*v); }
  };
  struct Equal {
    bool operator()(const Json* a, const Json* b) const { return same_value(*a, *b); }
  };
  std::vector<const Json*> values;
  std::unordered_set<const Json*, Hash, Equal> set;
  bool contains(const Json& v) const { return set.count(&v) > 0; }
};

class Prover {
 public:
  explicit Prover(const SchemaResolver& resolve, int64_t* steps_left = nullptr) : resolve_(resolve), steps_left_(steps_left) {}

  // Every pair of `branches` exclusive, shown with one probe per branch; false: not shown so (the
  // caller tries the pairs). Two ways: every branch finite (const or enum) and no value in two of
  // them; or every branch writes only objects and requires one property whose schema is a const,
  // no const in two (a discriminated union, as Pydantic writes one): branch i's outputs carry its
  // const there, which branch j's const refuses.
  bool exclusive_by_values(const Json& branches) {
    std::vector<const Json*> resolved;
    for (const Json& branch : branches) {
      const Json* r = unwrap(&branch);
      if (r == nullptr || !r->is_object()) return false;
      resolved.push_back(r);
    }
    if (resolved.empty()) return false;
    using Seen = std::unordered_set<const Json*, ValueSet::Hash, ValueSet::Equal>;
    if (std::all_of(resolved.begin(), resolved.end(), [&](const Json* r) { return finite(*r) != nullptr; })) {
      Seen seen;
      for (const Json* r : resolved) {
        for (const Json* v : finite(*r)->values) {
          if (!seen.insert(v).second) return false;
        }
      }
      return true;
    }
    for (const std::string& p : names(*resolved.front(), "required")) {
      Seen seen;
      bool discriminates = true;
      for (const Json* r : resolved) {
        const Json* value = discriminator(*r, p);
        if (value == nullptr || !seen.insert(value).second) {
          discriminates = false;
          break;
        }
      }
      if (discriminates) return true;
    }
    return false;
  }

  // No output of a's grammar is valid under b.
  // Every answer "false" means "not proven", so a cut-short search only refuses more.
  bool never_valid(const Json& a_in, const Json& b_in, int depth) {
    const Json* a = unwrap(&a_in);
    const Json* b = unwrap(&b_in);
    if (a == nullptr || b == nullptr || depth > kMaxDepth || !step()) return false;
    if (b->is_boolean()) return !b->get<bool>();
    if (!a->is_object() || !b->is_object()) return false;
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const auto it = a->find(key); it != a->end() && it->is_array()) {
        for (const Json& branch : *it) {
          if (!never_valid(branch, *b, depth + 1)) return false;
        }
        return true;
      }
    }
    for (const char* key : {"anyOf", "oneOf"}) {  // valid under b: valid under one of its branches
      if (const auto it = b->find(key); it != b->end() && it->is_array()) {
        for (const Json& branch : *it) {
          if (!never_valid(*a, branch, depth + 1)) return false;
        }
        return true;
      }
    }
    const ValueSet* a_values = finite(*a);
    const ValueSet* b_values = finite(*b);
    if (a_values != nullptr && b_values != nullptr) {  // both finite: disjoint sets
      const bool a_smaller = a_values->values.size() <= b_values->values.size();
      const ValueSet& probes = a_smaller ? *a_values : *b_values;
      const ValueSet& other = a_smaller ? *b_values : *a_values;
      for (const Json* v : probes.values) {
        if (other.contains(*v)) return false;
      }
      return true;
    }
    if (a_values != nullptr) {
      for (const Json* v : a_values->values) {
        if (!invalid(*v, *b, depth + 1)) return false;
      }
      return true;
    }
    if (b_values != nullptr) {
      for (const Json* v : b_values->values) {  // a's grammar emits only values valid under a
        if (!invalid(*v, *a, depth + 1)) return false;
      }
      return true;
    }
    const unsigned both = emitted_types(*a) & valid_types(*b);
    if ((both & kObject) && !objects_never_valid(*a, *b, depth)) return false;
    if ((both & kArray) && !arrays_never_valid(*a, *b, depth)) return false;
    if ((both & kString) && !strings_never_valid(*a, *b)) return false;
    if ((both & kNumber) && !numbers_never_valid(*a, *b)) return false;
    return (both & (kBoolean | kNull)) == 0;
  }

 private:
  // Follows "$ref" and a one-member allOf (as json_schema.cpp does); null when unresolved.
  const Json* unwrap(const Json* s) const {
    for (int hops = 0; s != nullptr && s->is_object() && hops < 64; ++hops) {
      if (const auto it = s->find("$ref"); it != s->end() && it->is_string()) {
        s = resolve_(it->get<std::string>());
      } else if (const auto all = s->find("allOf"); all != s->end() && all->is_array() && all->size() == 1) {
        s = &(*all)[0];
      } else {
        return s;
      }
    }
    return s != nullptr && s->is_object() ? nullptr : s;  // a reference cycle: nothing proven
  }

  // The const that s's outputs always carry under property p (s writes only objects and requires
  // p, whose schema is a const); null when it has none.
  const Json* discriminator(const Json& s, const std::string& p) const {
    if (emitted_types(s) != kObject || names(s, "required").count(p) == 0) return nullptr;
    const auto props = s.find("properties");
    if (props == s.end() || !props->is_object()) return nullptr;
    const auto property = props->find(p);
    if (property == props->end()) return nullptr;
    const Json* schema = unwrap(&*property);
    if (schema == nullptr || !schema->is_object()) return nullptr;
    const auto c = schema->find("const");
    return c == schema->end() ? nullptr : &*c;
  }

  // s's const or enum values (built once per schema node); null when s has neither.
  const ValueSet* finite(const Json& s) {
    if (const auto found = finite_.find(&s); found != finite_.end()) return found->second.get();
    std::unique_ptr<ValueSet> out;
    auto add = [&](const Json& v) {
      if (!out) out = std::make_unique<ValueSet>();
      out->values.push_back(&v);
      out->set.insert(&v);
    };
    if (const auto it = s.find("const"); it != s.end()) {
      add(*it);
    } else if (const auto e = s.find("enum"); e != s.end() && e->is_array()) {
      for (const Json& v : *e) add(v);
    }
    return finite_.emplace(&s, std::move(out)).first->second.get();
  }

  // The types json_schema.cpp's grammar of s writes (its type inference; "nullable" adds null).
  unsigned emitted_types(const Json& s) const {
    unsigned out = 0;
    if (const auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) out = type_bit(it->get<std::string>());
      for (const Json& t : it->is_array() ? *it : Json::array()) out |= t.is_string() ? type_bit(t.get<std::string>()) : kAll;
      if (nullable(s)) out |= kNull;
      return out;
    }
    if (s.contains("properties") || s.contains("additionalProperties") || s.contains("minProperties") ||
        s.contains("maxProperties") || s.contains("propertyNames") || s.contains("patternProperties")) {
      return kObject;
    }
    if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) return kArray;
    if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") || s.contains("format")) return kString;
    return kAll;
  }

  // The types a validator may accept under s: its "type", else any (other keywords restrict
  // only values of their own type). "nullable" adds null: a JSON-schema validator ignores it, but
  // the grammar writes null for it, and this answer also says what a schema's grammar may write.
  static unsigned valid_types(const Json& s) {
    const auto it = s.find("type");
    if (it == s.end()) return kAll;
    unsigned out = it->is_string() ? type_bit(it->get<std::string>()) : 0;
    for (const Json& t : it->is_array() ? *it : Json::array()) out |= t.is_string() ? type_bit(t.get<std::string>()) : kAll;
    if (nullable(s)) out |= kNull;
    return out == 0 ? kAll : out;
  }

  static bool only_integers(const Json& s) {
    const std::set<std::string> types = names(s, "type");
    return types.count("integer") > 0 && types.count("number") == 0;
  }

  // a writes only its listed properties (strict), its required ones always.
  bool objects_never_valid(const Json& a, const Json& b, int depth) {
    const auto a_props = a.find("properties");
    if (a_props == a.end() || !a_props->is_object()) return closed(a) && !names(b, "required").empty();  // {} or any object
    const std::set<std::string> a_keys = names(a, "properties"), a_required = names(a, "required");
    const std::set<std::string> b_keys = names(b, "properties"), b_required = names(b, "required");
    for (const std::string& p : b_required) {
      if (a_keys.count(p) == 0) return true;  // a never writes it
    }
    for (const std::string& p : a_required) {
      if (closed(b) && b_keys.count(p) == 0) return true;  // b refuses it
      if (b_keys.count(p) > 0 && never_valid((*a_props)[p], b["properties"][p], depth + 1)) return true;
    }
    return false;
  }

  bool arrays_never_valid(const Json& a, const Json& b, int depth) {
    const auto a_len = item_counts(a);
    if (disjoint(a_len, item_counts(b))) return true;
    // A tuple's first items follow other schemas than `items`.
    if (item_schemas(a).prefix != nullptr || item_schemas(b).prefix != nullptr) return false;
    const auto a_items = a.find("items"), b_items = b.find("items");
    return a_len.first >= 1 && a_items != a.end() && b_items != b.end() && never_valid(*a_items, *b_items, depth + 1);
  }

  static bool strings_never_valid(const Json& a, const Json& b) {
    if (a.contains("pattern") || a.contains("format")) return false;  // lengths unknown
    return disjoint(counts(a, "minLength", "maxLength"), counts(b, "minLength", "maxLength"));
  }

  static bool numbers_never_valid(const Json& a, const Json& b) {
    if (only_integers(a) && disjoint(integer_bounds(a), integer_bounds(b))) return true;
    // The values in a's bounds (as doubles: what its grammar writes reads as one in range) and
    // those b's bounds allow share none.
    const NumberInterval x = number_interval(a), y = number_interval(b);
    auto below = [](const std::optional<NumberBound>& hi, const std::optional<NumberBound>& lo) {
      return hi && lo && (hi->value < lo->value || (hi->value == lo->value && (hi->exclusive || lo->exclusive)));
    };
    return below(x.hi, y.lo) || below(y.hi, x.lo);
  }

  // v is provably invalid under s.
  bool invalid(const Json& v, const Json& s_in, int depth) {
    const Json* s = unwrap(&s_in);
    if (s == nullptr || depth > kMaxDepth || !step()) return false;
    if (s->is_boolean()) return !s->get<bool>();
    if (!s->is_object()) return false;
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const auto it = s->find(key); it != s->end() && it->is_array()) {
        for (const Json& branch : *it) {
          if (!invalid(v, branch, depth + 1)) return false;
        }
        return true;
      }
    }
    if (const ValueSet* values = finite(*s)) return !values->contains(v);
    if ((value_type(v) & valid_types(*s)) == 0) return true;
    if (v.is_number()) {
      const double x = v.get<double>();
      const bool integer = x == std::floor(x);
      if (only_integers(*s) && !integer) return true;
      if (integer && (names(*s, "type").count("integer") > 0) && disjoint({x, x}, integer_bounds(*s))) return true;
    }
    if (v.is_string()) {
      const double n = static_cast<double>(codepoints(v.get<std::string>()));
      if (disjoint({n, n}, counts(*s, "minLength", "maxLength"))) return true;
    }
    if (v.is_array()) {
      const double n = static_cast<double>(v.size());
      if (disjoint({n, n}, item_counts(*s))) return true;
      const ItemSchemas items = item_schemas(*s);
      for (size_t i = 0; i < v.size(); ++i) {
        const Json* item = items.prefix != nullptr && i < items.prefix->size() ? &(*items.prefix)[i] : items.rest;
        if (item != nullptr && invalid(v[i], *item, depth + 1)) return true;
      }
    }
    if (v.is_object()) {
      for (const std::string& p : names(*s, "required")) {
        if (!v.contains(p)) return true;
      }
      const auto props = s->find("properties");
      for (const auto& [k, x] : v.items()) {
        const bool listed = props != s->end() && props->is_object() && props->contains(k);
        if (!listed && closed(*s)) return true;
        if (listed && invalid(x, (*props)[k], depth + 1)) return true;
      }
    }
    return false;
  }

  // One more step of the proof, within its own bound and the caller's budget.
  bool step() {
    if (steps_left_ != nullptr && --*steps_left_ < 0) return false;
    return ++steps_ <= kMaxSteps;
  }

  const SchemaResolver& resolve_;
  int64_t* steps_left_;  // the caller's budget (may be null)
  int steps_ = 0;
  std::unordered_map<const Json*, std::unique_ptr<ValueSet>> finite_;  // by schema node
};

}  // namespace

bool never_valid_under(const Json& a, const Json& b, const SchemaResolver& resolve, int64_t* steps_left) {
  return Prover(resolve, steps_left).never_valid(a, b, 0);
}

bool exclusive_by_values(const Json& branches, const SchemaResolver& resolve) {
  return branches.is_array() && Prover(resolve).exclusive_by_values(branches);
}

}  // namespace tachyon::structured
