// Sampler: the CPU reference of next-token sampling. See sampler.h for the order of operations.
// Every step works in place on one [vocab] f32 row and marks a dropped token with -inf, so the
// steps compose in any order and a device kernel can mirror them one by one.
#include "tachyon/kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "tachyon/base/check.h"

namespace tachyon::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kFloatMax = std::numeric_limits<float>::max();

bool is_kept(float logit) { return logit > kNegInf; }  // false for -inf and NaN

// Orders token ids most likely first, ties to the lower id: a strict total order, so every
// partial sort and selection below is deterministic.
struct MoreLikely {
  std::span<const float> logits;  // [vocab]
  bool operator()(int32_t a, int32_t b) const {
    if (logits[a] != logits[b]) return logits[a] > logits[b];
    return a < b;
  }
};

// logits: [vocab]. Returns [num_kept] the logits of the tokens not dropped, in id order.
std::vector<float> kept_values(std::span<const float> logits) {
  std::vector<float> values;
  values.reserve(logits.size());
  for (float l : logits) {
    if (is_kept(l)) values.push_back(l);
  }
  return values;
}

// logits: [vocab]. The largest logit, -inf when none is kept.
float max_logit(std::span<const float> logits) {
  float max = kNegInf;
  for (float l : logits) max = std::max(max, l);
  return max;
}

// logits: [vocab]. NaN -> -inf (never sampled), +inf -> the largest float (wins, without
// turning the softmax into inf/inf).
void sanitize(std::span<float> logits) {
  for (float& l : logits) {
    if (std::isnan(l)) l = kNegInf;
    if (l == std::numeric_limits<float>::infinity()) l = kFloatMax;
  }
}

void check_token(int32_t token, size_t vocab, const char* what) {
  TACHYON_CHECK(token >= 0 && static_cast<size_t>(token) < vocab)
      << what << ": token id " << token << " is outside the vocabulary [0, " << vocab << ")";
}

// raw: [vocab] sanitized logits before any processing. Fills result.logprob and result.top.
void fill_logprobs(core::SampledToken& result, std::span<const float> raw, int32_t num_top) {
  const float max = max_logit(raw);
  double sum = 0.0;
  for (float l : raw) sum += std::exp(l - max);
  const double log_normalizer = max + std::log(sum);
  result.logprob = static_cast<float>(raw[result.token] - log_normalizer);
  if (num_top <= 0) return;

  std::vector<int32_t> ids(raw.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t count = std::min(static_cast<size_t>(num_top), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), MoreLikely{raw});
  result.top.clear();
  for (size_t j = 0; j < count; ++j) {
    result.top.push_back({ids[j], static_cast<float>(raw[ids[j]] - log_normalizer)});
  }
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

double uniform_for_step(uint64_t seed, uint64_t step) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ step);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // top 53 bits -> [0, 1)
}

void apply_allowed_tokens(std::span<float> logits, std::span<const uint32_t> allowed) {
  if (allowed.empty()) return;
  for (size_t id = 0; id < logits.size(); ++id) {
    const size_t word = id >> 5;
    if (word >= allowed.size() || ((allowed[word] >> (id & 31)) & 1u) == 0) logits[id] = kNegInf;
  }
}

void apply_min_tokens(std::span<float> logits, const core::SamplingParams& params, const SamplingContext& context) {
  if (context.outputs_so_far() >= static_cast<uint64_t>(std::max(params.min_tokens, 0))) return;
  for (int32_t id : params.stop_token_ids) {
    check_token(id, logits.size(), "stop_token_ids");
    logits[id] = kNegInf;
  }
  // With ignore_eos, EOS does not end the sequence, so it need not be masked either.
  if (context.eos_token_id && !params.ignore_eos) {
    check_token(*context.eos_token_id, logits.size(), "eos_token_id");
    logits[*context.eos_token_id] = kNegInf;
  }
}

void apply_penalties(std::span<float> logits, const core::SamplingParams& params, std::span<const int32_t> prompt_tokens,
                     std::span<const int32_t> output_tokens) {
  // Repetition (HF/CTRL): once per distinct token of prompt or output, however often it occurs.
  if (params.repetition_penalty != 1.0f) {
    std::vector<int32_t> seen(prompt_tokens.begin(), prompt_tokens.end());
    seen.insert(seen.end(), output_tokens.begin(), output_tokens.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      check_token(id, logits.size(), "repetition penalty");
      float& l = logits[id];
      l = l > 0.0f ? l / params.repetition_penalty : l * params.repetition_penalty;
    }
  }
  // Frequency and presence (OpenAI): over generated tokens only.
  if (params.frequency_penalty == 0.0f && params.presence_penalty == 0.0f) return;
  std::vector<int32_t> sorted(output_tokens.begin(), output_tokens.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t begin = 0; begin < sorted.size();) {
    size_t end = begin;
    while (end < sorted.size() && sorted[end] == sorted[begin]) ++end;
    const int32_t id = sorted[begin];
    check_token(id, logits.size(), "output_tokens");
    logits[id] -= params.frequency_penalty * static_cast<float>(end - begin);
    logits[id] -= params.presence_penalty;
    begin = end;
  }
}

int32_t argmax_token(std::span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (is_kept(logits[i]) && (best < 0 || logits[i] > logits[best])) best = static_cast<int32_t>(i);
  }
  return best;
}

