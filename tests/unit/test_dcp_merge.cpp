// Decode context parallelism's pieces, without a model:
//   layout   every position has one owner; local indices, counts, global positions and local
//            slots agree with each other and with the engine's block table (sizes 2, 3, 4, 6;
//            interleave 1, 2, 3);
//   merge    partial latent attentions over any split of the rows (ranks holding no row included),
//            merged by their log-sum-exps, equal the absorbed kernel over every row (1e-6 relative);
//   top-k    the merge of local top-k candidates equals kernels::cpu::dsa_select_topk over the whole
//            score row, with adversarial ties (all scores equal, few distinct values, +0/-0),
//            fewer candidates than k, and every split;
//   exchange candidates whose score bytes are NaN payloads, a signalling NaN, denormals and -0 arrive
//            bit-identical through the CPU communicator's all-gather at group sizes 2, 3, 4 and 6.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/kernels/dsa_indexer.h"
#include "tachyon/kernels/mla_attention.h"
#include "tachyon/model/dcp_layout.h"
#include "tachyon/model/dcp_partial_attention.h"
#include "tachyon/model/dcp_topk.h"

namespace tachyon::model {
namespace {

constexpr int kGroupSizes[] = {2, 3, 4, 6};

TEST(DcpLayout, EveryPositionHasOneOwnerAndTheMapsInvertEachOther) {
  for (int size : kGroupSizes) {
    for (int interleave : {1, 2, 3}) {
      const int32_t block_size = size * interleave * 2;
      const std::vector<int32_t> block_table = {5, 2, 7, 0};
      std::vector<int64_t> next_local(static_cast<size_t>(size), 0);
      for (int64_t p = 0; p < 4 * block_size; ++p) {
        int owners = 0;
        for (int r = 0; r < size; ++r) {
          const DcpLayout layout{size, r, interleave};
          EXPECT_EQ(layout.local_count(p), next_local[static_cast<size_t>(r)]) << "rank " << r << " position " << p;
          if (!layout.owns(p)) continue;
          ++owners;
          EXPECT_EQ(layout.local_index(p), next_local[static_cast<size_t>(r)]++) << "position " << p;
          EXPECT_EQ(layout.global_position(layout.local_index(p)), p);
          // The engine's slot of p maps to local row block_table[k / (B / N)] * (B / N) + k % (B / N).
          const int64_t k = layout.local_index(p), local_block = block_size / size;
          const int64_t global_slot = int64_t{block_table[static_cast<size_t>(p / block_size)]} * block_size + p % block_size;
          EXPECT_EQ(layout.local_slot(global_slot, block_size),
                    block_table[static_cast<size_t>(k / local_block)] * local_block + k % local_block);
        }
        EXPECT_EQ(owners, 1) << "position " << p << " size " << size << " interleave " << interleave;
      }
    }
  }
}

TEST(DcpMerge, PartialsMergedByLseEqualOneSoftmaxOverEveryRow) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  kernels::cpu::MlaAttentionShape shape{.num_queries = 1, .num_heads = 3, .kv_lora_rank = 16, .rope_dim = 8, .scale = 0.3f};
  const int64_t width = shape.kv_lora_rank + shape.rope_dim;
  for (int64_t rows : {1, 2, 5, 37}) {
    shape.first_position = rows - 1;
    std::vector<float> cache(static_cast<size_t>(rows * width)), q(static_cast<size_t>(shape.num_heads * width));
    for (float& v : cache) v = 2.0f * normal(rng);
    for (float& v : q) v = 2.0f * normal(rng);
    std::vector<float> want(static_cast<size_t>(shape.num_heads * shape.kv_lora_rank));
    kernels::cpu::mla_attention(want.data(), q.data(), cache.data(), shape);
    for (int size : kGroupSizes) {
      for (int interleave : {1, 2}) {
        std::vector<float> out(static_cast<size_t>(size) * want.size()), lse(static_cast<size_t>(size * shape.num_heads));
        for (int r = 0; r < size; ++r) {
          const DcpLayout layout{size, r, interleave};
          std::vector<int64_t> mine;
          for (int64_t p = 0; p < rows; ++p) {
            if (layout.owns(p)) mine.push_back(p);
          }
          partial_latent_attention(out.data() + r * want.size(), lse.data() + r * shape.num_heads, q.data(),
                                   cache.data(), mine, shape);
        }
        std::vector<float> got(want.size());
        merge_attention_partials(got.data(), out.data(), lse.data(),
                                 {.sources = size, .num_tokens = 1, .all_heads = shape.num_heads, .head_begin = 0,
                                  .heads = shape.num_heads, .width = shape.kv_lora_rank});
        double worst = 0, scale = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
          scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
        }
        EXPECT_LE(worst / scale, 1e-6) << rows << " rows over " << size << " ranks, interleave " << interleave;
      }
    }
  }
}

