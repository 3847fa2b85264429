// The n-gram (prompt lookup) drafter on hand-made token sequences: which suffix length matches,
// which occurrence wins, what follows it and where the drafts are clipped, the search window,
// and a brute-force reference on random sequences; then the speculative config's resolution and
// refusals (engine/drafter.h).
#include <gtest/gtest.h>

#include <random>

#include "tachyon/base/check.h"
#include "tachyon/engine/drafter.h"
#include "tachyon/engine/ngram_drafter.h"

namespace tachyon::engine::ngram_drafter_test {

using Tokens = std::vector<int32_t>;

Tokens lookup(const Tokens& tokens, int32_t min_n, int32_t max_n, int32_t k, int64_t window = 4096) {
  return ngram_lookup(tokens, NgramOptions{.min_n = min_n, .max_n = max_n, .num_tokens = k, .window = window});
}

// The definition, literally: for n from max_n down to min_n, the most recent earlier occurrence
// (ending before the last token) of the last n tokens, anywhere in the sequence; k tokens of what
// followed it, the text repeating with the occurrence's period past its end.
Tokens reference(const Tokens& t, int32_t min_n, int32_t max_n, int32_t k) {
  const int64_t size = static_cast<int64_t>(t.size());
  for (int64_t n = max_n; n >= min_n; --n) {
    if (n >= size) continue;
    for (int64_t end = size - 2; end >= n - 1; --end) {
      bool match = true;
      for (int64_t i = 0; i < n && match; ++i) match = t[static_cast<size_t>(end - i)] == t[static_cast<size_t>(size - 1 - i)];
      if (!match) continue;
      Tokens drafts;
      for (int64_t i = 0; i < k; ++i) drafts.push_back(t[static_cast<size_t>(end + 1 + i % (size - end - 1))]);
      return drafts;
    }
  }
  return {};
}

TEST(NgramLookup, ProposesWhatFollowedTheLongestSuffixThatRecurs) {
  const Tokens t = {10, 11, 12, 13, 50, 51, 52, 7, 11, 12, 13};
  EXPECT_EQ(lookup(t, 1, 3, 3), (Tokens{50, 51, 52}));
  EXPECT_EQ(lookup(t, 3, 3, 2), (Tokens{50, 51}));
  EXPECT_EQ(lookup(t, 1, 4, 3), (Tokens{50, 51, 52}));  // 4 tokens do not recur; 3 do
  EXPECT_EQ(lookup(t, 4, 5, 3), Tokens{});              // nothing of 4 or more recurs
}

TEST(NgramLookup, ALongerMatchBeatsAMoreRecentShorterOne) {
  // "1 2 3" recurs at the start; "3" alone recurs later, after 9.
  const Tokens t = {1, 2, 3, 20, 21, 9, 3, 30, 31, 1, 2, 3};
  EXPECT_EQ(lookup(t, 1, 3, 3), (Tokens{20, 21, 9}));
  EXPECT_EQ(lookup(t, 1, 2, 3), (Tokens{20, 21, 9}));
  EXPECT_EQ(lookup(t, 1, 1, 3), (Tokens{30, 31, 1}));  // n = 1: the most recent "3"
}

TEST(NgramLookup, TheMostRecentOfEqualMatchesWins) {
  const Tokens t = {5, 6, 100, 5, 6, 200, 5, 6};
  EXPECT_EQ(lookup(t, 2, 2, 2), (Tokens{200, 5}));
  EXPECT_EQ(lookup(t, 1, 4, 2), (Tokens{200, 5}));
}

TEST(NgramLookup, PastTheEndTheMatchedPeriodRepeats) {
  const Tokens t = {5, 6, 100, 5, 6, 200, 5, 6};
  EXPECT_EQ(lookup(t, 2, 2, 3), (Tokens{200, 5, 6}));
  // The match ends 3 tokens before the end: "200 5 6" is taken to go on.
  EXPECT_EQ(lookup(t, 2, 2, 8), (Tokens{200, 5, 6, 200, 5, 6, 200, 5}));
  EXPECT_EQ(lookup(t, 2, 2, 1), (Tokens{200}));
}

TEST(NgramLookup, AnOccurrenceMayOverlapTheSuffix) {
  EXPECT_EQ(lookup({7, 7, 7, 7}, 1, 3, 4), (Tokens{7, 7, 7, 7}));  // "7 7 7" ends one before the end
  EXPECT_EQ(lookup({1, 2, 1, 2, 1, 2}, 1, 4, 4), (Tokens{1, 2, 1, 2}));  // "2 1 2 1 2"... capped at 4
  EXPECT_EQ(lookup({1, 2, 1, 2, 1, 2}, 4, 4, 4), (Tokens{1, 2, 1, 2}));
  EXPECT_EQ(lookup({1, 2, 1, 2, 1, 2}, 5, 5, 4), Tokens{});      // 5 would need a 6th token before
}

TEST(NgramLookup, NoMatchNoDrafts) {
  EXPECT_EQ(lookup({1, 2, 3, 4, 5}, 1, 4, 4), Tokens{});
  EXPECT_EQ(lookup({1, 2, 3, 9, 3}, 2, 4, 4), Tokens{});  // "3" recurs, "9 3"/"2 3" do not
  EXPECT_EQ(lookup({1, 2, 3, 9, 3}, 1, 4, 4), (Tokens{9, 3, 9, 3}));
  EXPECT_EQ(lookup({}, 1, 4, 4), Tokens{});
  EXPECT_EQ(lookup({5}, 1, 4, 4), Tokens{});
  EXPECT_EQ(lookup({5, 5}, 1, 4, 4), (Tokens{5, 5, 5, 5}));
  EXPECT_EQ(lookup({5, 5}, 2, 4, 4), Tokens{});
}

TEST(NgramLookup, OccurrencesOutsideTheWindowAreNotSeen) {
  Tokens t = {1, 2, 50};
  for (int32_t i = 0; i < 100; ++i) t.push_back(1000 + i);
  t.push_back(1);
  t.push_back(2);
  // The occurrence "1 2" ends at index 1; the last token is at index 104: 103 tokens before it.
  EXPECT_EQ(lookup(t, 2, 2, 2, /*window=*/103), (Tokens{50, 1000}));
  EXPECT_EQ(lookup(t, 2, 2, 2, /*window=*/102), Tokens{});
  EXPECT_EQ(lookup(t, 2, 2, 2, /*window=*/10), Tokens{});
}

// Small alphabets, so that matches of every length happen; a window as long as the sequence
// must give exactly the definition.
TEST(NgramLookup, EqualsTheDefinitionOnRandomSequences) {
  std::mt19937 rng(17);
  int64_t proposed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int32_t alphabet = 2 + static_cast<int32_t>(rng() % 6);
    Tokens t(rng() % 60);
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(alphabet));
    const int32_t min_n = 1 + static_cast<int32_t>(rng() % 4);
    const int32_t max_n = min_n + static_cast<int32_t>(rng() % 4);
    const int32_t k = 1 + static_cast<int32_t>(rng() % 6);
    const Tokens got = lookup(t, min_n, max_n, k);
    ASSERT_EQ(got, reference(t, min_n, max_n, k)) << "trial " << trial;
    proposed += !got.empty();
  }
  EXPECT_GT(proposed, 1000);
}

