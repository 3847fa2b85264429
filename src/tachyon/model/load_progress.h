// LoadProgress: the lines `tachyon serve` / `generate` print on stderr while a large checkpoint's
// weights load, one each time another tenth of its bytes is read:
//   [tachyon] loading weights: 30% (4.8 of 16.1 GB, 87 of 291 tensors)
// Why only for large checkpoints (kMinBytes and up): a small model loads before anyone waits, and
// the README's quickstart (the 10 MB built-in model) prints exactly its answer. Why by bytes and
// not time: the lines are the same on every run. Tests: tests/unit/test_load_progress.cpp.
#pragma once

#include <cstdint>
#include <cstdio>

namespace tachyon::model {

class LoadProgress {
 public:
  static constexpr int64_t kMinBytes = int64_t{256} << 20;

  // out: where lines go (null: nowhere); min_bytes: the smallest total that prints.
  LoadProgress(int64_t total_bytes, int64_t total_tensors, std::FILE* out = stderr, int64_t min_bytes = kMinBytes);
  // One more tensor of `bytes` read.
  void add(int64_t bytes);

 private:
  int64_t total_bytes_, total_tensors_;
  std::FILE* out_;
  int64_t bytes_ = 0, tensors_ = 0;
  int tenths_printed_ = 0;
};

}  // namespace tachyon::model
