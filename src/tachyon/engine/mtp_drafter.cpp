// The MTP drafter's row bookkeeping (which rows are real, which wait for their token) and its
// draft chain; the module forward itself is model/mtp.cpp's, behind MtpModules.
#include "tachyon/engine/mtp_drafter.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::engine {

namespace {

// The greedy token of the last row of logits [n, vocab].
int32_t last_row_argmax(const std::vector<float>& logits, int64_t vocab) {
  const auto row = logits.end() - vocab;
  return static_cast<int32_t>(std::max_element(row, logits.end()) - row);
}

}  // namespace

MtpDrafter::MtpDrafter(std::unique_ptr<MtpModules> modules, int32_t num_tokens)
    : modules_(std::move(modules)), num_tokens_(num_tokens) {
  TACHYON_CHECK(modules_ != nullptr && modules_->num_modules() > 0) << "internal: an MTP drafter without MTP modules";
  TACHYON_CHECK(num_tokens_ >= 1) << "internal: an MTP drafter proposing " << num_tokens_ << " tokens";
  num_used_ = std::min<int64_t>(modules_->num_modules(), num_tokens_);
  hidden_size_ = modules_->hidden_size();
}

std::vector<int32_t> MtpDrafter::propose(int64_t sequence_id, std::span<const int32_t> tokens) {
  auto it = states_.find(sequence_id);
  if (it == states_.end()) return {};
  const SequenceState& s = it->second;
  if (s.drafts.empty() || s.drafts_for != static_cast<int64_t>(tokens.size()) || tokens.back() != s.tokens.back()) {
    return {};
  }
  return s.drafts;
}

void MtpDrafter::observe(const core::StepPlan& plan, const core::StepOutput& output) {
  if (plan.empty()) return;
  TACHYON_CHECK(static_cast<int64_t>(output.hidden_states.size()) == plan.num_tokens() * hidden_size_)
      << "--speculative-method mtp needs the model's hidden states of every step; the runner returned "
      << output.hidden_states.size() << " values for " << plan.num_tokens() << " tokens of " << hidden_size_
      << " (only the CPU runner returns them)";
  size_t next_sample = 0;
  for (const core::ScheduledSequence& entry : plan.sequences) {
    const core::SequenceOutput* out = nullptr;
    if (entry.sample) {
      TACHYON_CHECK(next_sample < output.sequences.size())
          << "internal: " << output.sequences.size() << " outputs for more sampled sequences";
      out = &output.sequences[next_sample++];
      if (out->tokens.empty()) continue;  // nothing was applied to it
    }
    observe_sequence(plan, entry, out, output.hidden_states);
  }
}

void MtpDrafter::observe_sequence(const core::StepPlan& plan, const core::ScheduledSequence& entry,
                                  const core::SequenceOutput* output, std::span<const float> hidden_states) {
  const int64_t h = hidden_size_, first = entry.num_computed;
  const int64_t num_known = entry.num_tokens - entry.num_draft_tokens();  // rows of tokens known before the step
  // Valid rows first .. first + rows - 1: the known tokens' and the accepted drafts'.
  const int64_t rows = num_known + (output != nullptr ? output->num_accepted() : 0);
  // The tokens the step shows from position `first`: the known ones, then the accepted drafts
  // and the sampled token (which follows the last valid row).
  const auto slice = plan.token_ids.begin() + entry.first_token;
  std::vector<int32_t> tokens(slice, slice + num_known);
  if (output != nullptr) {
    for (const core::SampledToken& t : output->tokens) tokens.push_back(t.token);
  }

  SequenceState& s = state_for(entry.sequence_id, first);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t at = first + static_cast<int64_t>(i) - s.begin;
    if (at < static_cast<int64_t>(s.tokens.size())) {
      TACHYON_CHECK(s.tokens[static_cast<size_t>(at)] == tokens[i])
          << "internal: sequence " << entry.sequence_id << " shows token " << tokens[i] << " at position "
          << first + static_cast<int64_t>(i) << " where the MTP drafter saw " << s.tokens[static_cast<size_t>(at)];
      continue;
    }
    s.tokens.push_back(tokens[i]);
  }
  ModuleRows& module0 = s.modules.front();
  const int64_t hidden_end = s.begin + module0.cache->length + rows_of(module0.inputs);  // next row it lacks
  for (int64_t p = std::max(first, hidden_end); p < first + rows; ++p) {
    const auto row = hidden_states.begin() + (entry.first_token + p - first) * h;
    module0.inputs.insert(module0.inputs.end(), row, row + h);
  }
  const NewestRow newest = advance(s);
  s.drafts.clear();
  s.drafts_for = -1;
  if (output == nullptr) return;
  // The sampled token is at position first + rows; module 0's row before it gives draft 1.
  if (newest.position != first + rows - 1) return;
  s.drafts = draft(s, newest);
  s.drafts_for = first + rows + 1;
  s.drafted_from = newest;
}

