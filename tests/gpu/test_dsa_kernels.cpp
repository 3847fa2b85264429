// The lightning indexer's GPU kernels (kernels/cuda/dsa_indexer.h) against their CPU twins:
// the key store and the query rope against model/dsa_indexer.cpp's LayerNorm (replicated here,
// it is file-local there) and kernels::cpu::apply_rope on the leading dims; the scores against
// kernels::cpu::paged_dsa_index_scores per sequence (f32 tolerance: the dots run in another
// order on the tensor cores); the top-k against kernels::cpu::dsa_select_topk fed the very same
// f32 scores, which must give identical kept arrays. Caches are built the hard way: shuffled
// block tables, garbage in unused blocks and NaN in owned slots past each context (a kernel
// reading them shows as NaN). Outputs are poisoned (NaN / -1 bit patterns) before each launch.
// The top-k also runs alone on score patterns made to break it (ties at the threshold and across
// chunk edges, rows of zeros, one-binade and few-ulp ranges), both with rows split across CTAs
// (few long rows) and one CTA a row (many rows), with graph-padding rows that must stay -1.
// Run on the GPU machine: build/tests/gpu_dsa_kernels (TACHYON_TEST_SEED replays a run).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/dsa_indexer.h"
#include "tachyon/kernels/dsa_indexer.h"
#include "tachyon/kernels/rope.h"

namespace tachyon::gpu_test {
namespace {

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;

// Scores are f32 sums of products of bf16 values: only the summation order differs.
constexpr double kScoreTolerance = 1e-4;
// The key store and rope round once to bf16 (half an ulp, 2^-9 relative).
constexpr double kRoundTolerance = 4e-3;

std::vector<float> inv_freq_of(int32_t rope_dim) {
  std::vector<float> inv_freq(rope_dim / 2);
  for (int32_t i = 0; i < rope_dim / 2; ++i) {
    inv_freq[i] = 1.0f / std::pow(10000.0f, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
  }
  return inv_freq;
}

// x: [rows, heads, dim] in place: apply_rope on each head's dims [0, rope).
void rope_leading(float* x, const std::vector<int32_t>& positions, const std::vector<float>& inv_freq, int64_t heads,
                  int64_t dim, int64_t rope, float scaling) {
  const int64_t n = static_cast<int64_t>(positions.size());
  if (rope == 0) return;
  std::vector<int64_t> pos64(positions.begin(), positions.end());
  std::vector<float> pe(static_cast<size_t>(n * heads * rope));
  for (int64_t i = 0; i < n * heads; ++i) std::copy_n(x + i * dim, rope, pe.data() + i * rope);
  cpu::apply_rope(pe.data(), pos64.data(), inv_freq.data(), n, heads, rope, scaling);
  for (int64_t i = 0; i < n * heads; ++i) std::copy_n(pe.data() + i * rope, rope, x + i * dim);
}

std::vector<int32_t> random_positions(std::mt19937_64& gen, size_t n) {
  std::uniform_int_distribution<int32_t> dist(0, 150000);
  std::vector<int32_t> positions(n);
  for (int32_t& p : positions) p = dist(gen);
  positions[0] = 0;
  return positions;
}

// --- key store and query rope ---

void check_store_keys(std::mt19937_64& gen, int32_t dim, int32_t rope, int64_t n) {
  SCOPED_TRACE(testing::Message() << "head_dim " << dim << " rope " << rope << " tokens " << n);
  const float scaling = 1.25f;
  const std::vector<float> k_raw = random_bf16_values(gen, n * dim, 2.0f);
  std::vector<float> weight = random_bf16_values(gen, dim, 0.5f), bias = random_bf16_values(gen, dim, 0.3f);
  for (float& w : weight) w = bf16_to_f32(f32_to_bf16(w + 1.0f));
  const std::vector<float> inv_freq = inv_freq_of(rope);
  const std::vector<int32_t> positions = random_positions(gen, n);
  const int64_t num_slots = n + 7;
  std::vector<int32_t> order(num_slots);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), gen);
  std::vector<int32_t> slots(order.begin(), order.begin() + n);
  for (int64_t t = 3; t < n; t += 11) slots[t] = -1;  // padding tokens write nothing

