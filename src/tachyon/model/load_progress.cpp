#include "tachyon/model/load_progress.h"

#include <algorithm>

namespace tachyon::model {

LoadProgress::LoadProgress(int64_t total_bytes, int64_t total_tensors, std::FILE* out, int64_t min_bytes)
    : total_bytes_(total_bytes), total_tensors_(total_tensors), out_(total_bytes >= min_bytes && total_bytes > 0 ? out : nullptr) {}

void LoadProgress::add(int64_t bytes) {
  bytes_ += bytes;
  ++tensors_;
  if (out_ == nullptr) return;
  const int tenths = static_cast<int>(std::min<int64_t>(10, bytes_ * 10 / total_bytes_));
  if (tenths <= tenths_printed_) return;
  tenths_printed_ = tenths;
  std::fprintf(out_, "[tachyon] loading weights: %d%% (%.1f of %.1f GB, %lld of %lld tensors)\n", tenths * 10,
               static_cast<double>(bytes_) / 1e9, static_cast<double>(total_bytes_) / 1e9, static_cast<long long>(tensors_),
               static_cast<long long>(total_tensors_));
  std::fflush(out_);
}

}  // namespace tachyon::model
