// Bytes pulled from HBM into L2 ahead of the kernel that will read them: the weight of the next
// product of a decode step, while the short kernels before it leave HBM idle
// (model/gpu/l2_prefetcher.h says when). Reads only; nothing is written, so no result changes.
// Test: tests/gpu/test_l2_prefetch.cpp.
#pragma once

#include <cstddef>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// Issues prefetches of [data, data + bytes) into L2 and returns (the copies are not waited for:
// the kernel ends as soon as they are issued). data 16-byte aligned; bytes is rounded down to a
// multiple of 16; 0 launches nothing. lines: one prefetch per 128-byte line (prefetch.global.L2)
// instead of bulk requests (cp.async.bulk.prefetch.L2), for comparison.
void l2_prefetch(const void* data, size_t bytes, cudaStream_t stream, bool lines = false);

}  // namespace tachyon::kernels::cuda