  // Reference: model/dsa_indexer.cpp's LayerNorm (double statistics), then the leading-dims rope.
  std::vector<float> ref = k_raw;
  for (int64_t t = 0; t < n; ++t) {
    float* v = ref.data() + t * dim;
    double mean = 0.0, variance = 0.0;
    for (int32_t d = 0; d < dim; ++d) mean += v[d];
    mean /= dim;
    for (int32_t d = 0; d < dim; ++d) variance += (v[d] - mean) * (v[d] - mean);
    variance /= dim;
    const double inv_std = 1.0 / std::sqrt(variance + 1e-6);
    for (int32_t d = 0; d < dim; ++d) v[d] = static_cast<float>((v[d] - mean) * inv_std) * weight[d] + bias[d];
  }
  rope_leading(ref.data(), positions, inv_freq, 1, dim, rope, scaling);

  DeviceArray<bf16> cache(num_slots * dim);
  DeviceArray<bf16> k_d = upload_bf16(k_raw), w_d = upload_bf16(weight), b_d = upload_bf16(bias);
  DeviceArray<float> inv_freq_d = upload(inv_freq.empty() ? std::vector<float>{1.0f} : inv_freq);  // rope 0: unread
  DeviceArray<int32_t> positions_d = upload(positions), slots_d = upload(slots);
  gpu::dsa_store_index_keys(cache.data(), k_d.data(), w_d.data(), b_d.data(), inv_freq_d.data(), scaling,
                            positions_d.data(), slots_d.data(), n, dim, rope, nullptr);
  const std::vector<float> out = download_f32(cache);
  std::vector<float> got, want;
  std::vector<bool> written(num_slots, false);
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] < 0) continue;
    written[slots[t]] = true;
    got.insert(got.end(), out.begin() + slots[t] * dim, out.begin() + (slots[t] + 1) * dim);
    want.insert(want.end(), ref.begin() + t * dim, ref.begin() + (t + 1) * dim);
  }
  EXPECT_LT(relative_error(got, want), kRoundTolerance);
  for (int64_t s = 0; s < num_slots; ++s) {
    if (written[s]) continue;
    for (int32_t d = 0; d < dim; ++d) ASSERT_TRUE(std::isnan(out[s * dim + d])) << "slot " << s << " was written";
  }
}

TEST(DsaStoreIndexKeys, MatchesCpuLayerNormAndRope) {
  auto gen = rng(701);
  check_store_keys(gen, 16, 8, 40);     // the tiny model
  check_store_keys(gen, 128, 64, 97);   // DeepSeek-V3.2
  check_store_keys(gen, 24, 10, 17);    // awkward
  check_store_keys(gen, 128, 0, 5);     // norm only
}

void check_rope_queries(std::mt19937_64& gen, int32_t heads, int32_t dim, int32_t rope, int64_t n) {
  SCOPED_TRACE(testing::Message() << "heads " << heads << " head_dim " << dim << " rope " << rope << " tokens " << n);
  const float scaling = 0.9f;
  const std::vector<float> q = random_bf16_values(gen, n * heads * dim, 1.5f);
  const std::vector<float> inv_freq = inv_freq_of(rope);
  const std::vector<int32_t> positions = random_positions(gen, n);
  std::vector<float> ref = q;
  rope_leading(ref.data(), positions, inv_freq, heads, dim, rope, scaling);
  DeviceArray<bf16> q_d = upload_bf16(q);
  DeviceArray<float> inv_freq_d = upload(inv_freq);
  DeviceArray<int32_t> positions_d = upload(positions);
  gpu::dsa_rope_index_queries(q_d.data(), inv_freq_d.data(), scaling, positions_d.data(), n, heads, dim, rope, nullptr);
  const std::vector<float> out = download_f32(q_d);
  EXPECT_LT(relative_error(out, ref), kRoundTolerance);
  for (int64_t i = 0; i < n * heads; ++i) {  // dims past the rope are untouched, bit for bit
    for (int32_t d = rope; d < dim; ++d) ASSERT_EQ(out[i * dim + d], q[i * dim + d]) << "row " << i << " dim " << d;
  }
}

