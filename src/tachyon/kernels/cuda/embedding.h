// Token embedding lookup on the GPU; the CPU twin is kernels/linear.h `embedding`.
#pragma once

#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// out: [rows, dim] bf16 = table[ids[r]]; table: [vocab, dim] bf16; ids: [rows] int32, each in
// [0, vocab) (the engine validates prompts; sampled ids are in range by construction; the kernel
// cannot check, it has no vocab). dim % 8 == 0 and out, table 16-byte aligned (the copy moves
// 8 bf16 per load), checked on the host. rows == 0 launches nothing. Exact: a bit copy.
void embedding(bf16* out, const int32_t* ids, const bf16* table, int64_t rows, int64_t dim, cudaStream_t stream);

// The vocab-parallel form (tensor parallelism): table holds only full-vocab rows
// [vocab_begin, vocab_begin + table_rows); an id outside them gives a row of zeros, so summing
// the ranks' outputs (the TP all-reduce) yields the full embedding exactly.
void embedding_shard(bf16* out, const int32_t* ids, const bf16* table, int64_t rows, int64_t dim,
                     int64_t vocab_begin, int64_t table_rows, cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
