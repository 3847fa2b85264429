// Decode context parallelism's GPU kernels (kernels/cuda/dcp_attention.h and the DCP share of
// mla_attention.h / dsa_indexer.h) against their CPU twins and against the unsplit kernels:
// - latent attention of one rank (decode, prefill rows and sparse lists) over a cache holding
//   only its tokens at their local slots (block size B / N under the engine's block table, the
//   other slots NaN) against model::partial_latent_attention over the rows it owns at or before
//   each query's GLOBAL position: the partial output and its log-sum-exp (-inf where the rank
//   holds none of them);
// - the group's partials merged (dcp_merge_partials) against the unsplit kernel over the whole
//   cache, and against model::merge_attention_partials on the same partials;
// - the indexer's top-k: each rank's local cut (dsa_select_topk with its share), the candidates
//   and the merge give exactly the unsplit dsa_select_topk's kept positions, ties included, and
//   model::merge_topk_candidates's;
// - the indexer's scores of one rank over its own keys against the unsplit kernel's, bit for bit;
// - dcp_local_slots against DcpLayout on the host.
// Group sizes 2, 3 and 4, interleave 1 and 2, DeepSeek's rank 512 + rope 64 and a tiny 64 + 8.
// Outputs start poisoned (NaN / -1). Run on the GPU machine: build/tests/gpu_dcp_kernels.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/dcp_attention.h"
#include "tachyon/kernels/cuda/dsa_indexer.h"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/dcp_layout.h"
#include "tachyon/model/dcp_partial_attention.h"
#include "tachyon/model/dcp_topk.h"

namespace tachyon::gpu_test {
namespace {

namespace gpu = kernels::cuda;
using kernels::DcpLayout;

struct DcpCase {
  int size = 2;
  int interleave = 1;
  int heads = 16;
  int rank = 512;
  int rope = 64;
};

std::ostream& operator<<(std::ostream& os, const DcpCase& c) {
  return os << "dcp " << c.size << " interleave " << c.interleave << " heads " << c.heads << " rank " << c.rank
            << " rope " << c.rope;
}

// One query row: its sequence, its global position and (sparse) its kept global positions.
struct QueryRow {
  int seq = 0;
  int position = 0;
  std::vector<int32_t> kept;
};

// Sequences of latent rows (global, host f32), one engine block table, and each rank's cache.
class SplitLatents {
 public:
  SplitLatents(std::mt19937_64& gen, const DcpCase& c, const std::vector<int32_t>& contexts)
      : c_(c), contexts_(contexts), block_size_(c.size * c.interleave * 4) {
    const int width = c.rank + c.rope;
    int32_t blocks = 0, longest = 0;
    for (int32_t ctx : contexts) {
      blocks += (ctx + block_size_ - 1) / block_size_;
      longest = std::max(longest, (ctx + block_size_ - 1) / block_size_);
    }
    stride_ = longest + 1;
    num_blocks_ = blocks + 2;
    std::vector<int32_t> pool(static_cast<size_t>(num_blocks_));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), gen);
    tables_.assign(contexts.size() * static_cast<size_t>(stride_), pool.back());  // unused entries: a spare block
    size_t next = 0;
    for (size_t s = 0; s < contexts.size(); ++s) {
      rows_.push_back(random_bf16_values(gen, static_cast<size_t>(contexts[s]) * width));
      for (int32_t b = 0; b * block_size_ < contexts[s]; ++b) tables_[s * stride_ + b] = pool[next++];
    }
    tables_d_.emplace(upload(tables_));
    // The whole cache (dcp 1) and each rank's: slots nobody owns hold NaN.
    whole_d_.emplace(upload_bf16(fill(DcpLayout{})));
    for (int r = 0; r < c.size; ++r) {
      ranks_d_.emplace_back(upload_bf16(fill(layout(r))));
    }
  }

  DcpLayout layout(int r) const { return DcpLayout{.size = c_.size, .rank = r, .interleave = c_.interleave}; }
  int32_t block_size() const { return block_size_; }
  const std::vector<int32_t>& tables() const { return tables_; }
  int32_t stride() const { return stride_; }

