// One rank's TBO step (see tbo_rank_step.h).
#include "tachyon/runner/tbo_rank_step.h"

#include <exception>
#include <memory>
#include <thread>

#include "tachyon/base/check.h"
#include "tachyon/model/tbo_forward.h"
#include "tachyon/runner/tbo_communicator.h"

namespace tachyon::runner {

std::vector<float> run_tbo_rank_step(const model::TpDenseModel& model, PagedKvCache& cache, dist::Communicator& group,
                                     const TboSplit& split, const TboOptions& options, std::vector<float>* hidden) {
  const model::ModelConfig& config = model.config();
  std::array<std::unique_ptr<TboArena>, 2> arenas;  // planned up front, released after the comm stream's last event
  for (int mb = 0; mb < 2; ++mb) {
    const core::StepPlan& plan = split[static_cast<size_t>(mb)];
    arenas[static_cast<size_t>(mb)] = std::make_unique<TboArena>(
        tbo_arena_bytes(config, plan.num_tokens(), static_cast<int64_t>(plan.logits_rows.size()), group.size()), 2 * mb);
  }
  TboTrace trace;
  TboComputeStream compute;
  std::array<std::vector<float>, 2> logits;  // [mb] [rows of mb, vocab]
  std::array<std::vector<float>, 2> hiddens;  // [mb] [tokens of mb, hidden], when asked
  std::array<std::exception_ptr, 2> errors;
  {
    TboCommStream stream;  // joined at the end of this block, before the arenas go
    TboCommPhases phases(group, compute, stream, trace, {arenas[0].get(), arenas[1].get()}, options.hooks);
    auto run_micro_batch = [&](int mb) {
      try {
        compute.enter(mb);
        const core::StepPlan& plan = split[static_cast<size_t>(mb)];
        TboCommunicator comm(phases, mb);
        PagedAttentionBackend attention(config, cache, plan);
        const model::ForwardBatch batch{plan.token_ids, plan.positions, plan.logits_rows};
        const model::ForwardHook hook =
            hidden != nullptr ? model::keep_final_hidden(hiddens[static_cast<size_t>(mb)]) : nullptr;
        logits[static_cast<size_t>(mb)] = model::forward_over(model, comm, batch, attention, hook);
      } catch (...) {
        errors[static_cast<size_t>(mb)] = std::current_exception();
      }
      compute.finish(mb);
    };
    std::thread second(run_micro_batch, 1);
    run_micro_batch(0);
    second.join();
    phases.finish_step();
  }
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  if (options.check_order) {
    const std::vector<TboOp> ops = trace.ops();
    const std::string violation = check_happens_before(ops);
    if (!violation.empty()) {
      throw TboOrderError("two-batch overlap, rank " + std::to_string(group.rank()) +
                          ": the happens-before check failed: " + violation);
    }
  }
  if (hidden != nullptr) {
    *hidden = std::move(hiddens[0]);
    hidden->insert(hidden->end(), hiddens[1].begin(), hiddens[1].end());
  }
  std::vector<float> out = std::move(logits[0]);
  out.insert(out.end(), logits[1].begin(), logits[1].end());
  return out;
}

}  // namespace tachyon::runner
