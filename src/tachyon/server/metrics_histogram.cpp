// Histogram: see metrics_histogram.h.
#include "tachyon/server/metrics_histogram.h"

#include <algorithm>
#include <cmath>

#include "tachyon/base/check.h"

namespace tachyon::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    TACHYON_CHECK(std::isfinite(upper_bounds_[i])) << "histogram bound " << i << " is not finite";
    TACHYON_CHECK(i == 0 || upper_bounds_[i - 1] < upper_bounds_[i])
        << "histogram bounds must increase strictly, got " << upper_bounds_[i - 1] << " then " << upper_bounds_[i];
  }
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  // First bound >= value: `le` is inclusive. Past the last bound lands in the +Inf slot.
  size_t bucket = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

HistogramSnapshot Histogram::snapshot() const {
  HistogramSnapshot snap;
  snap.upper_bounds = upper_bounds_;
  snap.cumulative_counts.resize(upper_bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snap.cumulative_counts[i] = running;
  }
  snap.count = running;
  snap.sum = sum_.load(std::memory_order_relaxed);
  return snap;
}

}  // namespace tachyon::server
