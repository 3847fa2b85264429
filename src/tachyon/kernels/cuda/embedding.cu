// Token embedding lookup: a gather of whole rows, so the kernel is a 16-byte vector copy.
// One thread copies 8 bf16 (one uint4); the grid is (rows, chunks of 128 vectors of a row), so
// a decode step with one token still spreads a 4096-wide row over several SMs' warps and a
// prefill of thousands of tokens is one block per chunk with no loop. No math: the output is
// bit-identical to the table row. Test: tests/gpu/test_elementwise_kernels.cpp (Embedding.*).
#include "tachyon/kernels/cuda/embedding.h"
#include "tachyon/kernels/cuda/pdl.cuh"

#include <cstdint>

namespace tachyon::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kVecElems = 8;  // bf16 per uint4

// out: [rows, dim] bf16; ids: [rows] int32; table: [table_rows, dim] bf16 holding full-vocab
// rows [vocab_begin, vocab_begin + table_rows); vecs_per_row = dim / 8. Ids outside that range
// write zeros (a vocab-parallel shard: the TP all-reduce then sums exactly one nonzero row).
__global__ void embedding_kernel(bf16* __restrict__ out, const int32_t* __restrict__ ids,
                                 const bf16* __restrict__ table, int64_t vecs_per_row, int64_t vocab_begin,
                                 int64_t table_rows) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  const int64_t vec = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (vec >= vecs_per_row) return;
  const int64_t id = ids[row] - vocab_begin;
  uint4* dst = reinterpret_cast<uint4*>(out) + row * vecs_per_row;
  if (id < 0 || id >= table_rows) {
    dst[vec] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(table) + id * vecs_per_row;
  dst[vec] = src[vec];
}

}  // namespace

void embedding(bf16* out, const int32_t* ids, const bf16* table, int64_t rows, int64_t dim, cudaStream_t stream) {
  embedding_shard(out, ids, table, rows, dim, 0, INT64_MAX, stream);
}

void embedding_shard(bf16* out, const int32_t* ids, const bf16* table, int64_t rows, int64_t dim,
                     int64_t vocab_begin, int64_t table_rows, cudaStream_t stream) {
  TACHYON_CHECK(rows >= 0 && rows <= INT32_MAX) << "embedding: rows " << rows << " out of range";
  TACHYON_CHECK(dim > 0 && dim % kVecElems == 0) << "embedding: dim " << dim << " must be a positive multiple of 8";
  TACHYON_CHECK(reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(table) % 16 == 0)
      << "embedding: out and table must be 16-byte aligned";
  const int64_t vecs_per_row = dim / kVecElems;
  TACHYON_CHECK((vecs_per_row + kThreads - 1) / kThreads <= 65535) << "embedding: dim " << dim << " too large";
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((vecs_per_row + kThreads - 1) / kThreads));
  launch_pdl(embedding_kernel, grid, dim3(kThreads), 0, stream, out, ids, table, vecs_per_row, vocab_begin, table_rows);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
