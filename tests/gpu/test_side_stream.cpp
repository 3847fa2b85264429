// The side stream of the GPU blocks (model/gpu/side_stream.h): what the block's stream was given
// before the fork happens before the side branch, and the side branch before what the block's
// stream is given after the join, eagerly and in a captured CUDA graph. Each branch is queued
// behind a long fill of a large buffer, so a missing edge lets the short copy after it run first
// and read the stale (poisoned) value.
// Run on the GPU machine: build/tests/gpu_side_stream.
#include <cstdint>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/model/gpu/side_stream.h"

namespace tachyon::gpu_test {
namespace {

constexpr size_t kLongFill = size_t{1} << 30;  // bytes: ~0.3 ms of memset on an H200

struct Buffers {
  DeviceArray<uint8_t> big{kLongFill};
  DeviceArray<uint8_t> forked{16};   // written by the main stream before the fork
  DeviceArray<uint8_t> side_out{16}; // the side branch's copy of it, then its own mark
  DeviceArray<uint8_t> joined{16};   // the main stream's copy of side_out after the join
};

// main: long fill, then forked = 0x44; fork. side: long fill, side_out = forked, then side_out[8..] = 0x55.
// main (meanwhile): nothing; join; joined = side_out.
void issue(Buffers& b, model::gpu::SideStream& side, cudaStream_t main) {
  TACHYON_CUDA_CHECK(cudaMemsetAsync(b.big.data(), 0x11, kLongFill, main));
  TACHYON_CUDA_CHECK(cudaMemsetAsync(b.forked.data(), 0x44, 16, main));
  side.fork(main);
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(b.side_out.data(), b.forked.data(), 16, cudaMemcpyDeviceToDevice, side.stream()));
  TACHYON_CUDA_CHECK(cudaMemsetAsync(b.big.data(), 0x22, kLongFill, side.stream()));
  TACHYON_CUDA_CHECK(cudaMemsetAsync(b.side_out.data() + 8, 0x55, 8, side.stream()));
  side.join(main);
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(b.joined.data(), b.side_out.data(), 16, cudaMemcpyDeviceToDevice, main));
}

void expect_ordered(const Buffers& b) {
  const std::vector<uint8_t> joined = b.joined.download();
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(joined[i], i < 8 ? 0x44 : 0x55) << "byte " << i << " (0xFF: a branch ran before its edge)";
  }
}

TEST(SideStream, ForkAndJoinOrderTheBranchesEagerly) {
  model::gpu::SideStream side;
  cudaStream_t main = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
  for (int round = 0; round < 3; ++round) {
    Buffers b;
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());  // the poison (legacy stream) before the non-blocking streams
    issue(b, side, main);
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(main));
    expect_ordered(b);
  }
  TACHYON_CUDA_CHECK(cudaStreamDestroy(main));
}

TEST(SideStream, ForkAndJoinOrderTheBranchesInACapturedGraph) {
  model::gpu::SideStream side;
  cudaStream_t main = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
  Buffers b;
  cudaGraph_t graph = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
  issue(b, side, main);
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(main, &graph));  // fails if the side stream was not joined
  cudaGraphExec_t exec = nullptr;
  TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 3; ++round) {
    b.forked.poison(), b.side_out.poison(), b.joined.poison();
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
    TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, main));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(main));
    expect_ordered(b);
  }
  TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
  TACHYON_CUDA_CHECK(cudaStreamDestroy(main));
}

}  // namespace
}  // namespace tachyon::gpu_test
