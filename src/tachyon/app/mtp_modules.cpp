#include "tachyon/app/mtp_modules.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::app {

namespace {

constexpr int64_t kInitialRows = 64;  // a cache's first capacity

class CpuMtpModules : public engine::MtpModules {
 public:
  explicit CpuMtpModules(std::vector<model::MtpModule> modules) : modules_(std::move(modules)) {
    TACHYON_CHECK(!modules_.empty()) << "internal: MTP drafting without MTP modules";
  }
  int64_t num_modules() const override { return static_cast<int64_t>(modules_.size()); }
  int64_t hidden_size() const override { return modules_.front().layer_config().hidden_size; }
  int64_t vocab_size() const override { return modules_.front().layer_config().vocab_size; }

  std::unique_ptr<Cache> make_cache(int64_t module) const override {
    return std::make_unique<RowCache>(at(module).make_cache(kInitialRows));
  }

  Output forward(int64_t module, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                 Cache& cache) const override {
    model::SequenceKvCache& rows = static_cast<RowCache&>(cache).rows;
    TACHYON_CHECK(cache.length >= 0 && cache.length <= rows.capacity)
        << "internal: an MTP cache of " << rows.capacity << " rows set to " << cache.length;
    rows.length = cache.length;  // the drafter may have dropped rows
    const int64_t needed = rows.length + static_cast<int64_t>(next_tokens.size());
    if (needed > rows.capacity) model::reserve_rows(rows, std::max(needed, 2 * rows.capacity));
    model::MtpOutput out = at(module).forward(hidden, next_tokens, rows);
    cache.length = rows.length;
    return {std::move(out.logits), std::move(out.hidden)};
  }

  std::vector<float> copy_rows(const Cache& cache) const override {
    return model::copy_rows(static_cast<const RowCache&>(cache).rows, cache.length);
  }

  std::unique_ptr<Cache> cache_with_rows(int64_t module, std::span<const float> values, int64_t length) const override {
    auto cache = std::make_unique<RowCache>(at(module).make_cache(kInitialRows));
    if (!model::set_rows(cache->rows, values, length)) return nullptr;
    cache->length = length;
    return cache;
  }

 private:
  struct RowCache : Cache {
    explicit RowCache(model::SequenceKvCache cache) : rows(std::move(cache)) {}
    model::SequenceKvCache rows;  // its length follows Cache::length at each forward
  };
  const model::MtpModule& at(int64_t module) const {
    TACHYON_CHECK(module >= 0 && module < num_modules())
        << "internal: MTP module " << module << " of " << num_modules();
    return modules_[static_cast<size_t>(module)];
  }

  std::vector<model::MtpModule> modules_;
};

}  // namespace

std::unique_ptr<engine::MtpModules> cpu_mtp_modules(std::vector<model::MtpModule> modules) {
  return std::make_unique<CpuMtpModules>(std::move(modules));
}

}  // namespace tachyon::app
