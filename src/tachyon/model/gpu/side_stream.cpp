#include "tachyon/model/gpu/side_stream.h"

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::model::gpu {

SideStream::SideStream() {
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TACHYON_CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
  TACHYON_CUDA_CHECK(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
}

SideStream::~SideStream() {
  if (joined_ != nullptr) cudaEventDestroy(joined_);
  if (forked_ != nullptr) cudaEventDestroy(forked_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void SideStream::fork(cudaStream_t main) {
  TACHYON_CUDA_CHECK(cudaEventRecord(forked_, main));
  TACHYON_CUDA_CHECK(cudaStreamWaitEvent(stream_, forked_, 0));
}

void SideStream::join(cudaStream_t main) {
  TACHYON_CUDA_CHECK(cudaEventRecord(joined_, stream_));
  TACHYON_CUDA_CHECK(cudaStreamWaitEvent(main, joined_, 0));
}

}  // namespace tachyon::model::gpu