  // The view of rank r's cache (r = -1: the whole cache).
  gpu::PagedLatentView view(int r) const {
    const bool whole = r < 0;
    return gpu::PagedLatentView{whole ? whole_d_->data() : ranks_d_[static_cast<size_t>(r)].data(),
                                tables_d_->data(), stride_, whole ? block_size_ : block_size_ / c_.size, c_.rank,
                                c_.rope};
  }

  // Rank r's partial (out [heads, rank], lse [heads]) for query q [heads, width] of `row`:
  // the rows it owns at or before the position, or among the kept ones.
  void reference(float* out, float* lse, const float* q, const QueryRow& row, bool sparse, int r) const {
    const DcpLayout d = layout(r);
    std::vector<int64_t> rows;
    if (sparse) {
      for (int32_t p : row.kept) {
        if (p >= 0 && d.owns(p)) rows.push_back(p);
      }
    } else {
      for (int64_t p = 0; p <= row.position; ++p) {
        if (d.owns(p)) rows.push_back(p);
      }
    }
    const kernels::cpu::MlaAttentionShape shape{1, 0, c_.heads, c_.rank, c_.rope,
                                                1.0f / std::sqrt(static_cast<float>(c_.rank + c_.rope))};
    model::partial_latent_attention(out, lse, q, rows_[static_cast<size_t>(row.seq)].data(), rows, shape);
  }

 private:
  std::vector<float> fill(const DcpLayout& d) const {
    const int width = c_.rank + c_.rope;
    const int32_t rows_per_block = block_size_ / d.size;
    std::vector<float> cache(static_cast<size_t>(num_blocks_) * rows_per_block * width, NAN);
    for (size_t s = 0; s < contexts_.size(); ++s) {
      for (int32_t p = 0; p < contexts_[s]; ++p) {
        if (!d.owns(p)) continue;
        const int64_t local = d.local_index(p);
        const int64_t slot = static_cast<int64_t>(tables_[s * stride_ + local / rows_per_block]) * rows_per_block +
                             local % rows_per_block;
        std::copy_n(rows_[s].data() + static_cast<size_t>(p) * width, width, cache.data() + slot * width);
      }
    }
    return cache;
  }

  DcpCase c_;
  std::vector<int32_t> contexts_;
  int32_t block_size_;
  int32_t stride_ = 0;
  int32_t num_blocks_ = 0;
  std::vector<std::vector<float>> rows_;  // [seq][context, width]
  std::vector<int32_t> tables_;
  std::optional<DeviceArray<int32_t>> tables_d_;
  std::optional<DeviceArray<bf16>> whole_d_;
  std::vector<DeviceArray<bf16>> ranks_d_;
};

// lse values: -inf exactly where the reference has it, the rest within tolerance (absolute: a
// log-sum-exp of scaled scores is O(1)..O(10)).
void expect_lse_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i] == -INFINITY) {
      EXPECT_EQ(got[i], -INFINITY) << what << " row " << i << " holds no key here";
      continue;
    }
    ASSERT_TRUE(std::isfinite(got[i])) << what << " row " << i;
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LT(worst, 2e-2) << what << ": worst lse difference";
}

enum class Mode { kDecode, kPrefill, kSparse };

