// A second stream for the independent parts of a layer. A batch-1 decode step of a DeepSeek-class
// layer is a chain of short kernels, each waiting for the one before, and the short ones leave
// HBM idle: the MoE's routing (router product, top-k, grouping by expert: single-CTA kernels)
// does not depend on the shared expert's weight stream, nor does MLA's latent path (kv_a product,
// norm, rope and cache store) on its query path. A block forks one of them onto this stream and
// joins it before the layer goes on, so the two overlap (GpuBlock::run_branches).
//
// Under CUDA graph capture the side stream joins the capture at the fork (an event recorded on
// the captured stream) and leaves it at the join, so both streams' kernels are nodes of the
// step's graph with exactly these edges; eagerly, the same calls order the streams.
#pragma once

#include <cuda_runtime.h>

namespace tachyon::model::gpu {

class SideStream {
 public:
  SideStream();  // a non-blocking stream and two events without timing
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  cudaStream_t stream() const { return stream_; }
  // What `main` has been given so far happens before what stream() is given next.
  void fork(cudaStream_t main);
  // What stream() has been given so far happens before what `main` is given next.
  void join(cudaStream_t main);

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t forked_ = nullptr;
  cudaEvent_t joined_ = nullptr;
};

}  // namespace tachyon::model::gpu
