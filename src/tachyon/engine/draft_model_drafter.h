// DraftModelDrafter: a smaller model with the target's vocabulary proposes k tokens by greedy
// decoding (vLLM's "draft_model" method). It drives its own ModelRunner (the target's device)
// over its own paged KV cache (a KvCacheManager of its own, prefix caching off), with plans it
// builds itself, so it reuses every runner the target can use, graphs included.
//
// Per proposal, for every decoding sequence at once: the tokens the draft cache lacks (the prompt
// on the first call, the target's accepted tokens and its bonus token later) run as one chunk
// that samples the first draft, then k - 1 one-token decode steps sample the rest. The KV of
// rejected drafts is not undone: each sequence remembers the tokens its cache holds, and the
// next proposal recomputes from the first one that differs from the sequence (the longest
// common prefix stays). So the cost per target step is one catch-up step + k - 1 decodes.
//
// Greedy drafts are deterministic, so the target's exact verification keeps its output whatever
// the draft model says (runner/draft_acceptance.h). A sequence whose draft cache cannot grow (the
// draft cache is full, or its context would pass the draft's max_model_len) gets no drafts that
// step: drafting is an optimisation and never stalls the target.
// Tests: tests/unit/test_draft_model_drafter.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "tachyon/engine/drafter.h"
#include "tachyon/engine/kv_cache_manager.h"
#include "tachyon/runner/model_runner.h"

namespace tachyon::engine {

struct DraftModelOptions {
  int32_t num_tokens = 4;                  // k
  int32_t num_blocks = 0;                  // the draft runner's KV cache
  int32_t block_size = 16;
  int64_t max_model_len = 0;               // the longest context the draft runner serves
  int64_t max_num_batched_tokens = 8192;   // tokens per draft step (a catch-up longer than this is split)
  int64_t max_num_seqs = 256;              // sequences per draft step
};

class DraftModelDrafter : public Drafter {
 public:
  // Throws Error when the runner's vocabulary differs from `target_vocab_size`.
  DraftModelDrafter(std::unique_ptr<runner::ModelRunner> runner, const DraftModelOptions& options,
                    int64_t target_vocab_size);

  std::vector<int32_t> propose(int64_t sequence_id, std::span<const int32_t> tokens) override;
  void propose_batch(std::span<DraftRequest> requests) override;
  void release(int64_t sequence_id) override;

  // Tests: sequences with draft KV, and the draft cache's free blocks.
  size_t num_cached_sequences() const { return cached_.size(); }
  int32_t num_free_blocks() const { return kv_.num_free_blocks(); }

 private:
  struct CachedSequence {
    std::vector<int32_t> tokens;       // tokens whose K/V the draft cache holds, in order
    std::vector<int32_t> block_table;  // its blocks in the draft cache
  };
  // A sequence drafted in this proposal: where it stands and what it has drafted so far.
  struct Drafting {
    DraftRequest* request = nullptr;
    CachedSequence* cached = nullptr;
  };

  // Grows the draft KV of `request` to hold its tokens and k - 1 drafts; false: no drafts.
  bool prepare(DraftRequest& request, CachedSequence& cached);
  void catch_up(std::span<Drafting> drafting);
  void decode(std::span<Drafting> drafting);
  // Runs `plan` (greedy rows, one per sampled sequence) and returns its tokens in plan order.
  std::vector<int32_t> run(const core::StepPlan& plan);
  // Appends `count` tokens of `cached` from its position `first` to `plan` (sampling the last
  // when `sample`).
  void append(core::StepPlan& plan, int64_t sequence_id, CachedSequence& cached, std::span<const int32_t> tokens,
              int64_t first, bool sample) const;

  std::unique_ptr<runner::ModelRunner> runner_;
  DraftModelOptions options_;
  KvCacheManager kv_;
  std::shared_ptr<const core::SamplingParams> greedy_;
  std::unordered_map<int64_t, CachedSequence> cached_;
};

}  // namespace tachyon::engine
