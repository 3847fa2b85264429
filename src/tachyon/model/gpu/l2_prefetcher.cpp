#include "tachyon/model/gpu/l2_prefetcher.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "tachyon/kernels/cuda/l2_prefetch.h"

namespace tachyon::model::gpu {

namespace {

// Per request: about what HBM moves while the short kernels between two products run.
constexpr size_t kDefaultMegabytes = 16;

}  // namespace

std::unique_ptr<L2Prefetcher> L2Prefetcher::from_environment() {
  size_t megabytes = kDefaultMegabytes;
  if (const char* value = std::getenv("TACHYON_L2_PREFETCH_MB"); value != nullptr && *value != '\0') {
    megabytes = static_cast<size_t>(std::max(0L, std::strtol(value, nullptr, 10)));
  }
  if (megabytes == 0) return nullptr;
  const char* lines = std::getenv("TACHYON_L2_PREFETCH_LINES");
  return std::make_unique<L2Prefetcher>(megabytes << 20, lines != nullptr && std::string(lines) == "1");
}

void L2Prefetcher::prefetch(cudaStream_t main, const void* data, size_t bytes) {
  if (data == nullptr || bytes == 0) return;
  stream_.fork(main);
  kernels::cuda::l2_prefetch(data, std::min(bytes, max_bytes_), stream_.stream(), lines_);
  pending_ = true;
  ++requests_;
}

void L2Prefetcher::join(cudaStream_t main) {
  if (!pending_) return;
  stream_.join(main);
  pending_ = false;
}

}  // namespace tachyon::model::gpu
