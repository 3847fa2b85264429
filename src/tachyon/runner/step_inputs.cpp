#include "tachyon/runner/step_inputs.h"

#include <algorithm>
#include <cstring>

#include "tachyon/base/check.h"

namespace tachyon::runner {
namespace {

constexpr size_t kAlign = 256;  // every array starts on its own 256-byte line (vector loads, cache lines)

size_t align_up(size_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

int32_t* int32_at(std::byte* base, size_t offset) { return reinterpret_cast<int32_t*>(base + offset); }

}  // namespace

StepInputLayout StepInputLayout::make(const StepInputLimits& limits) {
  TACHYON_CHECK(limits.max_tokens >= limits.max_seqs && limits.max_seqs > 0 && limits.max_blocks_per_seq > 0)
      << "step input limits: max_tokens " << limits.max_tokens << ", max_seqs " << limits.max_seqs
      << ", max_blocks_per_seq " << limits.max_blocks_per_seq;
  TACHYON_CHECK(limits.logits_rows_capacity() >= limits.max_seqs && limits.logits_rows_capacity() <= limits.max_tokens)
      << "step input limits: max_logits_rows " << limits.max_logits_rows << " outside [max_seqs " << limits.max_seqs
      << ", max_tokens " << limits.max_tokens << "]";
  StepInputLayout layout;
  size_t offset = 0;
  auto take = [&](size_t bytes) {
    const size_t at = offset;
    offset = align_up(offset + bytes);
    return at;
  };
  const size_t tokens = static_cast<size_t>(limits.max_tokens) * sizeof(int32_t);
  const size_t seqs = static_cast<size_t>(limits.max_seqs) * sizeof(int32_t);
  const size_t logits_rows = static_cast<size_t>(limits.logits_rows_capacity());
  layout.token_ids = take(tokens);
  layout.positions = take(tokens);
  layout.slot_mapping = take(tokens);
  layout.logits_rows = take(logits_rows * sizeof(int32_t));
  layout.context_lens = take(seqs);
  layout.query_starts = take(seqs + sizeof(int32_t));
  layout.num_deferred = take(sizeof(int32_t));
  layout.deferred = take(2 * seqs);
  layout.sampling_rows = take(logits_rows * limits.sampling_row_bytes);
  layout.runner = take(limits.runner_bytes);
  layout.block_tables = take(seqs * static_cast<size_t>(limits.max_blocks_per_seq));
  layout.variable = offset;
  layout.block_table_stride = limits.max_blocks_per_seq;
  return layout;
}

bool is_decode_only(const core::StepPlan& plan) {
  return !plan.empty() && std::all_of(plan.sequences.begin(), plan.sequences.end(), [](const auto& s) {
    return s.num_tokens == 1 && s.sample;
  });
}

bool runs_as_decode_rows(const core::StepPlan& plan) {
  return !plan.empty() && std::all_of(plan.sequences.begin(), plan.sequences.end(), [](const auto& s) {
    return s.sample && s.num_tokens == 1 + s.num_draft_tokens();
  });
}

StepInputSummary fill_step_inputs(const core::StepPlan& plan, const StepInputLayout& layout,
                                  const StepInputLimits& limits, std::byte* staging, int32_t padded_seqs) {
  const int32_t num_tokens = static_cast<int32_t>(plan.num_tokens());
  const bool rows_as_decodes = runs_as_decode_rows(plan);
  // Attention sequences: one per row of a decode or verify step, else the plan's sequences.
  const int32_t num_seqs = rows_as_decodes ? num_tokens : static_cast<int32_t>(plan.sequences.size());
  const int32_t padding = std::max(0, padded_seqs - num_seqs);
  TACHYON_CHECK(padding == 0 || plan.empty() || rows_as_decodes) << "internal: only decode and verify steps are padded";
  TACHYON_CHECK(num_tokens + padding <= limits.max_tokens)
      << "step of " << num_tokens + padding << " tokens exceeds max_num_batched_tokens " << limits.max_tokens;
  TACHYON_CHECK(num_seqs + padding <= limits.max_seqs)
      << "step of " << num_seqs + padding << (rows_as_decodes ? " decode rows (sequences and their drafts)" : " sequences")
      << " exceeds the " << limits.max_seqs << " this runner was sized for (max_num_seqs, times 1 + k when it verifies k drafts)";

  // Drafts add logits rows beyond one per sequence; the runner sized them from its k.
  TACHYON_CHECK(plan.logits_rows.size() + static_cast<size_t>(padding) <= static_cast<size_t>(limits.logits_rows_capacity()))
      << "step of " << plan.logits_rows.size() + static_cast<size_t>(padding) << " logits rows (1 + drafts per sampled "
      << "sequence) exceeds the " << limits.logits_rows_capacity() << " this runner was sized for";

  StepInputSummary summary;
  summary.num_tokens = num_tokens + padding;
  summary.num_seqs = num_seqs + padding;
  summary.num_sampled = static_cast<int32_t>(plan.logits_rows.size());
  summary.num_logits_rows = summary.num_sampled + padding;
  summary.decode_only = rows_as_decodes;

  int32_t* token_ids = int32_at(staging, layout.token_ids);
  int32_t* positions = int32_at(staging, layout.positions);
  int32_t* slots = int32_at(staging, layout.slot_mapping);
  for (int32_t t = 0; t < num_tokens; ++t) {
    token_ids[t] = plan.token_ids[static_cast<size_t>(t)];
    positions[t] = static_cast<int32_t>(plan.positions[static_cast<size_t>(t)]);
    slots[t] = static_cast<int32_t>(plan.slot_mapping[static_cast<size_t>(t)]);
  }
  int32_t* logits_rows = int32_at(staging, layout.logits_rows);
  for (int32_t r = 0; r < summary.num_sampled; ++r) logits_rows[r] = static_cast<int32_t>(plan.logits_rows[static_cast<size_t>(r)]);

  int32_t* context_lens = int32_at(staging, layout.context_lens);
  int32_t* query_starts = int32_at(staging, layout.query_starts);
  int32_t* block_tables = int32_at(staging, layout.block_tables);
  // Attention sequence a: `tokens` rows from token `first`, at context `context`, over `blocks`.
  auto attention_sequence = [&](int32_t a, int64_t first, int64_t tokens, int64_t context,
                                const std::vector<int32_t>& blocks, size_t num_blocks) {
    TACHYON_CHECK(num_blocks <= static_cast<size_t>(layout.block_table_stride))
        << "sequence of " << context << " tokens needs " << num_blocks << " KV blocks, more than the "
        << layout.block_table_stride << " that max_model_len allows";
    context_lens[a] = static_cast<int32_t>(context);
    query_starts[a] = static_cast<int32_t>(first);
    std::copy(blocks.begin(), blocks.begin() + static_cast<long>(num_blocks),
              block_tables + static_cast<size_t>(a) * layout.block_table_stride);
    summary.max_query_len = std::max(summary.max_query_len, static_cast<int32_t>(tokens));
    summary.max_context_len = std::max(summary.max_context_len, static_cast<int32_t>(context));
  };
  if (rows_as_decodes) {
    int32_t row = 0;
    for (const core::ScheduledSequence& seq : plan.sequences) {
      TACHYON_CHECK(seq.first_token == row) << "internal: sequence " << seq.sequence_id << " starts at token "
                                            << seq.first_token << ", expected " << row;
      for (int64_t i = 0; i < seq.num_tokens; ++i, ++row) {
        const int64_t context = seq.num_computed + i + 1;
        // The blocks this row's context spans (all of them when the plan gives no block size).
        const size_t spanned = plan.block_size > 0 ? static_cast<size_t>((context + plan.block_size - 1) / plan.block_size)
                                                   : seq.block_table.size();
        TACHYON_CHECK(spanned <= seq.block_table.size())
            << "internal: sequence " << seq.sequence_id << " has " << seq.block_table.size() << " KV blocks for "
            << context << " tokens";
        attention_sequence(row, row, 1, context, seq.block_table, spanned);
      }
    }
    summary.num_decode_seqs = num_seqs;
  } else {
    bool leading = true;
    for (int32_t s = 0; s < num_seqs; ++s) {
      const core::ScheduledSequence& seq = plan.sequences[static_cast<size_t>(s)];
      leading = leading && seq.num_tokens == 1;
      if (leading) summary.num_decode_seqs = s + 1;
      attention_sequence(s, seq.first_token, seq.num_tokens, seq.num_computed + seq.num_tokens, seq.block_table,
                         seq.block_table.size());
      if (!leading) summary.prefill_context_tokens += seq.num_computed + seq.num_tokens;
    }
  }
  for (int32_t p = 0; p < padding; ++p) {
    const int32_t row = num_tokens + p;
    token_ids[row] = 0;
    positions[row] = 0;
    slots[row] = -1;
    logits_rows[summary.num_sampled + p] = row;
    context_lens[num_seqs + p] = 0;
    query_starts[num_seqs + p] = row;
  }
  query_starts[summary.num_seqs] = summary.num_tokens;
  // Deferred tokens: at most one per sequence (its first token of the step, a decode's only one).
  TACHYON_CHECK(plan.deferred_tokens.size() <= static_cast<size_t>(limits.max_seqs))
      << "internal: " << plan.deferred_tokens.size() << " deferred tokens for at most " << limits.max_seqs << " sequences";
  int32_t* deferred = int32_at(staging, layout.deferred);
  for (const core::DeferredToken& d : plan.deferred_tokens) {
    TACHYON_CHECK(d.token_index >= 0 && d.token_index < num_tokens && d.sampled_index >= 0 &&
                  d.sampled_index < limits.max_seqs)
        << "internal: deferred token " << d.token_index << " <- sampled row " << d.sampled_index;
    deferred[2 * summary.num_deferred] = static_cast<int32_t>(d.token_index);
    deferred[2 * summary.num_deferred + 1] = static_cast<int32_t>(d.sampled_index);
    ++summary.num_deferred;
  }
  *int32_at(staging, layout.num_deferred) = summary.num_deferred;
  if (summary.num_decode_seqs == num_seqs) summary.num_decode_seqs = summary.num_seqs;  // padding decodes too
  summary.bytes_used = layout.block_tables + static_cast<size_t>(summary.num_seqs) *
                                                 static_cast<size_t>(layout.block_table_stride) * sizeof(int32_t);
  return summary;
}

}  // namespace tachyon::runner
