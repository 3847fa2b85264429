// CudaKvRowAccess: the CUDA runner's KvRowAccess (runner/model_runner.h), the host's view of its
// paged KV cache for prefill/decode disaggregation (engine/kv_transfer.h), as the CPU runner's
// PagedKvRowAccess (runner/kv_export.h) gives it: every cache plane's row for positions
// [0, num_tokens), [plane][token][width] f32, planes per layer in the attention block's region
// order (K then V; or the latent; with DSA each layer's index keys after its latent).
// The cache holds bf16 (the runner refuses an FP8 cache here: kv_rows() is null), so a row
// gathered and scattered again is bit-identical, and a decode server importing rows computes
// exactly what the prefill server's own decode would.
// Device layout (model/gpu/gpu_step.h KvCache): [layer][region][slot][width]; a block's rows of
// one plane are contiguous, so each (plane, block) is one copy.
// Ordering: gather reads leased blocks (stable until released) on a stream of its own, from any
// thread; scatter writes freshly allocated blocks on the runner's stream, after any step still in
// flight there and before the next launch, and returns once written.
// By reference (CUDA IPC, runner/model_runner.h): the cache is one cudaMalloc allocation, so one
// IPC handle maps it in another process on the same GPU; the descriptor carries the handle and
// each plane's offset in the allocation, the fingerprint the GPU's UUID and the plane widths. A
// copy maps the source once (kept mapped for the next prompt from it; closed after a minute
// unused, so a prefill server that died or restarted does not keep its cache alive here),
// uploads the planes and both block tables into buffers sized at construction (no allocation
// between steps), runs one kernel (kernels/cuda/kv_copy.h) on the runner's stream and returns
// once it has finished.
// Test: tests/gpu/test_cuda_kv_transfer.cpp; by reference across processes, the servers' PD
// suite on the GPU machine (scripts/gpu-test.sh).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tachyon/model/gpu/gpu_step.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::runner {

class CudaKvRowAccess : public KvRowAccess {
 public:
  // `regions`: one layer's kv_regions() (bf16 each), cached for `num_layers` layers of `cache`;
  // `compute`: the runner's stream (scatter orders itself on it).
  // `allocation`: the cudaMalloc allocation holding `cache` (what an IPC handle names).
  CudaKvRowAccess(const model::gpu::KvCache& cache, const std::vector<model::gpu::KvRegion>& regions,
                  int64_t num_layers, int32_t block_size, int32_t num_blocks, cudaStream_t compute,
                  const void* allocation);
  ~CudaKvRowAccess() override;
  CudaKvRowAccess(const CudaKvRowAccess&) = delete;
  CudaKvRowAccess& operator=(const CudaKvRowAccess&) = delete;

  int64_t values_per_token() const override;
  std::vector<int64_t> plane_widths() const override;
  void gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const override;
  void scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) override;
  std::string reference_fingerprint() const override { return fingerprint_; }
  std::string reference_descriptor() const override;
  int64_t copy_by_reference(const std::string& descriptor, int64_t source_block_size,
                            std::span<const int32_t> source_blocks, std::span<const int32_t> block_table,
                            int64_t num_tokens) override;

 private:
  struct Plane {
    std::byte* base;  // slot 0 of this layer's region
    int64_t width;    // bf16 values per token
  };
  struct Run {
    std::byte* device;  // the run's first row in the cache
    size_t values;      // its offset in the row buffer, in values
    size_t bytes;
  };
  std::vector<Run> runs(std::span<const int32_t> block_table, int64_t num_tokens) const;
  void check_span(std::span<const int32_t> block_table, int64_t num_tokens, size_t values) const;
  // The host staging for num_values bf16 values (pinned, grown on demand; under mutex_).
  uint16_t* host_values(size_t num_values) const;

  std::vector<Plane> planes_;
  int32_t block_size_ = 0;
  int32_t num_blocks_ = 0;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copies_ = nullptr;  // gather's own stream
  mutable std::mutex mutex_;       // gather and scatter share the staging
  mutable cuda::PinnedBuffer staging_;
  // By reference.
  const std::byte* allocation_ = nullptr;
  std::string fingerprint_;
  struct Mapping {
    std::string handle;  // the IPC handle's bytes
    void* base;          // the source allocation in this process
    std::chrono::steady_clock::time_point last_used;
  };
  std::vector<Mapping> mapped_;
  cuda::PinnedBuffer copy_host_;   // planes, then the source and destination block tables
  cuda::DeviceBuffer copy_device_;  // the same, for the kernel
  size_t max_source_blocks_ = 0;
  std::byte* map_source(const std::string& handle);
};

}  // namespace tachyon::runner