// Runs the kernel of `mode` for `rows` on rank r (-1: the whole cache, no lse).
void run_attention(Mode mode, const SplitLatents& latents, const DcpCase& c, const std::vector<QueryRow>& rows,
                   const std::vector<int32_t>& contexts, const DeviceArray<bf16>& q, DeviceArray<bf16>& out,
                   DeviceArray<float>* lse, int r, DeviceArray<char>& workspace) {
  gpu::MlaAttentionParams params{.num_heads = c.heads, .scale = 1.0f / std::sqrt(static_cast<float>(c.rank + c.rope))};
  if (r >= 0) params.dcp = latents.layout(r);
  if (lse != nullptr) params.lse = lse->data();
  const int32_t n = static_cast<int32_t>(rows.size());
  if (mode == Mode::kDecode) {  // one row per sequence, at its last position
    const DeviceArray<int32_t> contexts_d = upload(contexts);
    const int32_t longest = *std::max_element(contexts.begin(), contexts.end());
    gpu::mla_decode_attention(out.data(), q.data(), latents.view(r), contexts_d.data(), n, longest, params,
                              workspace.data(), workspace.size(), nullptr);
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
    return;
  }
  // Prefill and sparse: rows grouped by sequence, each sequence's rows its last ones.
  std::vector<int32_t> starts = {0};
  for (size_t s = 0; s < contexts.size(); ++s) {
    int32_t count = 0;
    for (const QueryRow& row : rows) count += row.seq == static_cast<int>(s) ? 1 : 0;
    starts.push_back(starts.back() + count);
  }
  const DeviceArray<int32_t> starts_d = upload(starts), contexts_d = upload(contexts);
  if (mode == Mode::kPrefill) {
    int32_t longest = 0;
    for (size_t s = 0; s < contexts.size(); ++s) longest = std::max(longest, starts[s + 1] - starts[s]);
    gpu::mla_prefill_attention(out.data(), q.data(), latents.view(r), starts_d.data(), contexts_d.data(),
                               static_cast<int32_t>(contexts.size()), n, longest, params, nullptr);
  } else {
    const int32_t width = static_cast<int32_t>(rows.front().kept.size());
    std::vector<int32_t> kept;
    for (const QueryRow& row : rows) kept.insert(kept.end(), row.kept.begin(), row.kept.end());
    const DeviceArray<int32_t> kept_d = upload(kept);
    gpu::sparse_mla_attention(out.data(), q.data(), latents.view(r), kept_d.data(), width, starts_d.data(),
                              static_cast<int32_t>(contexts.size()), n, params, workspace.data(), workspace.size(),
                              nullptr);
  }
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
}

void check_split_attention(Mode mode, const DcpCase& c, uint64_t salt) {
  SCOPED_TRACE(testing::Message() << c << " mode " << static_cast<int>(mode));
  auto gen = rng(salt);
  // Contexts: one shorter than the group's first cycle (some ranks hold nothing), one of a few
  // tiles, one long enough to split across CTAs.
  const std::vector<int32_t> contexts = {1, 2 * c.size * c.interleave - 1, 150, 700};
  std::vector<QueryRow> rows;
  const int kept_width = 96;
  for (size_t s = 0; s < contexts.size(); ++s) {
    // decode: the last position; prefill and sparse: the last min(ctx, 5) positions.
    const int32_t n = mode == Mode::kDecode ? 1 : std::min(contexts[s], 5);
    for (int32_t i = 0; i < n; ++i) {
      QueryRow row{.seq = static_cast<int>(s), .position = contexts[s] - n + i};
      if (mode == Mode::kSparse) {  // distinct positions at or before the row's, ascending, -1 after
        std::vector<int32_t> all(static_cast<size_t>(row.position + 1));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), gen);
        all.resize(std::min<size_t>(all.size(), kept_width - 7));
        std::sort(all.begin(), all.end());
        all.resize(kept_width, -1);
        row.kept = all;
      }
      rows.push_back(row);
    }
  }
  const SplitLatents latents(gen, c, contexts);
  const int width = c.rank + c.rope;
  const size_t n = rows.size(), H = static_cast<size_t>(c.heads);
  const std::vector<float> q = random_bf16_values(gen, n * H * width, 0.5f);
  const DeviceArray<bf16> q_d = upload_bf16(q);
  DeviceArray<char> workspace(gpu::mla_decode_workspace_bytes(8, c.heads, c.rank, 1024) +
                              gpu::sparse_mla_workspace_bytes(static_cast<int32_t>(n), c.heads, c.rank, kept_width) + 256);
  // The unsplit kernel over the whole cache: what the merge must give.
  DeviceArray<bf16> whole(n * H * c.rank);
  run_attention(mode, latents, c, rows, contexts, q_d, whole, nullptr, -1, workspace);
  const std::vector<float> expected = download_f32(whole);

  std::vector<float> partial_out(static_cast<size_t>(c.size) * n * H * c.rank);  // [N, n * H, rank]
  std::vector<float> partial_lse(static_cast<size_t>(c.size) * n * H);
  DeviceArray<bf16> partials_d(partial_out.size());
  DeviceArray<float> lses_d(partial_lse.size());
  for (int r = 0; r < c.size; ++r) {
    DeviceArray<bf16> out(n * H * c.rank);
    DeviceArray<float> lse(n * H);
    run_attention(mode, latents, c, rows, contexts, q_d, out, &lse, r, workspace);
    std::vector<float> want_out(n * H * c.rank), want_lse(n * H);
    for (size_t t = 0; t < n; ++t) {
      latents.reference(want_out.data() + t * H * c.rank, want_lse.data() + t * H, q.data() + t * H * width, rows[t],
                        mode == Mode::kSparse, r);
    }
    const std::vector<float> got_out = download_f32(out), got_lse = lse.download();
    EXPECT_LT(relative_error(got_out, want_out), kBf16Tolerance) << "rank " << r << "'s partial outputs";
    expect_lse_near(got_lse, want_lse, "rank's lse");
    std::copy(got_out.begin(), got_out.end(), partial_out.begin() + static_cast<size_t>(r) * n * H * c.rank);
    std::copy(got_lse.begin(), got_lse.end(), partial_lse.begin() + static_cast<size_t>(r) * n * H);
  }
  partials_d.upload([&] {
    std::vector<bf16> bits(partial_out.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = __float2bfloat16(partial_out[i]);
    return bits;
  }());
  lses_d.upload(partial_lse);
  DeviceArray<bf16> merged(n * H * c.rank);
  gpu::dcp_merge_partials(merged.data(), partials_d.data(), lses_d.data(), c.size, static_cast<int64_t>(n * H), c.rank,
                          nullptr);
  const std::vector<float> got = download_f32(merged);
  EXPECT_LT(relative_error(got, expected), kBf16Tolerance) << "the merged partials against the unsplit kernel";
  std::vector<float> cpu_merged(got.size());
  model::merge_attention_partials(cpu_merged.data(), partial_out.data(), partial_lse.data(),
                                  {.sources = c.size,
                                   .num_tokens = static_cast<int64_t>(n),
                                   .all_heads = c.heads,
                                   .head_begin = 0,
                                   .heads = c.heads,
                                   .width = c.rank});
  EXPECT_LT(relative_error(got, cpu_merged), 4e-3) << "the merge against the CPU merge of the same partials";
}