MtpDrafter::SequenceState& MtpDrafter::state_for(int64_t sequence_id, int64_t first_position) {
  auto it = states_.find(sequence_id);
  if (it != states_.end()) {
    const SequenceState& s = it->second;
    const int64_t hidden_end = s.begin + s.modules.front().cache->length + rows_of(s.modules.front().inputs);
    if (first_position >= s.begin && first_position <= hidden_end) return it->second;
  }
  // New, or the step starts past its rows (a prefix-cache hit) or before them (a recompute
  // with more context than it had): start at this step.
  SequenceState fresh;
  fresh.begin = first_position;
  for (int64_t m = 0; m < num_used_; ++m) {
    fresh.modules.push_back({modules_->make_cache(m), {}});
  }
  return states_.insert_or_assign(sequence_id, std::move(fresh)).first->second;
}

MtpDrafter::NewestRow MtpDrafter::advance(SequenceState& s) const {
  const int64_t h = hidden_size_, known = static_cast<int64_t>(s.tokens.size());
  const int64_t vocab = modules_->vocab_size();
  NewestRow newest;
  for (int64_t m = 0; m < num_used_; ++m) {
    ModuleRows& rows = s.modules[static_cast<size_t>(m)];
    const int64_t length = rows.cache->length;
    // Row r reads token r + m + 1 (from begin): real once that token is known.
    const int64_t n = std::min(rows_of(rows.inputs), std::max<int64_t>(0, known - m - 1 - length));
    if (n == 0) continue;
    const MtpModules::Output out = modules_->forward(
        m, std::span<const float>(rows.inputs).first(static_cast<size_t>(n * h)),
        std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(length + m + 1), static_cast<size_t>(n)),
        *rows.cache);
    rows.inputs.erase(rows.inputs.begin(), rows.inputs.begin() + n * h);
    if (m + 1 < num_used_) {
      std::vector<float>& deeper = s.modules[static_cast<size_t>(m + 1)].inputs;
      deeper.insert(deeper.end(), out.hidden.begin(), out.hidden.end());
    }
    if (m == 0) {
      newest.position = s.begin + length + n - 1;
      newest.argmax = last_row_argmax(out.logits, vocab);
      newest.hidden.assign(out.hidden.end() - h, out.hidden.end());
    }
  }
  return newest;
}

std::vector<int32_t> MtpDrafter::draft(SequenceState& s, const NewestRow& newest) const {
  const int64_t h = hidden_size_, vocab = modules_->vocab_size();
  const int64_t known = static_cast<int64_t>(s.tokens.size());  // tokens begin .. E
  std::vector<int64_t> real(static_cast<size_t>(num_used_));
  for (int64_t m = 0; m < num_used_; ++m) {
    real[static_cast<size_t>(m)] = s.modules[static_cast<size_t>(m)].cache->length;
  }
  std::vector<int32_t> drafts = {newest.argmax};
  // The token at `index` from begin: a known one, then the drafts.
  const auto token_at = [&](int64_t index) {
    return index < known ? s.tokens[static_cast<size_t>(index)] : drafts[static_cast<size_t>(index - known)];
  };
  std::vector<float> spec;  // the previous step's outputs past its module's real rows (up to E-1)
  std::vector<float> last_hidden = newest.hidden;
  for (int32_t j = 1; j < num_tokens_; ++j) {
    MtpModules::Output out;
    if (j < num_used_) {
      // Module j over its rows after the real ones, up to E-1: inputs from module j-1's real
      // rows that waited for their token, then module j-1's speculative rows of this chain.
      ModuleRows& rows = s.modules[static_cast<size_t>(j)];
      std::vector<float> inputs = rows.inputs;
      inputs.insert(inputs.end(), spec.begin(), spec.end());
      const int64_t n = rows_of(inputs), first = rows.cache->length;
      TACHYON_CHECK(n > 0 && first + n == known - 1)
          << "internal: MTP module " << j << " drafts rows " << first << ".." << first + n << " of " << known - 1;
      std::vector<int32_t> next(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) next[static_cast<size_t>(i)] = token_at(first + i + j + 1);
      out = modules_->forward(j, inputs, next, *rows.cache);
      spec = out.hidden;
    } else {
      // Past the last module: it runs again one row further, on its own previous output.
      out = modules_->forward(num_used_ - 1, last_hidden, std::span<const int32_t>(&drafts.back(), 1),
                              *s.modules.back().cache);
    }
    last_hidden.assign(out.hidden.end() - h, out.hidden.end());
    drafts.push_back(last_row_argmax(out.logits, vocab));
  }
  // The chain's rows were speculative: the caches keep only the real ones.
  for (int64_t m = 0; m < num_used_; ++m) {
    s.modules[static_cast<size_t>(m)].cache->length = real[static_cast<size_t>(m)];
  }
  return drafts;
}

}  // namespace tachyon::engine