TEST(DsaRopeIndexQueries, MatchesCpuRopeOnLeadingDims) {
  auto gen = rng(702);
  check_rope_queries(gen, 4, 16, 8, 40);
  check_rope_queries(gen, 64, 128, 64, 33);
  check_rope_queries(gen, 5, 24, 10, 7);
}

// --- scores and top-k ---

struct Batch {
  std::vector<int32_t> contexts;  // tokens in the cache per sequence, this step's included
  std::vector<int32_t> rows;      // query rows per sequence (the last rows[s] positions)
};

struct IndexerShape {
  int32_t num_heads = 64;
  int32_t head_dim = 128;
  int32_t block_size = 64;
  int32_t topk = 2048;
};

// Index keys of several sequences in one paged cache: host f32 (bf16 values) and device bf16.
class IndexKeyCache {
 public:
  IndexKeyCache(std::mt19937_64& gen, const std::vector<int32_t>& contexts, int32_t block_size, int32_t dim)
      : block_size_(block_size), dim_(dim) {
    int32_t needed = 0, longest = 0;
    for (int32_t ctx : contexts) {
      needed += (ctx + block_size - 1) / block_size;
      longest = std::max(longest, (ctx + block_size - 1) / block_size);
    }
    stride_ = longest + 1;
    const int32_t garbage = 3;
    const int32_t num_blocks = needed + garbage;
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), gen);
    const size_t block_elems = static_cast<size_t>(block_size) * dim;
    keys_ = random_bf16_values(gen, num_blocks * block_elems, 40.0f);  // garbage unless owned
    tables_.assign(contexts.size() * stride_, 0);
    size_t next = 0;
    for (size_t s = 0; s < contexts.size(); ++s) {
      const int32_t blocks = (contexts[s] + block_size - 1) / block_size;
      for (int32_t b = 0; b < stride_; ++b) {
        tables_[s * stride_ + b] = b < blocks ? pool[next++] : pool[needed + (s + b) % garbage];
      }
      for (int32_t b = 0; b < blocks; ++b) {
        const std::vector<float> k = random_bf16_values(gen, block_elems);
        const size_t at = static_cast<size_t>(tables_[s * stride_ + b]) * block_elems;
        for (size_t i = 0; i < block_elems; ++i) {
          const bool owned = b * block_size + static_cast<int32_t>(i / dim) < contexts[s];
          keys_[at + i] = owned ? k[i] : NAN;
        }
      }
    }
    keys_d_.emplace(upload_bf16(keys_));
    tables_d_.emplace(upload(tables_));
  }

  gpu::PagedIndexKeyView view() const {
    return gpu::PagedIndexKeyView{keys_d_->data(), tables_d_->data(), stride_, block_size_, dim_};
  }
  const float* keys() const { return keys_.data(); }
  const int32_t* table(size_t s) const { return tables_.data() + s * stride_; }

 private:
  int32_t block_size_, dim_, stride_ = 0;
  std::vector<float> keys_;      // [num_blocks * block_size, dim]
  std::vector<int32_t> tables_;  // [num_seqs, stride_]
  std::optional<DeviceArray<bf16>> keys_d_;
  std::optional<DeviceArray<int32_t>> tables_d_;
};

std::vector<int32_t> query_starts_of(const Batch& batch) {
  std::vector<int32_t> starts(batch.rows.size() + 1, 0);
  for (size_t s = 0; s < batch.rows.size(); ++s) starts[s + 1] = starts[s] + batch.rows[s];
  return starts;
}