const DcpCase kCases[] = {{2, 1, 16, 512, 64}, {3, 1, 16, 512, 64}, {4, 2, 16, 512, 64},
                          {2, 2, 4, 64, 8},    {4, 1, 32, 64, 8}};

TEST(DcpLatentAttention, DecodePartialsMatchTheCpuAndMergeIntoTheUnsplitKernel) {
  uint64_t salt = 100;
  for (const DcpCase& c : kCases) check_split_attention(Mode::kDecode, c, salt++);
}

TEST(DcpLatentAttention, PrefillRowsMaskByGlobalPosition) {
  uint64_t salt = 200;
  for (const DcpCase& c : kCases) check_split_attention(Mode::kPrefill, c, salt++);
}

TEST(DcpLatentAttention, SparseListsKeepTheRankOwnPositions) {
  uint64_t salt = 300;
  for (const DcpCase& c : kCases) check_split_attention(Mode::kSparse, c, salt++);
}

TEST(DcpLocalSlots, MatchTheLayout) {
  auto gen = rng(400);
  for (const DcpCase& c : kCases) {
    const int32_t block_size = c.size * c.interleave * 4;
    std::uniform_int_distribution<int32_t> any(-3, 40 * block_size);
    std::vector<int32_t> slots(777);
    for (int32_t& s : slots) s = any(gen);
    const DeviceArray<int32_t> slots_d = upload(slots);
    for (int r = 0; r < c.size; ++r) {
      const DcpLayout d{.size = c.size, .rank = r, .interleave = c.interleave};
      DeviceArray<int32_t> local(slots.size());
      gpu::dcp_local_slots(local.data(), slots_d.data(), static_cast<int64_t>(slots.size()), d, block_size, nullptr);
      const std::vector<int32_t> got = local.download();
      for (size_t t = 0; t < slots.size(); ++t) {
        const int32_t want =
            slots[t] >= 0 && d.owns(slots[t] % block_size) ? static_cast<int32_t>(d.local_slot(slots[t], block_size)) : -1;
        ASSERT_EQ(got[t], want) << c << " rank " << r << " slot " << slots[t];
      }
    }
  }
}

