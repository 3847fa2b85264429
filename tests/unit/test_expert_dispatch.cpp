// Expert-parallel dispatch and combine over all_to_all_v (model/expert_dispatch.h) against the
// single rank's routed experts (moe_routed), on G = 1, 2, 3, 4 and 6 thread ranks, for both
// routers (Qwen3-MoE's softmax top-k, DeepSeek-V3's group-limited sigmoid):
//   - every rank sourcing every token gets moe_routed's output BIT FOR BIT (same router rows,
//     same expert products, added in expert index order);
//   - ranks sourcing uneven slices (one of them none, as an idle data-parallel rank) get each
//     token's row of moe_routed within f32 rounding of the router's product over fewer rows;
//   - two runs give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/model/expert_dispatch.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/moe.h"

namespace tachyon::model {
namespace {

constexpr int64_t kDispatchTokens = 11;

std::vector<float> dispatch_random_values(size_t count, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// A MoE layer with `experts` random experts (a multiple of 12, so that 1, 2, 3, 4 and 6 ranks
// each hold the same number).
struct MoeCase {
  ModelConfig config;
  LayerWeights full;
  std::vector<float> x;  // [kDispatchTokens, hidden]
};

MoeCase make_case(const char* arch, const char* preset, int64_t experts, int64_t n_group) {
  MoeCase m;
  m.config = make_model_config({.arch = arch, .preset = preset});
  ModelConfig& c = m.config;
  c.num_experts = experts;
  if (c.router == RouterKind::kSigmoidGroupLimited) c.n_group = n_group;
  std::mt19937 rng(7);
  const int64_t hidden = c.hidden_size, inter = c.moe_intermediate_size;
  m.full.router = dispatch_random_values(static_cast<size_t>(experts * hidden), rng, 0.5f);
  if (c.router == RouterKind::kSigmoidGroupLimited) m.full.router_bias = dispatch_random_values(static_cast<size_t>(experts), rng, 0.1f);
  m.full.experts_gate_up = dispatch_random_values(static_cast<size_t>(experts * 2 * inter * hidden), rng, 0.2f);
  m.full.experts_down = dispatch_random_values(static_cast<size_t>(experts * hidden * inter), rng, 0.2f);
  m.x = dispatch_random_values(static_cast<size_t>(kDispatchTokens * hidden), rng, 1.0f);
  return m;
}

// Rank g's layer: the router whole, experts [g * E / G, (g + 1) * E / G) stacked.
LayerWeights rank_layer(const MoeCase& m, int g, int ranks) {
  const ModelConfig& c = m.config;
  const int64_t per_rank = c.num_experts / ranks, gate_up = 2 * c.moe_intermediate_size * c.hidden_size,
                down = c.hidden_size * c.moe_intermediate_size;
  LayerWeights w;
  w.router = m.full.router;
  w.router_bias = m.full.router_bias;
  w.experts_gate_up.assign(m.full.experts_gate_up.begin() + g * per_rank * gate_up,
                           m.full.experts_gate_up.begin() + (g + 1) * per_rank * gate_up);
  w.experts_down.assign(m.full.experts_down.begin() + g * per_rank * down,
                        m.full.experts_down.begin() + (g + 1) * per_rank * down);
  return w;
}

// Runs dispatch_experts on `ranks` threads; rank g sources tokens [first[g], first[g + 1]).
// Returns the tokens' rows in token order, concatenated over the ranks.
std::vector<float> run_dispatch(const MoeCase& m, int ranks, const std::vector<int64_t>& first) {
  const int64_t hidden = m.config.hidden_size;
  dist::CpuWorld world(ranks);
  std::vector<std::vector<float>> outs(static_cast<size_t>(ranks));
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int g = 0; g < ranks; ++g) {
    threads.emplace_back([&, g] {
      try {
        dist::CpuCommunicator ep(world, g);
        const LayerWeights w = rank_layer(m, g, ranks);
        const int64_t begin = first[static_cast<size_t>(g)], rows = first[static_cast<size_t>(g) + 1] - begin;
        const std::span<const float> x(m.x.data() + begin * hidden, static_cast<size_t>(rows * hidden));
        outs[static_cast<size_t>(g)] = detail::dispatch_experts(m.config, w, ep, x, rows, nullptr);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(g)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<float> all;
  for (int g = 0; g < ranks; ++g) {
    EXPECT_EQ(errors[static_cast<size_t>(g)], "") << "rank " << g << " of " << ranks;
    all.insert(all.end(), outs[static_cast<size_t>(g)].begin(), outs[static_cast<size_t>(g)].end());
  }
  return all;
}

std::vector<MoeCase> dispatch_cases() {
  std::vector<MoeCase> all;
  all.push_back(make_case("qwen3_moe", "tiny-moe", 12, 0));
  all.push_back(make_case("deepseek_v3", "tiny-deepseek", 24, 4));  // 4 groups of 6, top-2 groups, top-4
  return all;
}

TEST(ExpertDispatch, EveryRankSourcingEveryTokenIsBitIdenticalToOneRank) {
  for (const MoeCase& m : dispatch_cases()) {
    SCOPED_TRACE(m.config.architecture);
    const std::vector<float> reference =
        moe_routed(m.config, m.full, m.x, kDispatchTokens, ExpertRange{0, m.config.num_experts});
    for (int ranks : {1, 2, 3, 4, 6}) {
      // One rank at a time sources all tokens; the others source none (idle ranks).
      for (int source = 0; source < ranks; ++source) {
        std::vector<int64_t> bounds(static_cast<size_t>(ranks) + 1, 0);
        for (int g = source + 1; g <= ranks; ++g) bounds[static_cast<size_t>(g)] = kDispatchTokens;
        const std::vector<float> got = run_dispatch(m, ranks, bounds);
        ASSERT_EQ(got.size(), reference.size());
        EXPECT_EQ(std::memcmp(got.data(), reference.data(), got.size() * sizeof(float)), 0)
            << ranks << " ranks, rank " << source << " sourcing";
      }
    }
  }
}

TEST(ExpertDispatch, UnevenSlicesMatchOneRankAndRepeatBitForBit) {
  for (const MoeCase& m : dispatch_cases()) {
    SCOPED_TRACE(m.config.architecture);
    const std::vector<float> reference =
        moe_routed(m.config, m.full, m.x, kDispatchTokens, ExpertRange{0, m.config.num_experts});
    double scale = 0;
    for (float v : reference) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (int ranks : {2, 3, 4, 6}) {
      // Rank 0 sources nothing; the others uneven slices of the 11 tokens.
      std::vector<int64_t> bounds = {0, 0};
      for (int g = 1; g < ranks; ++g) bounds.push_back(kDispatchTokens * g * g / ((ranks - 1) * (ranks - 1)));
      const std::vector<float> got = run_dispatch(m, ranks, bounds);
      ASSERT_EQ(got.size(), reference.size()) << ranks << " ranks";
      double diff = 0;
      for (size_t i = 0; i < got.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(got[i] - reference[i])));
      EXPECT_LE(diff / scale, 1e-6) << ranks << " ranks";
      const std::vector<float> again = run_dispatch(m, ranks, bounds);
      EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)), 0) << ranks << " ranks";
    }
  }
}

}  // namespace
}  // namespace tachyon::model
