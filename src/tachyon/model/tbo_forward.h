// Internal to the TBO runner (runner/tbo_rank_step.h): a TpDenseModel's forward with another
// communicator in place of the groups it was built with. Two-batch overlap runs each micro-batch
// through the same forward as TpDenseModel::forward (dense_forward.h, tp_moe.h), but every
// collective must go through the comm-phase helper (runner/tbo_comm_phase.h), so the micro-batch
// hands in its own communicator, serving as the TP group and, under expert parallelism, as the
// expert group (the TP group itself: --enable-expert-parallel without --dp).
// Tests: tests/unit/test_tbo_families.cpp.
#pragma once

#include <vector>

#include "tachyon/dist/communicator.h"
#include "tachyon/model/tp_dense_model.h"

namespace tachyon::model {

// group: rank and size must be the model's TP rank and size. Returns [batch.logits_rows, vocab];
// hook as TpDenseModel::forward's (its "final_hidden": the micro-batch's last hidden states).
std::vector<float> forward_over(const TpDenseModel& model, dist::Communicator& group, const ForwardBatch& batch,
                                AttentionBackend& attention, const ForwardHook& hook = nullptr);

}  // namespace tachyon::model