// The indexer's scores of one rank over a key cache holding only its tokens equal the unsplit
// kernel's scores of the same keys (bit for bit: the same products in the same order), local
// column k standing for global column d.global_position(k), -inf past the row's local keys.
TEST(DcpIndexScores, ARankScoresItsOwnKeysAsTheUnsplitKernel) {
  auto gen = rng(450);
  for (const DcpCase& c : kCases) {
    SCOPED_TRACE(testing::Message() << c);
    const int32_t heads = 16, dim = 64, context = 230, rows = 7, block_size = c.size * c.interleave * 4;
    const int32_t blocks = (context + block_size - 1) / block_size;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), gen);
    const std::vector<float> keys = random_bf16_values(gen, static_cast<size_t>(context) * dim);
    auto paged = [&](const DcpLayout& d) {  // [blocks, block_size / size, dim], unowned slots NaN
      const int32_t per_block = block_size / d.size;
      std::vector<float> cache(static_cast<size_t>(blocks) * per_block * dim, NAN);
      for (int32_t p = 0; p < context; ++p) {
        if (!d.owns(p)) continue;
        const int64_t local = d.local_index(p);
        const int64_t slot = static_cast<int64_t>(table[static_cast<size_t>(local / per_block)]) * per_block + local % per_block;
        std::copy_n(keys.data() + static_cast<size_t>(p) * dim, dim, cache.data() + slot * dim);
      }
      return upload_bf16(cache);
    };
    const DeviceArray<bf16> q = upload_bf16(random_bf16_values(gen, static_cast<size_t>(rows) * heads * dim));
    const DeviceArray<float> weights = upload(random_floats(gen, static_cast<size_t>(rows) * heads));
    const DeviceArray<int32_t> table_d = upload(table), starts = upload(std::vector<int32_t>{0, rows}),
                               contexts = upload(std::vector<int32_t>{context});
    auto scores_of = [&](const DcpLayout& d, const DeviceArray<bf16>& cache) {
      const gpu::PagedIndexKeyView view{cache.data(), table_d.data(), blocks, block_size / d.size, dim};
      const gpu::DsaIndexerParams params{.num_heads = heads, .head_dim = dim, .topk = 8, .scale = 0.125f,
                                         .weight_scale = 0.25f, .dcp = d};
      DeviceArray<float> scores(static_cast<size_t>(rows) * context);
      gpu::dsa_index_scores(scores.data(), context, q.data(), weights.data(), view, starts.data(), contexts.data(), 1, rows,
                            context, params, nullptr);
      return scores.download();
    };
    const std::vector<float> whole = scores_of(DcpLayout{}, paged(DcpLayout{}));
    for (int r = 0; r < c.size; ++r) {
      const DcpLayout d{.size = c.size, .rank = r, .interleave = c.interleave};
      const std::vector<float> local = scores_of(d, paged(d));
      for (int32_t t = 0; t < rows; ++t) {
        const int32_t position = context - rows + t;
        const int64_t visible = d.local_count(position + 1);
        for (int64_t k = 0; k < context; ++k) {
          const float got = local[static_cast<size_t>(t) * context + k];
          if (k >= visible) {
            ASSERT_EQ(got, -INFINITY) << "rank " << r << " row " << t << " column " << k << " is past its keys";
            continue;
          }
          const float want = whole[static_cast<size_t>(t) * context + d.global_position(k)];
          ASSERT_EQ(got, want) << "rank " << r << " row " << t << " local key " << k;
        }
      }
    }
  }
}