TEST(NgramDrafter, ProposesTheLookupAndChecksItsOptions) {
  NgramDrafter drafter({.min_n = 1, .max_n = 2, .num_tokens = 2});
  const Tokens t = {5, 6, 100, 5, 6, 200, 5, 6};
  EXPECT_EQ(drafter.propose(0, t), (Tokens{200, 5}));
  EXPECT_THROW(NgramDrafter({.min_n = 0, .max_n = 2, .num_tokens = 2}), Error);
  EXPECT_THROW(NgramDrafter({.min_n = 3, .max_n = 2, .num_tokens = 2}), Error);
  EXPECT_THROW(NgramDrafter({.min_n = 1, .max_n = 2, .num_tokens = 0}), Error);
}

std::string error_of_config(const core::SpeculativeConfig& config) {
  try {
    resolve_speculative_config(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SpeculativeConfig, UnsetNgramSizesResolveAsVllmDoes) {
  core::SpeculativeConfig c{.method = "ngram", .num_speculative_tokens = 3};
  core::SpeculativeConfig r = resolve_speculative_config(c);
  EXPECT_EQ(r.ngram_min, 5);
  EXPECT_EQ(r.ngram_max, 5);
  c.ngram_max = 3;
  r = resolve_speculative_config(c);
  EXPECT_EQ(r.ngram_min, 3);
  EXPECT_EQ(r.ngram_max, 3);
  c.ngram_max = 0;
  c.ngram_min = 2;
  r = resolve_speculative_config(c);
  EXPECT_EQ(r.ngram_min, 2);
  EXPECT_EQ(r.ngram_max, 2);
  c.ngram_max = 4;
  r = resolve_speculative_config(c);
  EXPECT_EQ(r.ngram_min, 2);
  EXPECT_EQ(r.ngram_max, 4);
  EXPECT_NE(make_drafter(c), nullptr);
  EXPECT_EQ(make_drafter({}), nullptr);
  EXPECT_FALSE(resolve_speculative_config({}).enabled());
}

TEST(SpeculativeConfig, RefusalsNameTheFlagAndWhatIsMissing) {
  EXPECT_NE(error_of_config({.method = "draft", .num_speculative_tokens = 3}).find("needs --draft-model DIR"),
            std::string::npos);
  EXPECT_NE(error_of_config({.method = "ngram", .num_speculative_tokens = 3, .draft_model = "d"})
                .find("--draft-model needs --speculative-method draft"),
            std::string::npos);
  EXPECT_NE(error_of_config({.method = "draft", .num_speculative_tokens = 3, .ngram_min = 2, .draft_model = "d"})
                .find("--ngram-min and --ngram-max are for --speculative-method ngram"),
            std::string::npos);
  EXPECT_NE(error_of_config({.method = "ngram", .num_speculative_tokens = 3, .forced_acceptance = 1.5f})
                .find("--speculative-forced-acceptance must be in [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of_config({.forced_acceptance = 0.5f}).find("need --speculative-method"), std::string::npos);
  // mtp: k and nothing else (the modules are the served model's own).
  EXPECT_EQ(error_of_config({.method = "mtp", .num_speculative_tokens = 3}), "");
  EXPECT_NE(error_of_config({.method = "mtp"}).find("--speculative-method mtp needs --num-speculative-tokens"),
            std::string::npos);
  EXPECT_NE(error_of_config({.method = "mtp", .num_speculative_tokens = 3, .ngram_max = 2})
                .find("--ngram-min and --ngram-max are for --speculative-method ngram"),
            std::string::npos);
  EXPECT_NE(error_of_config({.method = "mtp", .num_speculative_tokens = 3, .draft_model = "d"})
                .find("--draft-model needs --speculative-method draft"),
            std::string::npos);
  EXPECT_NE(error_of_config({.method = "eagle", .num_speculative_tokens = 3})
                .find("unknown method 'eagle' (ngram, draft or mtp)"),
            std::string::npos);
  EXPECT_NE(error_of_config({.method = "ngram"}).find("needs --num-speculative-tokens"), std::string::npos);
  EXPECT_NE(error_of_config({.method = "ngram", .num_speculative_tokens = 17}).find("1..16"), std::string::npos);
  EXPECT_NE(error_of_config({.method = "ngram", .num_speculative_tokens = 2, .ngram_min = 4, .ngram_max = 2})
                .find("--ngram-min 4 and --ngram-max 2"),
            std::string::npos);
  EXPECT_NE(error_of_config({.num_speculative_tokens = 2}).find("need --speculative-method"), std::string::npos);
}

}  // namespace tachyon::engine::ngram_drafter_test
