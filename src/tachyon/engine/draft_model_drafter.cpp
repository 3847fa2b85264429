#include "tachyon/engine/draft_model_drafter.h"

#include <algorithm>
#include <unordered_set>

#include "tachyon/base/check.h"

namespace tachyon::engine {

namespace {

int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const auto [end_a, end_b] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return end_a - a.begin();
}

}  // namespace

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<runner::ModelRunner> runner, const DraftModelOptions& options,
                                     int64_t target_vocab_size)
    : runner_(std::move(runner)), options_(options), kv_(options.num_blocks, options.block_size, false) {
  TACHYON_CHECK(runner_ != nullptr) << "internal: a draft-model drafter without a runner";
  TACHYON_CHECK(runner_->vocab_size() == target_vocab_size)
      << "--draft-model has a vocabulary of " << runner_->vocab_size() << " tokens, the served model "
      << target_vocab_size << ": a draft model must share the served model's tokenizer";
  TACHYON_CHECK(options.num_tokens >= 1 && options.max_model_len > 0 && options.max_num_batched_tokens > 0 &&
                options.max_num_seqs > 0)
      << "internal: draft-model options k " << options.num_tokens << ", max_model_len " << options.max_model_len;
  auto greedy = std::make_shared<core::SamplingParams>();
  greedy->temperature = 0.0f;
  greedy_ = std::move(greedy);
}

std::vector<int32_t> DraftModelDrafter::propose(int64_t sequence_id, std::span<const int32_t> tokens) {
  DraftRequest request{sequence_id, tokens, {}};
  propose_batch(std::span<DraftRequest>(&request, 1));
  return std::move(request.drafts);
}

void DraftModelDrafter::release(int64_t sequence_id) {
  auto it = cached_.find(sequence_id);
  if (it == cached_.end()) return;
  kv_.free(it->second.block_table);
  cached_.erase(it);
}

void DraftModelDrafter::propose_batch(std::span<DraftRequest> requests) {
  // Draft KV of sequences outside this proposal (preempted by the target, or waiting) is given
  // up when the cache runs out: they catch up again when they come back.
  std::unordered_set<int64_t> proposing;
  for (const DraftRequest& r : requests) proposing.insert(r.sequence_id);
  auto evict_others = [&] {
    std::vector<int64_t> others;
    for (const auto& [id, cached] : cached_) {
      if (!proposing.contains(id)) others.push_back(id);
    }
    for (int64_t id : others) release(id);
  };
  std::vector<Drafting> drafting;
  for (DraftRequest& r : requests) {
    r.drafts.clear();
    if (r.tokens.empty()) continue;
    CachedSequence& cached = cached_[r.sequence_id];
    bool ready = prepare(r, cached);
    if (!ready) {
      evict_others();
      ready = prepare(r, cached);
    }
    if (ready) drafting.push_back({&r, &cached});
  }
  if (drafting.empty()) return;
  catch_up(drafting);
  decode(drafting);
}

bool DraftModelDrafter::prepare(DraftRequest& request, CachedSequence& cached) {
  const int64_t n = static_cast<int64_t>(request.tokens.size());
  // The last known token is always computed again: its row gives the first draft.
  const int64_t keep = std::min(common_prefix(cached.tokens, request.tokens), n - 1);
  cached.tokens.resize(static_cast<size_t>(keep));
  // The known tokens and the k - 1 drafts that are fed back.
  const int64_t slots = n + options_.num_tokens - 1;
  if (slots > options_.max_model_len) return false;
  return kv_.allocate(cached.block_table, {}, slots);
}