// Scores [rows, stride] of one sequence's last `rows` positions of `context`, with ties: values
// drawn from few levels so equal scores straddle every rank's cut and the global one.
TEST(DcpTopk, LocalCutsExchangedAndMergedGiveTheUnsplitSelection) {
  auto gen = rng(500);
  for (const DcpCase& c : kCases) {
    for (const int32_t topk : {8, 64}) {
      SCOPED_TRACE(testing::Message() << c << " topk " << topk);
      const int32_t context = 300, rows = 9, stride = context;
      std::uniform_int_distribution<int> level(0, 40);
      std::vector<float> global(static_cast<size_t>(rows) * stride);
      for (float& v : global) v = static_cast<float>(level(gen)) * 0.25f;
      const std::vector<int32_t> starts = {0, rows}, contexts = {context};
      const DeviceArray<int32_t> starts_d = upload(starts), contexts_d = upload(contexts);
      const DeviceArray<float> global_d = upload(global);
      DeviceArray<char> scratch(gpu::dsa_topk_workspace_bytes(rows, context, topk) + 16);
      DeviceArray<int32_t> unsplit(static_cast<size_t>(rows) * topk);
      gpu::dsa_select_topk(unsplit.data(), global_d.data(), stride, starts_d.data(), contexts_d.data(), 1, rows, context,
                           topk, scratch.data(), scratch.size(), nullptr);
      const std::vector<int32_t> want = unsplit.download();

      DeviceArray<gpu::DcpCandidate> gathered(static_cast<size_t>(c.size) * rows * topk);
      std::vector<gpu::DcpCandidate> gathered_host;
      for (int r = 0; r < c.size; ++r) {
        const DcpLayout d{.size = c.size, .rank = r, .interleave = c.interleave};
        // The rank's scores: local column k is global column d.global_position(k) (as the indexer
        // scores its own keys); columns past its keys are never read (garbage).
        std::vector<float> local(global.size(), 1e30f);
        for (int32_t t = 0; t < rows; ++t) {
          for (int64_t k = 0; k < d.local_count(context); ++k) {
            local[static_cast<size_t>(t) * stride + k] = global[static_cast<size_t>(t) * stride + d.global_position(k)];
          }
        }
        const DeviceArray<float> local_d = upload(local);
        DeviceArray<int32_t> kept(static_cast<size_t>(rows) * topk);
        gpu::dsa_select_topk(kept.data(), local_d.data(), stride, starts_d.data(), contexts_d.data(), 1, rows, context,
                             topk, scratch.data(), scratch.size(), nullptr, d);
        DeviceArray<gpu::DcpCandidate> candidates(static_cast<size_t>(rows) * topk);
        gpu::dcp_topk_candidates(candidates.data(), kept.data(), local_d.data(), stride, rows, topk, d, nullptr);
        TACHYON_CUDA_CHECK(cudaMemcpy(gathered.data() + static_cast<size_t>(r) * rows * topk, candidates.data(),
                                      static_cast<size_t>(rows) * topk * sizeof(gpu::DcpCandidate),
                                      cudaMemcpyDeviceToDevice));
        const std::vector<gpu::DcpCandidate> host = candidates.download();
        gathered_host.insert(gathered_host.end(), host.begin(), host.end());
      }
      DeviceArray<int32_t> merged(static_cast<size_t>(rows) * topk);
      gpu::dcp_merge_topk(merged.data(), gathered.data(), c.size, rows, topk, nullptr);
      const std::vector<int32_t> got = merged.download();
      EXPECT_EQ(got, want) << "the merged selection differs from the unsplit top-k";
      for (int32_t t = 0; t < rows; ++t) {  // the CPU merge of the same candidates
        std::vector<model::IndexCandidate> candidates;
        for (int r = 0; r < c.size; ++r) {
          for (int32_t j = 0; j < topk; ++j) {
            const gpu::DcpCandidate& g = gathered_host[(static_cast<size_t>(r) * rows + t) * topk + j];
            candidates.push_back({g.score, g.position});
          }
        }
        std::vector<int32_t> cpu(static_cast<size_t>(topk));
        model::merge_topk_candidates(candidates, topk, cpu.data());
        EXPECT_TRUE(std::equal(cpu.begin(), cpu.end(), got.begin() + static_cast<std::ptrdiff_t>(t) * topk))
            << "row " << t << ": the GPU merge differs from the CPU merge";
      }
    }
  }
}

}  // namespace
}  // namespace tachyon::gpu_test
