// The next product's weight pulled into L2 while HBM would sit idle. A decode step of a few rows
// is a chain of kernels each waiting for the one before: weight streams (the GEMVs) at HBM
// bandwidth, and between them short latency-bound kernels (a norm; RoPE, the cache store and
// attention at short context) during which HBM moves almost nothing. As soon as a product has
// finished, the decoder asks here for the leading bytes of the next one's weight: a prefetch
// kernel on a stream of its own pulls them into L2 while the short kernels run, and the GEMV
// then reads them from L2. Only reads: every result is bit for bit the same with it off.
//
// Under graph capture the prefetch stream joins at each request (an event on the captured
// stream) and the decoder joins it back once per step (join()), so the prefetches are nodes of
// the step's graph hanging off the products they follow; eagerly, the same calls order them.
//
// TACHYON_L2_PREFETCH_MB sets the bytes per request (0 turns it off, for timing and debugging);
// TACHYON_L2_PREFETCH_LINES=1 uses line prefetches instead of bulk ones (kernels/cuda/l2_prefetch.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tachyon/model/gpu/side_stream.h"

namespace tachyon::model::gpu {

class L2Prefetcher {
 public:
  // Steps of more rows than the GEMV serves are bound by their math: no prefetch there.
  static constexpr int64_t kMaxRows = 8;

  // max_bytes: the most bytes one request pulls (the leading part of a weight).
  explicit L2Prefetcher(size_t max_bytes, bool lines = false) : max_bytes_(max_bytes), lines_(lines) {}
  // The prefetcher the environment asks for; null when TACHYON_L2_PREFETCH_MB is 0.
  static std::unique_ptr<L2Prefetcher> from_environment();

  // After what `main` has been given so far, pulls [data, data + min(bytes, max_bytes)) into L2.
  void prefetch(cudaStream_t main, const void* data, size_t bytes);
  // Every request so far happens before what `main` is given next; a no-op with none pending.
  void join(cudaStream_t main);
  // Requests issued so far (for tests: whether the path ran).
  int64_t requests() const { return requests_; }

 private:
  SideStream stream_;
  size_t max_bytes_;
  bool lines_;
  bool pending_ = false;
  int64_t requests_ = 0;
};

}  // namespace tachyon::model::gpu
