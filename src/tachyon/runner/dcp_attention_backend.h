// DcpAttentionBackend: the AttentionBackend of one rank of a decode-context-parallel (DCP) group
// on CPU thread ranks (--decode-context-parallel-size N, docs/parallelism.md). The rank's
// PagedKvCache holds only the tokens model::DcpLayout deals it, in blocks of plan.block_size / N
// rows under the engine's own block tables (dcp_layout.h says why that works), so a rank caches
// ~1/N of every sequence's latent rows and index keys.
//
// Per layer, for the step's tokens (prefill chunks, decodes and speculative verify rows alike):
//   store_latent / store_index_keys  keep the rows this rank owns, drop the others;
//   attend_latent                    all-gather the group's absorbed queries (each TP rank holds
//                                    its own heads), attend every gathered head over the local
//                                    rows whose GLOBAL position is <= the query's, then ONE
//                                    all_to_all_v of (partial out, lse) that sends each rank only
//                                    the partials of the heads it restores (1/N of a gather's
//                                    bytes), and an LSE merge of them (model/dcp_partial_attention.h):
//                                    heads restored to the TP layout;
//   select_tokens (DSA)              score the local index keys, keep the local top-k as (score,
//                                    global position), ONE all-gather, merge (model/dcp_topk.h):
//                                    every rank gets the unsplit indexer's kept positions;
//   attend_latent_sparse             as attend_latent over the kept positions this rank owns.
// So an attention layer makes two collectives (a DSA full layer three): the query gather cannot
// join the previous layer's collective, because the queries are projected from the hidden state
// that collective (the TP all-reduce after o_proj) produces; folding it in would need every rank
// to project the group's heads itself, i.e. N times the q projection weights per rank.
// The group's `all_to_all_v` must be implemented by its backend (the CPU one does).
// Prefill is computed the same way, never over the full context on one rank: nothing but the
// local rows exists on a rank. MLA's absorbed form only, f32 rows only (the FP8 KV cache under
// DCP has no test; refused at start-up by runner/dcp_checks.h).
// Tests: tests/unit/test_dcp_families.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/core/step_plan.h"
#include "tachyon/dist/communicator.h"
#include "tachyon/model/attention_backend.h"
#include "tachyon/model/dcp_layout.h"
#include "tachyon/runner/paged_attention_backend.h"

namespace tachyon::runner {

class DcpAttentionBackend : public model::AttentionBackend {
 public:
  // cache: this rank's local cache, block size plan.block_size / group.size(); group: the DCP
  // group (this rank is group.rank()); interleave: tokens per run (dcp_layout.h).
  DcpAttentionBackend(const model::ModelConfig& config, PagedKvCache& cache, const core::StepPlan& plan,
                      dist::Communicator& group, int interleave);
  void store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) override;
  void attend(int64_t layer, std::span<const float> q, std::span<float> out) override;
  model::MlaAttentionForm mla_form() const override { return model::MlaAttentionForm::kAbsorbed; }
  void store_latent(int64_t layer, std::span<const float> latent) override;
  void attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) override;
  void store_index_keys(int64_t layer, std::span<const float> index_keys) override;
  void select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                     std::span<int32_t> kept) override;
  void attend_latent_sparse(int64_t layer, std::span<const float> q, std::span<const int32_t> kept,
                            std::span<float> out) override;

 private:
  // [token][rows]: the local cache rows each of the step's tokens attends.
  using RowLists = std::vector<std::vector<int64_t>>;
  // The local cache row of local token k of `sequence`.
  int64_t local_row(const core::ScheduledSequence& sequence, int64_t local) const;
  // The owned rows of `width`-wide `rows` [num_tokens, width] copied into `storage` at local slots.
  void store_owned(std::vector<float>& storage, std::span<const float> rows, int64_t width) const;
  // Partial attention of the group's heads over `rows`, exchanged and merged into `out`.
  void attend_rows(int64_t layer, std::span<const float> q, const RowLists& rows, std::span<float> out);

  const model::ModelConfig& config_;
  PagedKvCache& cache_;
  const core::StepPlan& plan_;
  dist::Communicator& group_;
  model::DcpLayout layout_;
};

}  // namespace tachyon::runner
