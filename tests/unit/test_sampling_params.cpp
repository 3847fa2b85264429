// SamplingParams::validate: every field's range is checked at the door with a message naming the
// field, so the engine thread never sees a value it cannot serve.
#include <gtest/gtest.h>

#include <string>

#include "tachyon/base/check.h"
#include "tachyon/core/sampling_params.h"

namespace tachyon::engine {
using namespace tachyon::core;
namespace {

std::string error_of(const SamplingParams& params, int64_t vocab = 100) {
  try {
    params.validate(vocab);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SamplingParams, DefaultsAreValid) { EXPECT_EQ(error_of(SamplingParams{}), ""); }

TEST(SamplingParams, StopTokenIdsAreBoundedInCountAndRange) {
  SamplingParams p;
  p.stop_token_ids.assign(kMaxStopTokenIds, 7);
  EXPECT_EQ(error_of(p), "");
  p.stop_token_ids.push_back(7);
  EXPECT_NE(error_of(p).find("stop_token_ids: at most 1024 ids"), std::string::npos) << error_of(p);
  p.stop_token_ids = {100};
  EXPECT_NE(error_of(p).find("outside the vocabulary"), std::string::npos) << error_of(p);
}

TEST(SamplingParams, RangesNameTheField) {
  SamplingParams p;
  p.min_tokens = 20;
  p.max_tokens = 10;
  EXPECT_NE(error_of(p).find("min_tokens"), std::string::npos);
  p = SamplingParams{};
  p.logprobs = 21;
  EXPECT_NE(error_of(p).find("logprobs"), std::string::npos);
  p = SamplingParams{};
  p.n = 0;
  EXPECT_NE(error_of(p).find("n must be"), std::string::npos);
}

}  // namespace
}  // namespace tachyon::engine
