// Values: Python float repr, str/repr of containers, equality and truthiness, json.dumps
// layout, and the Python string helpers (strip with char sets, split, code-point slicing).
#include "tachyon/tokenizer/jinja/value.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/json_dump.h"
#include "tachyon/tokenizer/jinja/py_string.h"

namespace tachyon::tokenizer::jinja {
namespace {

TEST(JinjaValues, FloatReprMatchesPython) {
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(2.5), "2.5");
  EXPECT_EQ(format_float(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(format_float(1e16), "1e+16");
  EXPECT_EQ(format_float(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(format_float(1e-5), "1e-05");
  EXPECT_EQ(format_float(0.0001), "0.0001");
  EXPECT_EQ(format_float(-1.5e-7), "-1.5e-07");
  EXPECT_EQ(format_float(1.2345678901234568e+17), "1.2345678901234568e+17");
  EXPECT_EQ(format_float(-0.0), "-0.0");
  EXPECT_EQ(format_float(INFINITY), "inf");
  EXPECT_EQ(format_float(NAN), "nan");
}

TEST(JinjaValues, StrAndRepr) {
  auto v = Value::from_json(nlohmann::ordered_json::parse(R"({"b": [1, "it's", null, true, 2.0], "a": {}})"));
  EXPECT_EQ(to_str(v), "{'b': [1, \"it's\", None, True, 2.0], 'a': {}}");
  EXPECT_EQ(to_str(Value::none()), "None");
  EXPECT_EQ(to_str(Value::undefined("x")), "");
  EXPECT_EQ(repr(Value::from_string("a\nb'\"")), "'a\\nb\\'\"'");
  EXPECT_EQ(to_str(Value::from_list({Value::from_int(1)}, true)), "(1,)");
}

TEST(JinjaValues, EqualityAndTruthinessArePython) {
  EXPECT_TRUE(equals(Value::from_int(1), Value::from_float(1.0)));
  EXPECT_TRUE(equals(Value::from_bool(true), Value::from_int(1)));
  EXPECT_FALSE(equals(Value::from_string("1"), Value::from_int(1)));
  EXPECT_TRUE(equals(Value::undefined("a"), Value::undefined("b")));
  EXPECT_FALSE(equals(Value::undefined("a"), Value::none()));
  EXPECT_FALSE(truthy(Value::from_string("")));
  EXPECT_FALSE(truthy(Value::from_list({})));
  EXPECT_FALSE(truthy(Value::from_float(0.0)));
  EXPECT_TRUE(truthy(Value::make_object("namespace")));
}

TEST(JinjaValues, JsonDumpMatchesPythonJsonDumps) {
  auto v = Value::from_json(nlohmann::ordered_json::parse(R"({"z": "é\"\n\u0001", "a": [1, 1.5, null, false, {}], "e": []})"));
  JsonDumpOptions plain;
  EXPECT_EQ(json_dump(v, plain), R"({"z": "é\"\n\u0001", "a": [1, 1.5, null, false, {}], "e": []})");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(json_dump(Value::from_string("é😀"), ascii), R"("\u00e9\ud83d\ude00")");
  JsonDumpOptions indented;
  indented.indent = "  ";
  indented.item_separator = ",";
  EXPECT_EQ(json_dump(Value::from_json(nlohmann::ordered_json::parse(R"({"a": [1], "b": {}})")), indented),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
  JsonDumpOptions sorted;
  sorted.sort_keys = true;
  EXPECT_EQ(json_dump(Value::from_json(nlohmann::ordered_json::parse(R"({"b": 1, "a": 2})")), sorted),
            R"({"a": 2, "b": 1})");
  EXPECT_THROW(json_dump(Value::undefined("'x' is undefined"), plain), Error);
}

TEST(JinjaValues, PythonStringHelpers) {
  EXPECT_EQ(py_strip("\n\n a \n", std::nullopt, true, true), "a");
  EXPECT_EQ(py_strip("xyaxy", std::string("yx"), true, false), "axy");
  EXPECT_EQ(py_strip("\u3000a\u00a0", std::nullopt, true, true), "a");  // Unicode whitespace
  EXPECT_EQ(py_split("a  b ", std::nullopt, -1, false), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(py_split("a,b,c", std::string(","), 1, true), (std::vector<std::string>{"a,b", "c"}));
  EXPECT_EQ(py_split("", std::string(","), -1, false), (std::vector<std::string>{""}));
  EXPECT_EQ(py_replace("ab", "", "-", -1), "-a-b-");
  EXPECT_EQ(utf8_length("héllo✅"), 6u);
  EXPECT_EQ(slice_indices(4, std::nullopt, std::nullopt, -1), (std::vector<int64_t>{3, 2, 1, 0}));
  EXPECT_EQ(slice_indices(4, -2, std::nullopt, std::nullopt), (std::vector<int64_t>{2, 3}));
  EXPECT_THROW(slice_indices(4, std::nullopt, std::nullopt, 0), Error);
}

}  // namespace
}  // namespace tachyon::tokenizer::jinja