// Runs the GPU top-k on device scores and checks it against the CPU selection over the same
// (downloaded) scores, sequence by sequence. `padding_rows` more rows past the batch's (graph
// padding, scores of NaN) must come back all -1. The workspace starts as garbage (0xFF bytes).
void check_topk(const std::vector<float>& scores, const DeviceArray<float>& scores_d, int64_t stride,
                const Batch& batch, int32_t max_context_len, int32_t topk, int32_t padding_rows = 0) {
  const std::vector<int32_t> starts = query_starts_of(batch);
  const int32_t num_seqs = static_cast<int32_t>(batch.rows.size());
  const int32_t num_rows = starts.back() + padding_rows;
  DeviceArray<int32_t> starts_d = upload(starts), contexts_d = upload(batch.contexts);
  DeviceArray<int32_t> kept_d(static_cast<size_t>(num_rows) * topk);
  TACHYON_CUDA_CHECK(cudaMemset(kept_d.data(), 0x7f, kept_d.size() * sizeof(int32_t)));  // poison: not -1, not valid
  const size_t workspace_bytes = gpu::dsa_topk_workspace_bytes(num_rows, max_context_len, topk);
  DeviceArray<uint8_t> workspace(std::max<size_t>(workspace_bytes, 1));
  gpu::dsa_select_topk(kept_d.data(), scores_d.data(), stride, starts_d.data(), contexts_d.data(), num_seqs, num_rows,
                       max_context_len, topk, workspace.data(), workspace_bytes, nullptr);
  const std::vector<int32_t> kept = kept_d.download();
  for (int64_t i = static_cast<int64_t>(starts.back()) * topk; i < static_cast<int64_t>(num_rows) * topk; ++i) {
    ASSERT_EQ(kept[i], -1) << "padding row " << i / topk << " entry " << i % topk;
  }
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t rows = batch.rows[s], ctx = batch.contexts[s];
    if (rows == 0) continue;
    SCOPED_TRACE(testing::Message() << "top-k sequence " << s << " context " << ctx << " rows " << rows);
    const cpu::DsaIndexerShape shape{rows, ctx - rows, 0, 0, topk, 1.0f};
    std::vector<float> seq_scores(static_cast<size_t>(rows) * ctx);
    for (int32_t i = 0; i < rows; ++i) {
      std::copy_n(scores.begin() + (starts[s] + i) * stride, ctx, seq_scores.begin() + static_cast<size_t>(i) * ctx);
    }
    std::vector<int32_t> ref(static_cast<size_t>(rows) * topk);
    cpu::dsa_select_topk(ref.data(), seq_scores.data(), shape);
    for (int32_t i = 0; i < rows; ++i) {
      const auto got = kept.begin() + (starts[s] + i) * static_cast<int64_t>(topk);
      const auto want = ref.begin() + static_cast<int64_t>(i) * topk;
      const auto [g, w] = std::mismatch(got, got + topk, want);
      ASSERT_TRUE(g == got + topk) << "row " << i << " (position " << ctx - rows + i << "): entry " << (g - got)
                                   << " is " << *g << ", the CPU keeps " << *w;
    }
  }
}

// Scores of `batch` on the GPU against the CPU per sequence, then the top-k on those scores.
void check_scores_and_topk(std::mt19937_64& gen, const Batch& batch, const IndexerShape& shape, int32_t slack = 0) {
  SCOPED_TRACE(testing::Message() << "heads " << shape.num_heads << " head_dim " << shape.head_dim << " block "
                                  << shape.block_size << " topk " << shape.topk << " sequences "
                                  << batch.contexts.size() << " slack " << slack);
  const IndexKeyCache cache(gen, batch.contexts, shape.block_size, shape.head_dim);
  const std::vector<int32_t> starts = query_starts_of(batch);
  const int32_t num_rows = starts.back(), num_seqs = static_cast<int32_t>(batch.rows.size());
  const int32_t max_context_len = *std::max_element(batch.contexts.begin(), batch.contexts.end()) + slack;
  const int64_t stride = max_context_len + 3;
  const size_t head_elems = static_cast<size_t>(shape.num_heads) * shape.head_dim;
  const std::vector<float> q = random_bf16_values(gen, num_rows * head_elems);
  std::vector<float> weights = random_floats(gen, static_cast<size_t>(num_rows) * shape.num_heads);
  const gpu::DsaIndexerParams params{shape.num_heads, shape.head_dim, shape.topk,
                                     1.0f / std::sqrt(static_cast<float>(shape.head_dim)),
                                     1.0f / std::sqrt(static_cast<float>(shape.num_heads))};

  DeviceArray<float> scores_d(static_cast<size_t>(num_rows) * stride);
  DeviceArray<bf16> q_d = upload_bf16(q);
  DeviceArray<float> weights_d = upload(weights);
  DeviceArray<int32_t> starts_d = upload(starts), contexts_d = upload(batch.contexts);
  gpu::dsa_index_scores(scores_d.data(), stride, q_d.data(), weights_d.data(), cache.view(), starts_d.data(),
                        contexts_d.data(), num_seqs, num_rows, max_context_len, params, nullptr);
  const std::vector<float> scores = scores_d.download();

  // The CPU takes the weights with weight_scale folded in (as model/dsa_indexer.cpp folds it).
  for (float& w : weights) w *= params.weight_scale;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t rows = batch.rows[s], ctx = batch.contexts[s];
    if (rows == 0) continue;
    SCOPED_TRACE(testing::Message() << "scores sequence " << s << " context " << ctx << " rows " << rows);
    const cpu::DsaIndexerShape cpu_shape{rows, ctx - rows, shape.num_heads, shape.head_dim, shape.topk, params.scale};
    std::vector<float> ref(static_cast<size_t>(rows) * ctx);
    cpu::paged_dsa_index_scores(ref.data(), q.data() + starts[s] * head_elems,
                                weights.data() + static_cast<size_t>(starts[s]) * shape.num_heads, cache.keys(),
                                cache.table(s), shape.block_size, cpu_shape);
    std::vector<float> got, want;
    for (int32_t i = 0; i < rows; ++i) {
      const int32_t position = ctx - rows + i;
      const float* row = scores.data() + (starts[s] + i) * stride;
      for (int32_t j = 0; j <= position; ++j) {
        got.push_back(row[j]);
        want.push_back(ref[static_cast<size_t>(i) * ctx + j]);
      }
      for (int32_t j = position + 1; j < max_context_len; ++j) {
        ASSERT_TRUE(std::isinf(row[j]) && row[j] < 0) << "row " << i << " column " << j << " is " << row[j];
      }
    }
    EXPECT_LT(relative_error(got, want), kScoreTolerance);
  }
  check_topk(scores, scores_d, stride, batch, max_context_len, shape.topk);
}

