// When a grammar can keep oneOf's promise that exactly one branch matches. A context-free grammar
// of a oneOf is the union of its branches (what anyOf means); it cannot refuse a value because a
// second branch also accepts it. So the grammar is exact for a oneOf only when no output of one
// branch's grammar is valid under another branch, which this file proves, conservatively, from
// what json_schema.cpp emits (strict objects hold only their listed properties, integers stay in
// their range, const/enum are those values) and what the other branch requires (JSON Schema's
// rules, as Python's jsonschema applies them): distinct JSON types, distinct const/enum values, a
// required property the other branch never writes or a closed object refuses, a required property
// whose values are exclusive (a discriminator such as "kind": "circle" / "square"), disjoint
// integer ranges, array lengths or string lengths. Whatever it cannot prove counts as an overlap,
// and json_schema.cpp refuses that oneOf by name (a 400).
// Tested by the schema corpus (tests/unit/test_structured_schema_corpus.cpp: Python's jsonschema
// enforces oneOf on every output) and tests/unit/test_structured_one_of.cpp (nullable, 1 vs 1.0,
// recursion).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace tachyon::structured {

// A local "$ref" to its schema; null when it points to nothing.
using SchemaResolver = std::function<const nlohmann::ordered_json*(const std::string& ref)>;

// True when no value the grammar of schema `a` produces is valid under schema `b`. `steps_left`
// (optional): a budget the proof's steps are taken from, shared by the caller's proofs; once it
// is spent nothing more is proven (false).
bool never_valid_under(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b, const SchemaResolver& resolve,
                       int64_t* steps_left = nullptr);

// True when every pair of the oneOf `branches` is exclusive by a check of one probe per branch:
// all finite (const / enum) with no value in two, or a discriminated union (every branch writes
// only objects and requires one property with a const of its own). False: not shown so; the
// pairs are then checked one by one (never_valid_under), which costs branches^2.
bool exclusive_by_values(const nlohmann::ordered_json& branches, const SchemaResolver& resolve);

}  // namespace tachyon::structured
