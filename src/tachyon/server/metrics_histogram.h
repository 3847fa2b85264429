// Histogram: fixed buckets chosen at construction, observed lock-free from any thread.
// The one non-obvious decision: buckets hold plain (non-cumulative) counts so observe() touches
// exactly one bucket; snapshot() makes them cumulative for the exposition format, and derives
// the count from the buckets so `+Inf` always equals `_count` even while other threads observe.
// The standard bucket sets (after vLLM's) live here so docs/metrics.md can quote one place.
// Test: ctest -R metrics (tests/unit/test_metrics.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace tachyon::server {

// Upper bounds in seconds (le, inclusive); +Inf is implicit.
// Time to first token.
inline const std::vector<double> kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
// Inter-token latency and time per output token. vLLM's 0.01..80 s, plus 1-5 ms at the low end
// because a fast decode step is well under 10 ms and would otherwise fall in one bucket.
inline const std::vector<double> kTokenLatencyBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.4,   0.5,    0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0};
// Whole-request phases: end-to-end, queue, prefill, decode. vLLM's 0.3..7680 s, plus 10-100 ms
// at the low end for short queue waits and prefills.
inline const std::vector<double> kRequestLatencyBuckets = {
    0.01, 0.025, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,   5.0,   10.0,
    15.0, 20.0,  30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
// Tokens scheduled in one engine step (prefill + decode).
inline const std::vector<double> kStepTokensBuckets = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

struct HistogramSnapshot {
  std::vector<double> upper_bounds;         // [num_buckets] strictly increasing, finite
  std::vector<uint64_t> cumulative_counts;  // [num_buckets + 1]; the last one is +Inf == count
  double sum = 0.0;
  uint64_t count = 0;
};

class Histogram {
 public:
  // Throws tachyon::Error unless the bounds are finite and strictly increasing.
  explicit Histogram(std::vector<double> upper_bounds);

  // Thread-safe, lock-free, no allocation. NaN is ignored (it would poison the sum).
  void observe(double value);
  HistogramSnapshot snapshot() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [num_buckets + 1], not cumulative
  std::atomic<double> sum_{0.0};
};

}  // namespace tachyon::server