// The tiny model: 4 heads of 16, top-8; a whole 40-token prompt, then a mixed batch of
// chunked prefills and decodes, for block sizes 1, 16 and 64.
TEST(DsaIndexScores, TinyModelShapes) {
  auto gen = rng(703);
  const IndexerShape base{4, 16, 1, 8};
  for (int32_t block_size : {1, 16, 64}) {
    IndexerShape shape = base;
    shape.block_size = block_size;
    check_scores_and_topk(gen, Batch{{40}, {40}}, shape);
    check_scores_and_topk(gen, Batch{{40, 17, 3, 1, 9, 60}, {1, 5, 3, 1, 0, 23}}, shape, 5);
  }
}

// DeepSeek-V3.2: 64 heads of 128, top-2048: contexts around the top-k and one long prompt chunk.
TEST(DsaIndexScores, DeepSeekV32Shapes) {
  auto gen = rng(704);
  for (int32_t block_size : {64, 16}) {
    const IndexerShape shape{64, 128, block_size, 2048};
    check_scores_and_topk(gen, Batch{{100, 2048, 2049, 9000, 50}, {100, 1, 33, 20, 0}}, shape);
    check_scores_and_topk(gen, Batch{{2049, 2050, 4100}, {200, 2, 37}}, shape, 130);
  }
}

// Padded shapes: head_dim 24 (padded to 32 inside), 5 heads (padded to 16), block size 1.
TEST(DsaIndexScores, AwkwardShapes) {
  auto gen = rng(705);
  check_scores_and_topk(gen, Batch{{300, 129, 77}, {37, 129, 1}}, IndexerShape{5, 24, 1, 64});
  check_scores_and_topk(gen, Batch{{300, 129}, {17, 100}}, IndexerShape{20, 64, 16, 100}, 1);
}

// One decode row at the full 128K context.
TEST(DsaIndexScores, LongContextDecode) {
  auto gen = rng(706);
  check_scores_and_topk(gen, Batch{{131072}, {1}}, IndexerShape{64, 128, 64, 2048});
}

