// The device side of MTP drafting on the GPU (runner/cuda/cuda_mtp_drafter.h): after a step's
// sampler, these kernels decide on the device what the host's wait() will decide (which drafts
// each sequence accepts), build the MTP module's input rows from it, and chain the module over
// its own drafts, so the next step's drafts come back with the step's tokens and no host round
// trip sits between the target's forward and the module's.
// Tests: tests/gpu/test_cuda_speculative.cpp (MTP on the GPU against the plain run and against
// the CPU drafter's acceptance).
#pragma once

#include <cstdint>

#include "tachyon/kernels/cuda/sampling.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// One sampled sequence of a step, as the host lays it out for the drafter (plan order).
struct MtpSequence {
  // Its first logits (= sampled) row; its rows are first_row .. first_row + num_drafts. -1: a
  // padding record (a graph drafts a fixed count of sequences): no rows, no drafts.
  int32_t first_row = 0;
  int32_t num_drafts = 0;  // drafts it carried this step
  int32_t table_seq = 0;   // the attention sequence whose block-table row holds all of its blocks
  int32_t capacity = 0;    // positions its blocks hold (blocks * block size): chain rows stop there
  uint64_t seed = 0;       // the accept rule's key (runner/draft_acceptance.h)
  int64_t num_output_tokens = 0;  // outputs before the step: row i's step is this + i
};
static_assert(sizeof(MtpSequence) == 32);

// Per sequence s, the host's accept walk (runner/draft_acceptance.h) over its rows: row i emits
// draft i when it accepts it (equal to the drawn token, or the keyed forced draw when
// forced_acceptance >= 0) and the walk goes on; the first row that does not, or the last row,
// emits its drawn token and ends it. emitted[first_row + i] = the token row i emits (rows after
// the end: their drawn token, never read as real); last_row[s] = the token index
// (logits_rows[...]) of the row that ended the walk (0 for a padding record). Drafts are the
// verify rows' tokens: draft i of s is token_ids[logits_rows[first_row + i + 1]].
void mtp_accept(int32_t* emitted, int32_t* last_row, const SampledRow* sampled, const int32_t* token_ids,
                const int32_t* logits_rows, const MtpSequence* sequences, int32_t num_sequences,
                float forced_acceptance, cudaStream_t stream);

// The module's first pass over the step's rows: row t reads the token after it, next_known[t]
// when the host knew it (>= 0), else emitted[-next_known[t] - 1] (a token of this step), and is
// roped at positions[t] + 1 (model/mtp.h: a row is roped at the position of the token it embeds).
void mtp_module_rows(int32_t* tokens, int32_t* rope_positions, const int32_t* next_known, const int32_t* emitted,
                     const int32_t* positions, int32_t num_tokens, cudaStream_t stream);

// x's input, [rows, 2 * dim] bf16: [enorm(embed[tokens[r]]) | hnorm(hidden[r'])], where r' = r,
// or hidden_rows[r] when given. Each RMSNorm as the GPU's rms_norm rounds (f32 math, the
// normalized value rounded to bf16, times the weight, rounded).
void mtp_front(bf16* out, const int32_t* tokens, const bf16* embed, const bf16* enorm, const bf16* hidden,
               const int32_t* hidden_rows, const bf16* hnorm, int32_t rows, int32_t dim, float eps,
               cudaStream_t stream);

// Chain pass j >= 1 of the module: one decode row per sequence s, at position
// q = positions[last_row[s]] + j, reading drafts[s * stride + j - 1] and roped at q + 1. A row
// whose previous draft is missing (< 0), whose position its blocks do not hold, or whose record
// is padding is a padding row (slot -1, context 0), and its draft is -1. Writes the pass's
// metadata: tokens, rope positions, slots, context lengths, query starts [num_sequences + 1],
// logits rows (s); pass 1 also copies each sequence's block-table row (from its table_seq row of
// `step_tables`) as far as the step's last pass reads it, so passes j > 1 copy nothing.
struct MtpChainRows {
  int32_t* tokens;
  int32_t* rope_positions;
  int32_t* slots;
  int32_t* context_lens;
  int32_t* query_starts;
  int32_t* block_tables;
  int32_t* logits_rows;
};
void mtp_chain_rows(const MtpChainRows& out, int32_t j, const MtpSequence* sequences, int32_t num_sequences,
                    const int32_t* last_row, const int32_t* positions, const int32_t* step_tables,
                    int32_t table_stride, int32_t block_size, const int32_t* drafts, int32_t drafts_stride,
                    cudaStream_t stream);

// out[r * out_stride] = argmax of logits row r ([rows, vocab] f32), ties to the lowest id; -1
// where slots is given and slots[r] < 0 (a padding row of the chain).
void argmax_rows(int32_t* out, int32_t out_stride, const float* logits, int32_t rows, int32_t vocab,
                 const int32_t* slots, cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
