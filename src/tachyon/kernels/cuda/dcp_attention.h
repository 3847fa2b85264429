// Decode context parallelism (DCP) on the GPU: the kernels around the latent attention of one
// rank of a DCP group (kernels/dcp_layout.h says which rank holds which token). The attention
// kernels themselves take the rank's share through MlaAttentionParams::dcp and write each row's
// log-sum-exp; these do the rest:
//   dcp_local_slots     the step's engine slots -> this rank's cache slots (-1: another rank's token);
//   dcp_merge_partials  the group's partial outputs of a rank's heads -> one output per row, the
//                       exact LSE merge (model/dcp_partial_attention.h is the CPU twin);
//   dcp_topk_candidates a rank's local top-k (positions of its own index keys) -> (score, global
//                       position) candidates for the exchange;
//   dcp_merge_topk      the gathered candidates -> the unsplit indexer's kept positions (the CPU
//                       twin: model/dcp_topk.h merge_topk_candidates, the same total order).
// Nothing reads device memory back; every launch is graph-capturable.
// Test: tests/gpu/test_dcp_kernels.cpp (build/tests/gpu_dcp_kernels, GPU machine only).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tachyon/kernels/dcp_layout.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// local[t] = dcp.local_slot(slots[t], block_size) for the tokens dcp.owns (by their offset in
// the engine's block of block_size tokens, which interleave * size divides), else -1; slots[t] < 0
// stays -1. local may be slots (in place).
void dcp_local_slots(int32_t* local, const int32_t* slots, int64_t num_tokens, DcpLayout dcp, int32_t block_size,
                     cudaStream_t stream);

// out: [rows, width] bf16; partial_out: [sources, rows, width] bf16; partial_lse: [sources, rows]
// f32 natural-log sum-exp, -inf for a source that attended no key (weight 0). Per row:
//   M = max_r lse_r, w_r = exp(lse_r - M), out = sum_r w_r o_r / sum_r w_r   (sources in order)
// A row no source attended gets zeros. 1 to 64 sources; width a multiple of 2.
void dcp_merge_partials(bf16* out, const bf16* partial_out, const float* partial_lse, int32_t sources, int64_t rows,
                        int32_t width, cudaStream_t stream);

// One indexer candidate as it travels (8 bytes, model::IndexCandidate's layout): position -1 is padding.
struct DcpCandidate {
  float score;
  int32_t position;
};

// out: [num_tokens, topk]: for kept[t, j] = local index k >= 0, (scores[t * scores_stride + k],
// dcp.global_position(k)); for -1, padding (0, -1).
void dcp_topk_candidates(DcpCandidate* out, const int32_t* kept, const float* scores, int64_t scores_stride,
                         int32_t num_tokens, int32_t topk, DcpLayout dcp, cudaStream_t stream);

// kept: [num_tokens, topk]: per token t, of the valid candidates gathered[r, t, :] over the
// sources r (gathered: [sources, num_tokens, topk]), the first min(topk, valid) in the order
// score descending, then position ascending, written as positions ascending, -1 after. Every
// position appears at most once among a token's candidates (each is one rank's). At most 16,384
// candidates (sources * topk; checked): a group of 8 at DeepSeek's top-2048.
void dcp_merge_topk(int32_t* kept, const DcpCandidate* gathered, int32_t sources, int32_t num_tokens, int32_t topk,
                    cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
