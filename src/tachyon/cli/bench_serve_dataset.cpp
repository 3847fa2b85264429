// Random prompts and arrival times for `bench serve` (see bench_serve_dataset.h). Token ids are
// drawn uniformly in [0, vocab_size) and sent as ids, so the server does no tokenization and
// the prompt length is exact; text prompts are random words, about one token each.
#include "tachyon/cli/bench_serve_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "tachyon/base/check.h"

namespace tachyon::cli {
namespace {

// Common short English words: most tokenizers give each one token (with its leading space).
constexpr std::array<const char*, 64> kWords = {
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "are", "with", "as", "at", "be", "by", "this",
    "from", "or", "have", "an", "they", "which", "one", "you", "were", "her", "all", "she", "there", "would",
    "their", "we", "him", "been", "has", "when", "who", "will", "more", "no", "if", "out", "so", "said", "what",
    "up", "its", "about", "into", "than", "them", "can", "only", "other", "new", "some", "could", "time",
    "these", "two", "may", "then", "do", "first"};

std::vector<int32_t> random_ids(std::mt19937_64& gen, int64_t vocab_size, int32_t n) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab_size - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = token(gen);
  return ids;
}

std::string random_words(std::mt19937_64& gen, int32_t n) {
  std::uniform_int_distribution<size_t> word(0, kWords.size() - 1);
  std::string text;
  for (int32_t i = 0; i < n; ++i) {
    if (i > 0) text += ' ';
    text += kWords[word(gen)];
  }
  return text;
}

}  // namespace

std::pair<int32_t, int32_t> length_range(int32_t len, double range_ratio) {
  const auto low = static_cast<int32_t>(std::floor(len * (1.0 - range_ratio)));
  const auto high = static_cast<int32_t>(std::ceil(len * (1.0 + range_ratio)));
  return {std::max(1, low), std::max(1, high)};
}

std::vector<BenchRequest> make_random_requests(const RandomDatasetOptions& options) {
  TACHYON_CHECK(options.range_ratio >= 0.0 && options.range_ratio < 1.0)
      << "--random-range-ratio must be in [0, 1), got " << options.range_ratio;
  TACHYON_CHECK(options.vocab_size > 0 && options.vocab_size <= std::numeric_limits<int32_t>::max())
      << "--vocab-size must be positive, got " << options.vocab_size;
  std::mt19937_64 gen(options.seed);
  const auto [input_low, input_high] = length_range(options.input_len, options.range_ratio);
  const auto [output_low, output_high] = length_range(options.output_len, options.range_ratio);
  std::uniform_int_distribution<int32_t> input_len(input_low, input_high);
  std::uniform_int_distribution<int32_t> output_len(output_low, output_high);
  const std::vector<int32_t> prefix_ids = options.as_text ? std::vector<int32_t>{} : random_ids(gen, options.vocab_size, options.prefix_len);
  const std::string prefix_text = options.as_text ? random_words(gen, options.prefix_len) : std::string{};

  std::vector<BenchRequest> requests(static_cast<size_t>(options.num_prompts));
  for (BenchRequest& r : requests) {
    const int32_t n = input_len(gen);
    r.output_len = output_len(gen);
    r.prompt_len = options.prefix_len + n;
    if (options.as_text) {
      r.prompt_text = prefix_text + (prefix_text.empty() ? "" : " ") + random_words(gen, n);
    } else {
      r.prompt_ids = prefix_ids;
      std::vector<int32_t> tail = random_ids(gen, options.vocab_size, n);
      r.prompt_ids.insert(r.prompt_ids.end(), tail.begin(), tail.end());
    }
  }
  return requests;
}

std::vector<double> arrival_times(int32_t num_requests, double request_rate, double burstiness, uint64_t seed) {
  TACHYON_CHECK(request_rate > 0) << "--request-rate must be positive (inf: all at once), got " << request_rate;
  TACHYON_CHECK(burstiness > 0) << "--burstiness must be positive, got " << burstiness;
  std::vector<double> times(static_cast<size_t>(num_requests), 0.0);
  if (std::isinf(request_rate)) return times;
  // vLLM: gamma(shape = burstiness, scale = 1 / (rate * burstiness)), so the mean gap is 1/rate
  // whatever the burstiness; below 1 the gaps bunch up, above 1 they even out.
  std::mt19937_64 gen(seed ^ 0x9e3779b97f4a7c15ull);  // not the dataset's stream
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double t = 0;
  for (double& time : times) {
    time = t;
    t += gap(gen);
  }
  return times;
}

}  // namespace tachyon::cli
