// TpDenseModel: one rank of a tensor-parallel dense model, the CPU reference of TP. It holds the
// rank's shard (tp_shard.h: heads, intermediate and vocab split as Megatron-LM does) and runs the
// very forward of DenseModel (dense_forward.h) with its TP group at the four seams: all-reduce
// after the vocab-parallel embedding, after o_proj and after down, and all_gather of the LM head's
// vocab slices. Every rank returns the full logits [rows, vocab], identical on all ranks, equal
// to the unsharded model's within f32 rounding (the partial sums add in another order).
// Every rank of the group must call forward together with the same batch; the attention backend
// is the rank's own, built from config() (its heads only: a SequenceKvCache of this config holds
// [capacity, num_kv_heads / tp (at least 1), head_dim] per layer; latent attention's holds the
// full latent on every rank). MoE, latent-attention and DSA models run here too (tp_shard.h says
// how each splits; tp_moe.h how the experts' outputs combine, with or without expert parallelism).
// The engine runs it through runner/tp_cpu_model_runner.h (--tp N on the CPU); the GPU's TP
// runner (runner/cuda) has its own forward, dense models only (docs/parallelism.md).
// Tests: tests/unit/test_tensor_parallel.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tachyon/dist/communicator.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/tp_shard.h"

namespace tachyon::model {

class TpDenseModel {
 public:
  // `group` is the TP group and must outlive the model; shard.tp_rank / tp_size must be its
  // rank and size.
  // An expert-parallel shard's experts are spread over `ep_group` (must outlive the model; the
  // TP group itself when null: --enable-expert-parallel without --dp).
  TpDenseModel(TpShard shard, dist::Communicator& group, dist::Communicator* ep_group = nullptr);
  // The same over a shard several ranks hold at once (the forward only reads it): the TP rank t of
  // every prefill-context-parallel group runs the same cut (runner/pcp_cpu_model_runner.h).
  TpDenseModel(std::shared_ptr<const TpShard> shard, dist::Communicator& group,
               dist::Communicator* ep_group = nullptr);
  // Shards `full` for group.rank() of group.size(), its experts whole when expert_parallel.
  TpDenseModel(const ModelWeights& full, dist::Communicator& group, bool expert_parallel = false);

  // The rank's config: per-rank heads, kv heads and intermediate size; the full vocab_size.
  const ModelConfig& config() const { return shard_->weights.config; }
  const TpShard& shard() const { return *shard_; }

  // Runs the batch; returns the full logits [batch.logits_rows.size(), vocab_size].
  std::vector<float> forward(const ForwardBatch& batch, AttentionBackend& attention,
                             const ForwardHook& hook = nullptr) const;

  // One sequence, as DenseModel's: `cache` must be built from config() (this rank's kv heads).
  std::vector<float> forward(std::span<const int32_t> tokens, SequenceKvCache& cache, bool all_logits = false,
                             const ForwardHook& hook = nullptr) const;

  // A data-parallel replica with no tokens this step: takes part in every MoE layer's expert
  // exchange (expert_dispatch.h) with zero rows, so the other replicas' tokens reach the experts
  // this rank holds. Every rank of the EP group runs forward or idle_forward together.
  void idle_forward() const;

 private:
  std::shared_ptr<const TpShard> shard_;
  dist::Communicator& group_;
  dist::Communicator* ep_group_;  // the experts' group under expert parallelism, else null
  std::vector<float> inv_freq_;  // [head_dim / 2]
};

}  // namespace tachyon::model
