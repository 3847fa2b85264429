// Differential test of the Jinja interpreter against Python jinja2: every small feature
// template of tests/data/chat/jinja_cases.json must render exactly as jinja2 rendered it in
// expected_jinja2_cases.json (made by tools/chat_reference_jinja2.py --cases, with the
// environment transformers uses), and must throw where jinja2 raised.
//   ctest --test-dir build-jinja -R jinja_conformance --output-on-failure
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/tokenizer/jinja/template.h"

namespace tachyon::tokenizer::jinja {
namespace {

const std::filesystem::path kData = std::filesystem::path(TACHYON_TEST_DATA) / "chat";

TEST(JinjaConformance, MatchesJinja2OnFeatureCases) {
  auto cases = nlohmann::ordered_json::parse(read_file(kData / "jinja_cases.json"));
  auto expected = nlohmann::ordered_json::parse(read_file(kData / "expected_jinja2_cases.json"));
  const auto& results = expected.at("results");
  ASSERT_EQ(cases.size(), results.size()) << "regenerate expected_jinja2_cases.json";
  int identical = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = cases[i].at("name");
    const auto& want = results[i];
    ASSERT_EQ(want.at("name").get<std::string>(), name);
    ValueDict vars;
    for (const auto& [k, v] : cases[i].at("vars").items()) vars.set(k, Value::from_json(v));
    try {
      std::string got = Template(cases[i].at("template").get<std::string>()).render(vars);
      if (want.contains("error")) {
        ADD_FAILURE() << name << ": jinja2 raised (" << want["error"] << ") but we rendered "
                      << nlohmann::json(got).dump();
      } else if (got != want.at("rendered").get<std::string>()) {
        ADD_FAILURE() << name << ":\n  got:  " << nlohmann::json(got).dump()
                      << "\n  want: " << want.at("rendered").dump();
      } else {
        ++identical;
      }
    } catch (const Error& e) {
      if (want.contains("error")) ++identical;
      else ADD_FAILURE() << name << ": threw " << e.what();
    }
  }
  std::cout << "[jinja_conformance] " << identical << "/" << cases.size() << " identical to jinja2\n";
}

}  // namespace
}  // namespace tachyon::tokenizer::jinja
