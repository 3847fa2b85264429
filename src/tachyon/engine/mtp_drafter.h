// MtpDrafter: the served model's own multi-token-prediction modules (DeepSeek-V3's, model/mtp.h)
// propose k tokens (--speculative-method mtp), on the CPU runner, which returns every row's last
// hidden state before the final norm when the plan asks (StepPlan::return_hidden_states).
//
// Rows. Module m's row at position p reads (H^{m-1}_p, token p + m + 1) and predicts token
// p + m + 2, where H^{-1} is the main model's hidden state and H^{m-1} module m-1's output h' (the
// paper's depth chain). A row is real when its token is known and accepted; each module keeps a
// cache of its real rows only (MtpModules::Cache), so module m's cache is one row behind module
// m-1's, and the hidden states of rows whose token is still unknown wait beside it
// (ModuleRows::inputs): the last row of a prefill chunk that does not reach the prompt's end,
// and each deeper module's newest row.
//
// observe() sees every step after the scheduler applied it. The valid rows of a sequence are its
// non-draft rows and its accepted draft rows (1 + accepted output tokens, trimmed at a stop); the
// token after each is the next one of the plan's slice, the accepted drafts, then the sampled
// token. Rows below what the module caches already hold are skipped (recompute after preemption
// shows them again). A sequence that sampled then drafts, greedily (argmax) so that the same
// sequence always gets the same drafts:
//   draft 1     module 0's newest real row (position E-1 when token E was just sampled);
//   draft j+1   module j (j < number of modules) over its rows after its real ones, up to E-1,
//               reading module j-1's outputs there and the drafts as tokens;
//               past the last module, the last module again, one row further along, reading its
//               own previous output h' and the previous draft (with one module, as vLLM and
//               SGLang chain it; the deepest module is the one trained on the deepest inputs).
// The chain's rows are speculative: after drafting each cache's length is reset to its real rows
// (the rows are overwritten later), so rejected drafts never need undoing.
//
// A sequence whose step starts past the rows its state holds (a prefix-cache hit: a sibling of
// an n > 1 request, a repeated prompt) starts its modules' context at that position: the drafts
// then attend less context (RoPE is relative, so the positions stay consistent) but remain
// drafts; verification keeps the output the model's either way.
// propose() returns the drafts of the last observed step when the sequence still has the token
// count they were computed for; a sequence that has sampled nothing yet (its next step is the
// last prompt token of a chunked prefill) gets none.
// The engine reaches models only through interfaces (tests/unit/check_layers.py): the modules'
// forward is MtpModules below, which app/mtp_modules.h implements over model::MtpModule.
// Tests: tests/unit/test_engine_mtp.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tachyon/engine/drafter.h"

namespace tachyon::engine {

// A model's MTP modules as the drafter drives them: module m's forward over one sequence's rows
// after those its row cache holds.
class MtpModules {
 public:
  // One module's cached rows of one sequence. Lowering `length` drops the newest rows.
  struct Cache {
    virtual ~Cache() = default;
    int64_t length = 0;
  };
  struct Output {
    std::vector<float> logits;  // [n, vocab] each row's prediction
    std::vector<float> hidden;  // [n, hidden] each row's h' (the next module's input)
  };
  virtual ~MtpModules() = default;
  virtual int64_t num_modules() const = 0;
  virtual int64_t hidden_size() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::unique_ptr<Cache> make_cache(int64_t module) const = 0;
  // hidden: [n, hidden] the rows' input hidden states; next_tokens: [n] the token each row reads.
  // The rows follow the cache's `length` rows and are appended to it (length grows by n).
  virtual Output forward(int64_t module, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                         Cache& cache) const = 0;
  // A cache's `length` rows as values, and a cache of `module` holding such values (nullptr when
  // they are not `length` rows of its cache): a sequence's rows moving to another server.
  virtual std::vector<float> copy_rows(const Cache& cache) const = 0;
  virtual std::unique_ptr<Cache> cache_with_rows(int64_t module, std::span<const float> rows, int64_t length) const = 0;
};

class MtpDrafter : public Drafter {
 public:
  // `modules`: the model's MTP modules (at least one); `num_tokens`: k drafts per step.
  MtpDrafter(std::unique_ptr<MtpModules> modules, int32_t num_tokens);

  std::vector<int32_t> propose(int64_t sequence_id, std::span<const int32_t> tokens) override;
  void release(int64_t sequence_id) override { states_.erase(sequence_id); }
  bool needs_hidden_states() const override { return true; }
  void observe(const core::StepPlan& plan, const core::StepOutput& output) override;
  // A sequence's module rows, pending inputs and drafts as bytes, and back (drafter.h). An import
  // is checked against the rows the drafter keeps for a sequence of its tokens (each module's
  // real rows one behind the module before), so a state that passes continues exactly as the
  // exporting drafter would have; drafts made for another k are drafted again here from module
  // 0's newest row, which travels with them (so the two servers' k need not agree).
  bool moves_state_with_kv() const override { return true; }
  std::string export_state(int64_t sequence_id) const override;
  bool import_state(int64_t sequence_id, std::span<const int32_t> tokens, const std::string& state) override;

  // Tests: sequences with module state, and where a sequence's module context starts (-1: none).
  size_t num_sequences() const { return states_.size(); }
  int64_t context_begin(int64_t sequence_id) const {
    auto it = states_.find(sequence_id);
    return it == states_.end() ? -1 : it->second.begin;
  }

 private:
  // One module's rows of one sequence.
  struct ModuleRows {
    std::unique_ptr<MtpModules::Cache> cache;  // its real rows: row r is position begin + r
    std::vector<float> inputs;  // [n, hidden] input hidden states of the next rows (tokens not known yet)
  };
  // Module 0's output for the newest row it ran.
  struct NewestRow {
    int64_t position = -1;
    int32_t argmax = 0;          // its greedy prediction
    std::vector<float> hidden;   // [hidden] its h'
  };
  struct SequenceState {
    int64_t begin = 0;                // the position of every module's row 0
    std::vector<int32_t> tokens;      // the sequence's tokens from position begin, as far as known
    std::vector<ModuleRows> modules;  // [num_used_]
    std::vector<int32_t> drafts;      // proposed after the last observed step
    int64_t drafts_for = -1;          // the sequence's token count they continue
    NewestRow drafted_from;           // module 0's row the drafts start from (exported: another k redrafts)
  };

  void observe_sequence(const core::StepPlan& plan, const core::ScheduledSequence& entry,
                        const core::SequenceOutput* output, std::span<const float> hidden_states);
  // The state that continues at `first_position`: the existing one, or a fresh one starting there.
  SequenceState& state_for(int64_t sequence_id, int64_t first_position);
  // Runs every module over its rows that became real.
  NewestRow advance(SequenceState& state) const;
  std::vector<int32_t> draft(SequenceState& state, const NewestRow& newest) const;
  int64_t rows_of(const std::vector<float>& hidden) const {
    return static_cast<int64_t>(hidden.size()) / hidden_size_;
  }

  std::unique_ptr<MtpModules> modules_;
  int32_t num_tokens_ = 1;
  int64_t num_used_ = 1;  // min(modules, k): the modules whose rows are kept
  int64_t hidden_size_ = 0;
  std::unordered_map<int64_t, SequenceState> states_;
};

}  // namespace tachyon::engine
