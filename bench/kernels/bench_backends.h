// The communicator backends the collective benchmarks compare (bench_collectives,
// bench_topk_exchange), one rank per GPU of this machine, each rank a thread of `workers`: our
// peer-access communicator (where every pair of GPUs reaches the other) and NCCL (where built).
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tachyon/dist/cuda/peer_communicator.h"
#include "tachyon/runner/rank_workers.h"
#include "tachyon/tensor/cuda/cuda_check.h"
#include "tachyon/tensor/cuda/device_buffer.h"
#ifdef TACHYON_HAVE_NCCL
#include "tachyon/dist/nccl/nccl_communicator.h"
#endif

namespace tachyon::bench {

using RankComms = std::vector<std::unique_ptr<dist::Communicator>>;

// One rank's stream, buffers and timing events, on its device (rank r on GPU r).
struct RankState {
  cudaStream_t stream = nullptr;
  cuda::DeviceBuffer send;
  cuda::DeviceBuffer recv;
  cudaEvent_t start = nullptr, stop = nullptr;
};

inline std::vector<RankState> make_rank_states(runner::RankWorkers& workers, int n, size_t send_bytes,
                                               size_t recv_bytes) {
  std::vector<RankState> states(static_cast<size_t>(n));
  workers.run([&](int r) {
    TACHYON_CUDA_CHECK(cudaSetDevice(r));
    RankState& s = states[static_cast<size_t>(r)];
    TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    s.send = cuda::DeviceBuffer(send_bytes);
    s.recv = cuda::DeviceBuffer(recv_bytes);
    TACHYON_CUDA_CHECK(cudaEventCreate(&s.start));
    TACHYON_CUDA_CHECK(cudaEventCreate(&s.stop));
  });
  return states;
}

inline void free_rank_states(runner::RankWorkers& workers, std::vector<RankState>& states) {
  workers.run([&](int r) {
    TACHYON_CUDA_CHECK(cudaSetDevice(r));
    RankState& s = states[static_cast<size_t>(r)];
    cudaEventDestroy(s.start);
    cudaEventDestroy(s.stop);
    cudaStreamDestroy(s.stream);
    s.send = cuda::DeviceBuffer();
    s.recv = cuda::DeviceBuffer();
  });
}

// For each backend: builds a communicator per rank (concurrently: construction is collective),
// runs `measure(backend name, comms)`, then destroys them on their ranks' threads once the ranks'
// streams are idle. A backend this machine cannot run is named on stdout instead.
inline void for_each_backend(runner::RankWorkers& workers, std::vector<RankState>& states,
                             const std::function<void(const std::string&, RankComms&)>& measure) {
  const int n = static_cast<int>(states.size());
  auto run = [&](const std::string& backend, const std::function<std::unique_ptr<dist::Communicator>(int)>& make) {
    RankComms comms(static_cast<size_t>(n));
    workers.run([&](int r) {
      TACHYON_CUDA_CHECK(cudaSetDevice(r));
      comms[static_cast<size_t>(r)] = make(r);
    });
    measure(backend, comms);
    workers.run([&](int r) {
      TACHYON_CUDA_CHECK(cudaSetDevice(r));
      TACHYON_CUDA_CHECK(cudaStreamSynchronize(states[static_cast<size_t>(r)].stream));
      comms[static_cast<size_t>(r)].reset();
    });
  };
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
  if (dist::PeerWorld::supported(ranks)) {
    dist::PeerWorld world(ranks);  // the default staging, as the runner's groups
    run("peer", [&](int r) { return std::make_unique<dist::PeerCommunicator>(world, r); });
  } else {
    std::printf("peer: not measured (the GPUs have no peer access to each other)\n");
  }
#ifdef TACHYON_HAVE_NCCL
  const ncclUniqueId id = dist::nccl_unique_id();
  run("nccl", [&](int r) { return std::make_unique<dist::NcclCommunicator>(id, n, r); });
#else
  std::printf("nccl: not measured (built without NCCL)\n");
#endif
}

}  // namespace tachyon::bench