void DraftModelDrafter::append(core::StepPlan& plan, int64_t sequence_id, CachedSequence& cached,
                               std::span<const int32_t> tokens, int64_t first, bool sample) const {
  const int64_t block_size = options_.block_size;
  core::ScheduledSequence s;
  s.sequence_id = sequence_id;
  s.first_token = plan.num_tokens();
  s.num_tokens = static_cast<int64_t>(tokens.size());
  s.num_computed = first;
  const int64_t end = first + s.num_tokens;
  s.block_table.assign(cached.block_table.begin(), cached.block_table.begin() + (end + block_size - 1) / block_size);
  for (int64_t i = 0; i < s.num_tokens; ++i) {
    const int64_t position = first + i;
    plan.token_ids.push_back(tokens[static_cast<size_t>(i)]);
    plan.positions.push_back(position);
    plan.slot_mapping.push_back(static_cast<int64_t>(cached.block_table[static_cast<size_t>(position / block_size)]) *
                                    block_size +
                                position % block_size);
  }
  s.sample = sample;
  if (sample) {
    plan.logits_rows.push_back(plan.num_tokens() - 1);
    s.params = greedy_;
  }
  plan.sequences.push_back(std::move(s));
}

// The tokens each sequence's draft cache lacks, packed into steps of at most
// max_num_batched_tokens tokens and max_num_seqs sequences; a sequence's last piece samples its
// first draft.
void DraftModelDrafter::catch_up(std::span<Drafting> drafting) {
  size_t next = 0;
  while (next < drafting.size()) {
    core::StepPlan plan;
    plan.block_size = options_.block_size;
    std::vector<Drafting*> sampled;
    int64_t budget = options_.max_num_batched_tokens;
    while (next < drafting.size() && budget > 0 &&
           static_cast<int64_t>(plan.sequences.size()) < options_.max_num_seqs) {
      Drafting& d = drafting[next];
      const std::span<const int32_t> tokens = d.request->tokens;
      const int64_t first = static_cast<int64_t>(d.cached->tokens.size());
      const int64_t take = std::min(budget, static_cast<int64_t>(tokens.size()) - first);
      const bool sample = first + take == static_cast<int64_t>(tokens.size());
      append(plan, d.request->sequence_id, *d.cached, tokens.subspan(static_cast<size_t>(first), static_cast<size_t>(take)),
             first, sample);
      d.cached->tokens.insert(d.cached->tokens.end(), tokens.begin() + first, tokens.begin() + first + take);
      budget -= take;
      if (sample) {
        sampled.push_back(&d);
        ++next;
      }
    }
    const std::vector<int32_t> drawn = run(plan);
    for (size_t i = 0; i < sampled.size(); ++i) sampled[i]->request->drafts.push_back(drawn[i]);
  }
}

// k - 1 steps, each feeding every sequence's latest draft back as one token.
void DraftModelDrafter::decode(std::span<Drafting> drafting) {
  for (int32_t step = 1; step < options_.num_tokens; ++step) {
    for (size_t begin = 0; begin < drafting.size(); begin += static_cast<size_t>(options_.max_num_seqs)) {
      const size_t end = std::min(drafting.size(), begin + static_cast<size_t>(options_.max_num_seqs));
      core::StepPlan plan;
      plan.block_size = options_.block_size;
      for (size_t i = begin; i < end; ++i) {
        Drafting& d = drafting[i];
        const int32_t token = d.request->drafts.back();
        append(plan, d.request->sequence_id, *d.cached, std::span<const int32_t>(&token, 1),
               static_cast<int64_t>(d.cached->tokens.size()), true);
        d.cached->tokens.push_back(token);
      }
      const std::vector<int32_t> drawn = run(plan);
      for (size_t i = begin; i < end; ++i) drafting[i].request->drafts.push_back(drawn[i - begin]);
    }
  }
}

std::vector<int32_t> DraftModelDrafter::run(const core::StepPlan& plan) {
  runner_->launch(plan);
  const core::StepOutput output = runner_->wait();
  std::vector<int32_t> tokens;
  tokens.reserve(output.sequences.size());
  for (const core::SequenceOutput& s : output.sequences) tokens.push_back(s.tokens.front().token);
  return tokens;
}

}  // namespace tachyon::engine