// Top-k alone on scores full of ties (few distinct values, +0 and -0 among them, whole rows of
// one value) and with -inf past each row's position, against the CPU rule.
TEST(DsaSelectTopk, TiesGoToEarlierPositions) {
  auto gen = rng(707);
  struct Case {
    Batch batch;
    int32_t topk;
  };
  const Case cases[] = {{{{40}, {40}}, 8},
                        {{{40, 12, 100}, {3, 12, 1}}, 8},
                        {{{9000, 2049, 2048, 100}, {5, 2, 1, 100}}, 2048},
                        {{{131072}, {1}}, 2048}};
  const float palette[] = {-3.0f, -1.0f, -0.0f, 0.0f, 0.5f, 1.0f, 2.0f, 7.0f, -INFINITY};
  for (const Case& c : cases) {
    for (int mode = 0; mode < 3; ++mode) {
      SCOPED_TRACE(testing::Message() << "mode " << mode << " topk " << c.topk);
      const std::vector<int32_t> starts = query_starts_of(c.batch);
      const int32_t num_rows = starts.back();
      const int32_t max_context_len = *std::max_element(c.batch.contexts.begin(), c.batch.contexts.end());
      const int64_t stride = max_context_len + 1;
      std::vector<float> scores(static_cast<size_t>(num_rows) * stride, NAN);
      std::uniform_int_distribution<int> pick(0, 7);  // finite palette entries
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (size_t s = 0; s < c.batch.rows.size(); ++s) {
        for (int32_t i = 0; i < c.batch.rows[s]; ++i) {
          const int32_t position = c.batch.contexts[s] - c.batch.rows[s] + i;
          float* row = scores.data() + (starts[s] + i) * stride;
          for (int32_t j = 0; j < max_context_len; ++j) {
            float v = mode == 0 ? palette[pick(gen)] : mode == 1 ? 1.5f : normal(gen);
            if (mode == 2 && j % 3 == 0) v = palette[pick(gen)];  // ties among distinct values
            row[j] = j <= position ? v : -INFINITY;
          }
        }
      }
      DeviceArray<float> scores_d = upload(scores);
      check_topk(scores, scores_d, stride, c.batch, max_context_len, c.topk);
    }
  }
}

// Score patterns that the selection must get exactly right (each a score for column j):
// - kOneBinade: all in [1, 2): one sign and exponent, so a fixed leading digit would not spread.
// - kSparseRelu: sums of relus that are mostly exactly 0, so the threshold is 0 itself and the
//   earliest zeros fill the top-k.
// - kSignedZeros: every score +0 or -0: one tie across the whole row.
// - kTiesAtThreshold: 0.5% of 3.0, 30% of 1.0, the rest below: ties straddle the threshold in
//   every chunk of a split row and in the row.
// - kPlateaus: runs of 1000 equal scores (2.0) across every multiple of 4096 (chunk edges) and
//   0.75% of 5.0 above them; the rest below.
// - kFewUlps: 1.0 plus 0..999 ulps: distinct scores that one radix digit tells apart.
enum class Pattern { kOneBinade, kSparseRelu, kSignedZeros, kTiesAtThreshold, kPlateaus, kFewUlps };
constexpr Pattern kPatterns[] = {Pattern::kOneBinade,        Pattern::kSparseRelu, Pattern::kSignedZeros,
                                 Pattern::kTiesAtThreshold, Pattern::kPlateaus,   Pattern::kFewUlps};

float pattern_score(Pattern pattern, std::mt19937_64& gen, int32_t j) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  switch (pattern) {
    case Pattern::kOneBinade:
      return std::min(1.0f + 0.1f * std::abs(normal(gen)), 1.9999999f);
    case Pattern::kSparseRelu: {
      float sum = 0.0f;
      for (int h = 0; h < 3; ++h) sum += std::max(normal(gen) - 2.8f, 0.0f);
      return sum;
    }
    case Pattern::kSignedZeros:
      return uniform(gen) < 0.5f ? -0.0f : 0.0f;
    case Pattern::kTiesAtThreshold: {
      const float u = uniform(gen);
      return u < 0.005f ? 3.0f : u < 0.305f ? 1.0f : 1.9f * uniform(gen) - 1.0f;
    }
    case Pattern::kPlateaus: {
      if (j % 4096 < 500 || j % 4096 >= 3596) return 2.0f;
      return uniform(gen) < 0.0075f ? 5.0f : std::min(0.3f * normal(gen), 1.9f);
    }
    case Pattern::kFewUlps: {
      const uint32_t ulps = std::uniform_int_distribution<uint32_t>(0, 999)(gen);
      float value = 0.0f;
      const uint32_t bits = 0x3f800000u + ulps;  // 1.0f + ulps
      std::memcpy(&value, &bits, sizeof(value));
      return value;
    }
  }
  return 0.0f;
}