// Heads [head_begin, head_begin + heads) of all_heads are what a TP rank takes from the merge.
TEST(DcpMerge, TakesTheRequestedHeadsOfTheGatheredOnes) {
  // Two sources, two tokens, four heads of width 1; source 1 holds nothing for head 2 of token 1.
  const std::vector<float> out = {1, 2, 3, 4, 5, 6, 7, 8, /* source 1 */ 10, 20, 30, 40, 50, 60, 0, 80};
  const std::vector<float> lse = {0, 0, 0, 0, 0, 0, 0, 0, /* source 1 */ 0, 0, 0, 0, 0, 0, -INFINITY, std::log(3.0f)};
  std::vector<float> got(4);
  merge_attention_partials(got.data(), out.data(), lse.data(),
                           {.sources = 2, .num_tokens = 2, .all_heads = 4, .head_begin = 2, .heads = 2, .width = 1});
  EXPECT_FLOAT_EQ(got[0], (3 + 30) / 2.0f);
  EXPECT_FLOAT_EQ(got[1], (4 + 40) / 2.0f);
  EXPECT_FLOAT_EQ(got[2], 7.0f);                    // source 1 had no row: weight 0
  EXPECT_FLOAT_EQ(got[3], (8 + 3 * 80) / 4.0f);     // exp(lse) weights 1 and 3
}

// The unsplit indexer's selection over one query's whole score row.
std::vector<int32_t> unsplit_topk(const std::vector<float>& scores, int64_t topk) {
  const kernels::cpu::DsaIndexerShape shape{.num_queries = 1,
                                            .first_position = static_cast<int64_t>(scores.size()) - 1,
                                            .topk = topk};
  std::vector<int32_t> kept(static_cast<size_t>(topk));
  kernels::cpu::dsa_select_topk(kept.data(), scores.data(), shape);
  return kept;
}

// Each rank's local cut, concatenated in rank order (what the exchange delivers), then the merge.
std::vector<int32_t> split_topk(const std::vector<float>& scores, int64_t topk, int size, int interleave) {
  std::vector<IndexCandidate> gathered(static_cast<size_t>(size * topk));
  for (int r = 0; r < size; ++r) {
    const DcpLayout layout{size, r, interleave};
    std::vector<float> local_scores;
    std::vector<int32_t> positions;
    for (int64_t p = 0; p < static_cast<int64_t>(scores.size()); ++p) {
      if (!layout.owns(p)) continue;
      local_scores.push_back(scores[static_cast<size_t>(p)]);
      positions.push_back(static_cast<int32_t>(p));
    }
    local_topk_candidates(local_scores, positions, topk, gathered.data() + r * topk);
  }
  std::vector<int32_t> kept(static_cast<size_t>(topk));
  merge_topk_candidates(gathered, topk, kept.data());
  return kept;
}

