#include "tachyon/runner/cuda/cuda_kv_rows.h"

#include <algorithm>

#include "tachyon/base/check.h"
#include "tachyon/tensor/dtype.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::runner {

CudaKvRowAccess::CudaKvRowAccess(const model::gpu::KvCache& cache, const std::vector<model::gpu::KvRegion>& regions,
                                 int64_t num_layers, int32_t block_size, int32_t num_blocks, cudaStream_t compute)
    : block_size_(block_size), num_blocks_(num_blocks), compute_(compute) {
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    for (size_t r = 0; r < regions.size(); ++r) {
      TACHYON_CHECK(regions[r].dtype == DType::kBF16 && regions[r].bytes_per_token % sizeof(uint16_t) == 0)
          << "internal: KV rows move from bf16 caches only (region " << regions[r].name << ")";
      planes_.push_back({cache.bytes(layer, r), static_cast<int64_t>(regions[r].bytes_per_token / sizeof(uint16_t))});
    }
  }
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking));
}

CudaKvRowAccess::~CudaKvRowAccess() {
  if (copies_ != nullptr) cudaStreamDestroy(copies_);
}

int64_t CudaKvRowAccess::values_per_token() const {
  int64_t total = 0;
  for (const Plane& plane : planes_) total += plane.width;
  return total;
}

std::vector<int64_t> CudaKvRowAccess::plane_widths() const {
  std::vector<int64_t> widths;
  for (const Plane& plane : planes_) widths.push_back(plane.width);
  return widths;
}

void CudaKvRowAccess::check_span(std::span<const int32_t> block_table, int64_t num_tokens, size_t values) const {
  TACHYON_CHECK(num_tokens >= 0 && static_cast<int64_t>(block_table.size()) * block_size_ >= num_tokens)
      << "a block table of " << block_table.size() << " blocks of " << block_size_ << " cannot hold " << num_tokens
      << " tokens";
  for (int32_t block : block_table) {
    TACHYON_CHECK(block >= 0 && block < num_blocks_) << "KV block " << block << " outside the cache";
  }
  TACHYON_CHECK(static_cast<int64_t>(values) == num_tokens * values_per_token())
      << "a KV row buffer of " << values << " values for " << num_tokens << " tokens of " << values_per_token();
}

uint16_t* CudaKvRowAccess::host_values(size_t num_values) const {
  const size_t bytes = num_values * sizeof(uint16_t);
  if (staging_.bytes() < bytes) staging_ = cuda::PinnedBuffer(std::max(bytes, 2 * staging_.bytes()));
  return staging_.as<uint16_t>();
}

// The contiguous copies of a span, in the row buffer's order ([plane][token][width]): each
// (plane, block) run of tokens is one.
std::vector<CudaKvRowAccess::Run> CudaKvRowAccess::runs(std::span<const int32_t> block_table,
                                                        int64_t num_tokens) const {
  std::vector<Run> out;
  size_t at = 0;
  for (const Plane& plane : planes_) {
    const size_t row_bytes = static_cast<size_t>(plane.width) * sizeof(uint16_t);
    for (int64_t first = 0; first < num_tokens; first += block_size_) {
      const int64_t rows = std::min<int64_t>(block_size_, num_tokens - first);
      const size_t slot = static_cast<size_t>(block_table[static_cast<size_t>(first / block_size_)]) * block_size_;
      out.push_back({plane.base + slot * row_bytes, at, static_cast<size_t>(rows) * row_bytes});
      at += static_cast<size_t>(rows * plane.width);
    }
  }
  return out;
}

// Staging holds the rows as the output does, in bf16; one pass widens them (exactly: a bf16
// value is the high half of its f32).
void CudaKvRowAccess::gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const {
  check_span(block_table, num_tokens, out.size());
  std::lock_guard lock(mutex_);
  uint16_t* host = host_values(out.size());
  for (const Run& run : runs(block_table, num_tokens)) {
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(host + run.values, run.device, run.bytes, cudaMemcpyDeviceToHost, copies_));
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(copies_));
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(host[i]);
}

// Rows gathered from a bf16 cache narrow back to their own bits.
void CudaKvRowAccess::scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) {
  check_span(block_table, num_tokens, rows.size());
  std::lock_guard lock(mutex_);
  uint16_t* host = host_values(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) host[i] = f32_to_bf16(rows[i]);
  for (const Run& run : runs(block_table, num_tokens)) {
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(run.device, host + run.values, run.bytes, cudaMemcpyHostToDevice, compute_));
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(compute_));  // the staging is reused; the next step reads the rows
}

}  // namespace tachyon::runner
