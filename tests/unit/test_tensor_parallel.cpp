// Tensor parallelism on CPU thread ranks: for the tiny presets (GQA, q/k norm, qkv biases, all
// biases, one kv head replicated over the ranks, tied embeddings) and tp = 1, 2, 4, every rank's
// logits over a 12-token prompt and 8 greedy decode steps equal the unsharded DenseModel's within
// 1e-5 of the logit scale, are bit-identical on all ranks, and the greedy tokens equal
// greedy_generate's. A tp that does not divide the model fails with a message naming the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../tiny_families.h"
#include "tachyon/base/check.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/model/tp_shard.h"

namespace tachyon::model {
namespace {

constexpr int64_t kPromptTokens = 12;
constexpr int64_t kDecodeSteps = 8;

ModelWeights make_weights(const std::string& arch, const std::string& preset) {
  return testing::make_weights(arch, preset, 7);
}

std::vector<int32_t> make_prompt(int64_t vocab) {
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < kPromptTokens; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  return prompt;
}

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// One run: the prompt's logits [12, vocab] (all rows), then one [1, vocab] per decode step, and
// the greedy tokens (1 from the prompt + 1 per decode step).
struct GreedyRun {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
  std::string error;
};

// Runs the prompt then kDecodeSteps greedy steps with `forward(tokens, all_logits)`.
template <typename Forward>
GreedyRun greedy_run(const std::vector<int32_t>& prompt, Forward forward) {
  GreedyRun run;
  run.logits.push_back(forward(std::span<const int32_t>(prompt), true));
  const int64_t vocab = static_cast<int64_t>(run.logits[0].size()) / kPromptTokens;
  std::vector<float> last(run.logits[0].end() - vocab, run.logits[0].end());
  run.tokens.push_back(argmax(last));
  for (int64_t step = 0; step < kDecodeSteps; ++step) {
    run.logits.push_back(forward(std::span<const int32_t>(&run.tokens.back(), 1), false));
    run.tokens.push_back(argmax(run.logits.back()));
  }
  return run;
}

// max |a - b| / max |b|.
double relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

// Runs every rank of a tp-rank group on its own thread.
std::vector<GreedyRun> tp_runs(const ModelWeights& full, int tp, const std::vector<int32_t>& prompt) {
  dist::CpuWorld world(tp);
  std::vector<GreedyRun> runs(static_cast<size_t>(tp));
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::CpuCommunicator group(world, r);
        TpDenseModel model(full, group);
        SequenceKvCache cache(model.config(), kPromptTokens + kDecodeSteps + 1);
        runs[static_cast<size_t>(r)] = greedy_run(prompt, [&](std::span<const int32_t> tokens, bool all_logits) {
          return model.forward(tokens, cache, all_logits);
        });
      } catch (const std::exception& e) {
        runs[static_cast<size_t>(r)].error = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

struct Case {
  const char* arch;
  const char* preset;
};

TEST(TensorParallel, LogitsAndGreedyTokensMatchTheUnshardedModel) {
  for (const Case& c : {Case{"llama", "tiny"}, Case{"qwen3", "tiny"}, Case{"qwen2", "tiny"}, Case{"llama", "tiny-bias"},
                        Case{"llama", "tiny-mqa"}, Case{"llama", "tiny-tied"}}) {
    SCOPED_TRACE(std::string(c.arch) + " " + c.preset);
    const ModelWeights full = make_weights(c.arch, c.preset);
    const DenseModel reference_model{ModelWeights(full)};
    const std::vector<int32_t> prompt = make_prompt(full.config.vocab_size);
    SequenceKvCache reference_cache(full.config, kPromptTokens + kDecodeSteps + 1);
    const GreedyRun reference = greedy_run(prompt, [&](std::span<const int32_t> tokens, bool all_logits) {
      return reference_model.forward(tokens, reference_cache, all_logits);
    });
    EXPECT_EQ(reference.tokens, greedy_generate(reference_model, prompt, kDecodeSteps + 1));

    for (int tp : {1, 2, 4}) {
      SCOPED_TRACE("tp " + std::to_string(tp));
      const std::vector<GreedyRun> runs = tp_runs(full, tp, prompt);
      for (int r = 0; r < tp; ++r) {
        const GreedyRun& run = runs[static_cast<size_t>(r)];
        ASSERT_EQ(run.error, "") << "rank " << r;
        EXPECT_EQ(run.tokens, reference.tokens) << "rank " << r;
        ASSERT_EQ(run.logits.size(), reference.logits.size());
        for (size_t step = 0; step < run.logits.size(); ++step) {
          ASSERT_EQ(run.logits[step].size(), reference.logits[step].size()) << "rank " << r << " step " << step;
          EXPECT_LE(relative_diff(run.logits[step], reference.logits[step]), 1e-5) << "rank " << r << " step " << step;
          const std::vector<float>& rank0 = runs[0].logits[step];
          EXPECT_EQ(std::memcmp(run.logits[step].data(), rank0.data(), rank0.size() * sizeof(float)), 0)
              << "rank " << r << " differs from rank 0 at step " << step;
        }
      }
    }
  }
}

TEST(TensorParallel, ShardsSplitHeadsAndReplicateKvHeadsBeyondTheirCount) {
  const ModelWeights mqa = make_weights("llama", "tiny-mqa");  // 8 heads, 1 kv head, head_dim 8
  for (int r = 0; r < 4; ++r) {
    TpShard shard = shard_weights(mqa, r, 4);
    EXPECT_EQ(shard.weights.config.num_attention_heads, 2);
    EXPECT_EQ(shard.weights.config.num_key_value_heads, 1);
    EXPECT_EQ(shard.kv_head_begin, 0);  // the one kv head, replicated on every rank
    EXPECT_EQ(shard.weights.config.intermediate_size, 40);
    EXPECT_EQ(shard.vocab_begin, r * 128);
    EXPECT_EQ(shard.weights.embed_tokens.size(), static_cast<size_t>(128 * 64));
    EXPECT_EQ(shard.weights.layers[0].qkv.size(), static_cast<size_t>((16 + 2 * 8) * 64));
    EXPECT_EQ(shard.weights.layers[0].o_proj.size(), static_cast<size_t>(64 * 16));
  }
  const ModelConfig gqa = make_model_config({.arch = "llama", .preset = "tiny"});  // 4 heads, 2 kv heads, 160 inter
  EXPECT_EQ(tp_rank_config(gqa, 4).num_key_value_heads, 1);  // replicated: ranks 0, 1 keep kv head 0; 2, 3 head 1
  const ModelWeights tiny = make_weights("llama", "tiny");
  for (int r = 0; r < 4; ++r) EXPECT_EQ(shard_weights(tiny, r, 4).kv_head_begin, r / 2) << "rank " << r;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(shard_weights(tiny, r, 2).kv_head_begin, r) << "rank " << r;
  EXPECT_EQ(tp_rank_config(gqa, 2).num_key_value_heads, 1);
  EXPECT_EQ(tp_rank_config(gqa, 1).num_key_value_heads, 2);
}

std::string error_of(const ModelConfig& config, int tp) {
  try {
    check_tp_size(config, tp);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TensorParallel, BadSizesFailNamingTheField) {
  const ModelConfig tiny = make_model_config({.arch = "llama", .preset = "tiny"});  // 4 heads / 2 kv
  EXPECT_NE(error_of(tiny, 3).find("tensor parallel size 3 does not divide num_attention_heads 4"), std::string::npos)
      << error_of(tiny, 3);
  ModelConfig c = tiny;
  c.num_attention_heads = 12;
  c.num_key_value_heads = 4;
  EXPECT_NE(error_of(c, 6).find("exceeds num_key_value_heads 4"), std::string::npos) << error_of(c, 6);
  c = tiny;
  c.intermediate_size = 162;
  EXPECT_NE(error_of(c, 4).find("does not divide intermediate_size 162"), std::string::npos) << error_of(c, 4);
  c = tiny;
  c.vocab_size = 510;
  EXPECT_NE(error_of(c, 4).find("does not divide vocab_size 510"), std::string::npos) << error_of(c, 4);

  // A 3-rank group over the 4-head model: every rank fails in its constructor, none hangs.
  const ModelWeights full = make_weights("llama", "tiny");
  const std::vector<GreedyRun> runs = tp_runs(full, 3, make_prompt(full.config.vocab_size));
  for (const GreedyRun& run : runs) EXPECT_NE(run.error.find("does not divide num_attention_heads 4"), std::string::npos);
}

}  // namespace
}  // namespace tachyon::model