TEST(DcpTopk, MergeEqualsTheUnsplitIndexerWithAdversarialTies) {
  const int64_t topk = 8;
  // All equal: the earliest positions win, wherever they live.
  for (int size : kGroupSizes) {
    const std::vector<float> equal(29, 0.25f);
    EXPECT_EQ(split_topk(equal, topk, size, 1), unsplit_topk(equal, topk)) << size;
    EXPECT_EQ(split_topk(equal, topk, size, 1), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  }
  // +0 and -0 compare equal: position decides, as in the unsplit sort.
  std::vector<float> zeros(20, 0.0f);
  for (size_t i = 0; i < zeros.size(); i += 3) zeros[i] = -0.0f;
  for (int size : kGroupSizes) EXPECT_EQ(split_topk(zeros, topk, size, 2), unsplit_topk(zeros, topk)) << size;
  // Fewer candidates than k: every position kept, -1 padded.
  const std::vector<float> few = {3.0f, -1.0f, 3.0f, 0.5f, 3.0f};
  for (int size : kGroupSizes) {
    EXPECT_EQ(split_topk(few, topk, size, 1), (std::vector<int32_t>{0, 1, 2, 3, 4, -1, -1, -1})) << size;
  }
  // Random rows over few distinct values: ties at the cut in nearly every row.
  std::mt19937 rng(11);
  const float values[] = {-2.0f, -0.0f, 0.0f, 0.5f, 1.0f, 1.0f, 7.5f};
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t length = 1 + static_cast<int64_t>(rng() % 40);
    std::vector<float> scores(static_cast<size_t>(length));
    for (float& s : scores) s = values[rng() % std::size(values)];
    const int size = kGroupSizes[rng() % std::size(kGroupSizes)];
    const int interleave = 1 + static_cast<int>(rng() % 3);
    const int64_t k = 1 + static_cast<int64_t>(rng() % 10);
    ASSERT_EQ(split_topk(scores, k, size, interleave), unsplit_topk(scores, k))
        << "trial " << trial << ": " << length << " scores, top-" << k << " over " << size << " ranks, interleave "
        << interleave;
  }
}

TEST(DcpTopk, ExchangeMovesNanPayloadsAndDenormalsBitIdentically) {
  const uint32_t patterns[] = {0x7fc12345u, 0xffc00001u, 0x7f800001u /* signalling */, 0x00000001u, 0x807fffffu,
                               0x80000000u, 0x7f800000u, 0x3f800000u};
  for (int size : kGroupSizes) {
    const int64_t per_rank = 6;  // [n = 2, topk = 3]
    std::vector<std::vector<IndexCandidate>> sent(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < per_rank; ++i) {
        IndexCandidate c;
        const uint32_t bits = patterns[static_cast<size_t>(r * per_rank + i) % std::size(patterns)];
        std::memcpy(&c.score, &bits, sizeof(bits));
        c.position = static_cast<int32_t>(r * 1000 + i);
        sent[static_cast<size_t>(r)].push_back(c);
      }
    }
    std::vector<uint8_t> want(static_cast<size_t>(size * per_rank) * sizeof(IndexCandidate));
    for (int r = 0; r < size; ++r) {
      std::memcpy(want.data() + static_cast<size_t>(r * per_rank) * sizeof(IndexCandidate),
                  sent[static_cast<size_t>(r)].data(), static_cast<size_t>(per_rank) * sizeof(IndexCandidate));
    }
    dist::CpuWorld world(size);
    std::vector<std::vector<IndexCandidate>> got(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        dist::CpuCommunicator group(world, r);
        got[static_cast<size_t>(r)] = exchange_candidates(group, sent[static_cast<size_t>(r)]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(got[static_cast<size_t>(r)].size() * sizeof(IndexCandidate), want.size());
      EXPECT_EQ(std::memcmp(got[static_cast<size_t>(r)].data(), want.data(), want.size()), 0)
          << "rank " << r << " of " << size;
    }
  }
}

}  // namespace
}  // namespace tachyon::model