// Host scores of `batch` plus `padding_rows` rows of NaN: the pattern at the columns j <= each
// row's position, -inf past it up to max_context_len, NaN in the stride's slack.
std::vector<float> pattern_scores(std::mt19937_64& gen, Pattern pattern, const Batch& batch, int64_t stride,
                                  int32_t max_context_len, int32_t padding_rows) {
  const std::vector<int32_t> starts = query_starts_of(batch);
  std::vector<float> scores(static_cast<size_t>(starts.back() + padding_rows) * stride, NAN);
  for (size_t s = 0; s < batch.rows.size(); ++s) {
    for (int32_t i = 0; i < batch.rows[s]; ++i) {
      const int32_t position = batch.contexts[s] - batch.rows[s] + i;
      float* row = scores.data() + (starts[s] + i) * stride;
      for (int32_t j = 0; j < max_context_len; ++j) row[j] = j <= position ? pattern_score(pattern, gen, j) : -INFINITY;
    }
  }
  return scores;
}

// Every pattern on `batch` (max_context_len: the longest context plus `slack`), against the CPU.
void check_topk_patterns(std::mt19937_64& gen, const Batch& batch, int32_t topk, int32_t padding_rows,
                         int32_t slack = 0) {
  const int32_t max_context_len = *std::max_element(batch.contexts.begin(), batch.contexts.end()) + slack;
  const int64_t stride = max_context_len + 5;
  for (Pattern pattern : kPatterns) {
    SCOPED_TRACE(testing::Message() << "pattern " << static_cast<int>(pattern) << " topk " << topk << " max_context_len "
                                    << max_context_len << " padding rows " << padding_rows);
    const std::vector<float> scores = pattern_scores(gen, pattern, batch, stride, max_context_len, padding_rows);
    DeviceArray<float> scores_d = upload(scores);
    check_topk(scores, scores_d, stride, batch, max_context_len, topk, padding_rows);
  }
}

// Few long rows: each row is split across CTAs (chunk-local top-k, then one merge a row).
// dsa_topk.cu's plan on a 132-SM H200: 8 chunks of 16384 for the 131072-wide cases, 4 of 5024
// at topk 64, 7 of 7168 at topk 1000, and at topk 16384 two chunks of 65536, longer than the
// shared memory holds (read from global memory).
TEST(DsaSelectTopk, SplitRowsMatchCpu) {
  auto gen = rng(708);
  check_topk_patterns(gen, Batch{{131072}, {1}}, 2048, 0);
  // Contexts that differ (empty later chunks), p + 1 <= topk, p + 1 = topk + 1, a prefill
  // chunk of 3 rows, and graph padding.
  check_topk_patterns(gen, Batch{{131072, 100000, 2049, 100, 131072, 40000}, {1, 1, 1, 1, 3, 2}}, 2048, 3);
  check_topk_patterns(gen, Batch{{20000, 9000, 20000, 4000}, {1, 1, 2, 1}}, 64, 1);
  check_topk_patterns(gen, Batch{{50000, 7777}, {2, 1}}, 1000, 0, 13);
  check_topk_patterns(gen, Batch{{131072}, {1}}, 16384, 2);
}

// Many rows keep one CTA a row: a prefill chunk staged in shared memory (contexts too short to
// split), more rows than SMs (140 > 132: splitting could not add a wave's worth), and rows
// longer than the shared memory with a top-k too large to split (8000 over 60000), read from
// global memory.
TEST(DsaSelectTopk, UnsplitRowsMatchCpu) {
  auto gen = rng(709);
  check_topk_patterns(gen, Batch{{9000, 3000, 9000, 2500}, {200, 1, 1, 40}}, 2048, 5);
  check_topk_patterns(gen, Batch{{17000, 16500}, {100, 40}}, 2048, 0);
  check_topk_patterns(gen, Batch{{60000, 30000, 10000}, {2, 1, 1}}, 8000, 2);
}

}  // namespace
}  // namespace tachyon::gpu_test