void apply_temperature(std::span<float> logits, float temperature) {
  TACHYON_CHECK(temperature > 0.0f) << "temperature must be > 0 here, got " << temperature;
  // Shift by the max first (softmax does not change): then a tiny temperature sends the others
  // towards -inf instead of overflowing the best ones to +inf, and the limit is greedy.
  const float max = max_logit(logits);
  for (float& l : logits) {
    if (is_kept(l)) l = std::max((l - max) / temperature, -kFloatMax);
  }
}

void apply_top_k(std::span<float> logits, int32_t top_k) {
  if (top_k <= 0) return;
  std::vector<float> values = kept_values(logits);
  if (static_cast<size_t>(top_k) >= values.size()) return;
  // The k-th largest value by an O(vocab) selection over contiguous floats (no sort).
  std::nth_element(values.begin(), values.begin() + (top_k - 1), values.end(), std::greater<float>());
  const float kth = values[top_k - 1];
  // Keep everything above it and, of the tokens equal to it, the lowest ids up to k in all.
  int64_t ties_left = top_k;
  for (float l : logits) ties_left -= l > kth;
  for (float& l : logits) {
    if (l > kth) continue;
    if (l == kth && ties_left > 0) {
      --ties_left;
      continue;
    }
    l = kNegInf;
  }
}

void apply_top_p(std::span<float> logits, float top_p) {
  if (top_p >= 1.0f) return;
  std::vector<float> values = kept_values(logits);
  if (values.size() <= 1) return;
  const float max = max_logit(logits);
  double total = 0.0;
  for (float v : values) total += std::exp(v - max);
  const double target = static_cast<double>(top_p) * total;

  // The nucleus is usually a small part of the vocabulary. Grow m until the m largest values
  // (an O(vocab) selection, no sort) hold top_p of the mass; then only the tokens at or above
  // the m-th value are candidates, and only they are sorted.
  float threshold = kNegInf;
  for (size_t m = std::min<size_t>(values.size(), 64);; m = std::min(values.size(), m * 8)) {
    std::nth_element(values.begin(), values.begin() + (m - 1), values.end(), std::greater<float>());
    threshold = values[m - 1];
    double mass = 0.0;
    for (size_t j = 0; j < m; ++j) mass += std::exp(values[j] - max);
    if (mass >= target || m == values.size()) break;
  }
  std::vector<int32_t> candidates;  // ids at or above the threshold, then most likely first
  for (size_t i = 0; i < logits.size(); ++i) {
    if (is_kept(logits[i]) && logits[i] >= threshold) candidates.push_back(static_cast<int32_t>(i));
  }
  std::sort(candidates.begin(), candidates.end(), MoreLikely{logits});

  // Keep the shortest most-likely prefix whose mass reaches top_p (all candidates if rounding
  // leaves them just short).
  size_t keep = candidates.size();
  double mass = 0.0;
  for (size_t j = 0; j < candidates.size() && keep == candidates.size(); ++j) {
    mass += std::exp(logits[candidates[j]] - max);
    if (mass >= target) keep = j + 1;
  }
  for (float& l : logits) {
    if (l < threshold) l = kNegInf;
  }
  for (size_t j = keep; j < candidates.size(); ++j) logits[candidates[j]] = kNegInf;
}

void apply_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f) return;
  // p_i / p_max = exp(l_i - l_max): no normalization needed.
  const float max = max_logit(logits);
  for (float& l : logits) {
    if (is_kept(l) && std::exp(l - max) < min_p) l = kNegInf;
  }
}

int32_t draw_token(std::span<float> logits, double uniform) {
  const float max = max_logit(logits);
  if (!is_kept(max)) return -1;
  double total = 0.0;
  for (float& l : logits) {
    l = is_kept(l) ? std::exp(l - max) : 0.0f;
    total += l;
  }
  // Inverse CDF in ascending id order; zero-probability tokens can never be chosen.
  const double target = uniform * total;
  double cumulative = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] <= 0.0f) continue;
    cumulative += logits[i];
    last = static_cast<int32_t>(i);
    if (cumulative > target) return last;
  }
  return last;  // rounding put target at the very end of the mass
}

core::SampledToken sample_token(std::span<float> logits, const core::SamplingParams& params, const SamplingContext& context) {
  TACHYON_CHECK(!logits.empty()) << "sample_token: empty logits row";
  sanitize(logits);
  apply_allowed_tokens(logits, context.allowed_tokens);
  std::vector<float> raw;  // [vocab] kept for the reported logprobs only
  if (params.logprobs >= 0) raw.assign(logits.begin(), logits.end());

  apply_min_tokens(logits, params, context);
  apply_penalties(logits, params, context.prompt_tokens, context.output_tokens);

  core::SampledToken result;
  if (params.greedy()) {
    result.token = argmax_token(logits);
  } else {
    apply_temperature(logits, params.temperature);
    apply_top_k(logits, params.top_k);
    apply_top_p(logits, params.top_p);
    apply_min_p(logits, params.min_p);
    result.token = draw_token(logits, uniform_for_step(context.seed, context.outputs_so_far()));
  }
  TACHYON_CHECK(result.token >= 0) << "sample_token: no token with a finite logit is left (vocab " << logits.size()
                                   << ", outputs " << context.outputs_so_far() << ")";
  if (params.logprobs >= 0) fill_logprobs(result, raw, params.logprobs);
  return result;
}

}  // namespace tachyon::kernels::cpu
