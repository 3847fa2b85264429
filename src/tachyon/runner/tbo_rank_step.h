// One rank's two-batch-overlap (TBO) step on CPU thread ranks: the step's two micro-batches
// (tbo_split.h) run through the model's forward (model/tbo_forward.h), micro-batch 0 on the rank's
// worker thread and micro-batch 1 on a second thread, taking turns on the rank's compute stream;
// every collective of both goes through the comm-phase helper (tbo_comm_phase.h) onto the rank's
// comm stream, so while one micro-batch's expert dispatch, combine or all-reduce runs there, the
// other's attention and dense layers compute. With check_order the step's trace goes through the
// happens-before checker (tbo_order.h) and an unordered access fails the step (TboOrderError).
// Each micro-batch's comm arena is planned at the start of the step from its token count.
// Used by TpCpuModelRunner. Tests: tests/unit/test_tbo_families.cpp, test_tbo_order.cpp.
#pragma once

#include <vector>

#include "tachyon/dist/communicator.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/runner/tbo_comm_phase.h"
#include "tachyon/runner/tbo_split.h"

namespace tachyon::runner {

struct TboOptions {
  bool enabled = false;  // --enable-two-batch-overlap / --tbo
#ifdef NDEBUG
  bool check_order = false;  // the happens-before check of every TBO step: on in tests and debug builds
#else
  bool check_order = true;
#endif
  TboHooks hooks;  // tests only
};

// group: the rank's TP group (also its expert group). Returns the rank's full logits
// [rows of both micro-batches, vocab]: the step's logits rows in plan order. With `hidden`, also
// every token's last hidden state before the final norm, [tokens of both micro-batches, hidden]:
// the step's tokens in plan order (the split keeps them in order: tbo_split.h).
std::vector<float> run_tbo_rank_step(const model::TpDenseModel& model, PagedKvCache& cache, dist::Communicator& group,
                                     const TboSplit& split, const TboOptions& options,
                                     std::vector<float>* hidden = nullptr);

}  // namespace tachyon::runner
