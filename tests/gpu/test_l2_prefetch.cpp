// The L2 prefetch kernel (kernels/cuda/l2_prefetch.h): bulk and line prefetches of ranges of
// awkward lengths (under a piece, not a multiple of 16, many pieces, zero) leave every byte of
// the range and of its neighbours as it was, eagerly and from a captured graph, and report no
// error; a misaligned start is refused. That it changes no result of the model is
// CudaRunnerL2Prefetch.ChangesNoLogitBit (test_cuda_model_runner.cpp).
// Run on the GPU machine: build/tests/gpu_l2_prefetch.
#include <cstdint>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/l2_prefetch.h"

namespace tachyon::gpu_test {
namespace {

constexpr size_t kBytes = (size_t{3} << 20) + 4096;

std::vector<uint8_t> pattern() {
  auto gen = rng(7);
  std::vector<uint8_t> bytes(kBytes);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(gen());
  return bytes;
}

TEST(L2Prefetch, LeavesEveryByteAsItWasEagerlyAndFromAGraph) {
  const std::vector<uint8_t> expected = pattern();
  DeviceArray<uint8_t> buffer(kBytes);
  buffer.upload(expected);
  cudaStream_t stream = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // (offset, length): under one 32 KB piece, a ragged tail, many pieces, zero, under 16 bytes.
  const std::vector<std::pair<size_t, size_t>> ranges = {
      {16, 100}, {4096, 32768 + 48}, {0, kBytes}, {64, 0}, {1024, 15}, {32, kBytes - 4096 - 32}};
  for (const bool lines : {false, true}) {
    for (const auto& [offset, length] : ranges) {
      kernels::cuda::l2_prefetch(buffer.data() + offset, length, stream, lines);
    }
    cudaGraph_t graph = nullptr;
    TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (const auto& [offset, length] : ranges) {
      kernels::cuda::l2_prefetch(buffer.data() + offset, length, stream, lines);
    }
    TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
    TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
    TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
    const std::vector<uint8_t> after = buffer.download();
    size_t changed = 0;
    for (size_t i = 0; i < kBytes; ++i) changed += after[i] != expected[i] ? 1 : 0;
    EXPECT_EQ(changed, 0u) << (lines ? "line" : "bulk") << " prefetches changed bytes";
  }
  TACHYON_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(L2Prefetch, RefusesAMisalignedStart) {
  DeviceArray<uint8_t> buffer(1024);
  EXPECT_THROW(kernels::cuda::l2_prefetch(buffer.data() + 8, 512, nullptr), Error);
}

}  // namespace
}  // namespace tachyon::gpu_test
