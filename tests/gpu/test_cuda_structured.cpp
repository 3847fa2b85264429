// Structured outputs through the CUDA runner and the engine: with asynchronous scheduling (on by
// default for the CUDA runner) a constrained sequence's mask follows the launch: the runner runs
// the step's forward while the engine applies the step before and computes the mask, and samples
// once supply_token_masks() hands it over. Every completion must equal the synchronous loop's
// token for token (seeded sampling at temperature 1, so a mask of the wrong step shows), keep to
// its grammar, and the same must hold with graphs and eagerly. The vocabulary is made here (digits,
// letters, punctuation and some two-letter tokens over the tiny model's ids), so no tokenizer is
// needed; the grammars are regexes.
#include <regex>

#include "runner_test_util.h"
#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"
#include "tachyon/structured/token_vocabulary.h"

namespace tachyon::runner {
namespace {

constexpr int32_t kEos = 1;

// tokens[id]: one or two characters of [0-9a-z,;-], "" for ids that take no part (EOS among them).
std::vector<std::string> vocabulary_tokens(int64_t vocab_size) {
  const std::string alphabet = "0123456789abcdefghijklmnopqrstuvwxyz,;-";
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  size_t next = 0;
  for (int64_t id = 2; id < vocab_size; ++id) {
    if (next < alphabet.size()) {
      tokens[static_cast<size_t>(id)] = alphabet.substr(next++, 1);
    } else {
      const size_t pair = static_cast<size_t>(id) * 7919;
      tokens[static_cast<size_t>(id)] = {alphabet[pair % alphabet.size()], alphabet[(pair / 41) % alphabet.size()]};
    }
  }
  return tokens;
}

struct Completions {
  std::vector<std::vector<int32_t>> tokens;  // [request]
  int64_t graph_replays = 0;
};

TEST(CudaStructured, MasksThatFollowTheLaunchGiveTheSynchronousTokens) {
  const fs::path dir = make_tiny({"qwen3", "tiny-gpu"});
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  const std::vector<std::string> vocabulary = vocabulary_tokens(mc.vocab_size);
  structured::GrammarCompiler compiler(std::make_shared<structured::TokenVocabulary>(vocabulary, mc.vocab_size));
  const std::vector<std::string> regexes = {"[0-9]{2,6}(,[a-z]{1,3}){1,4}", "(ab|cd|ef)+;[0-9]+", "[a-z]{3}-[0-9]{2}",
                                            "(0|1){4,12}", "[a-f0-9]{8}", "x(,y){0,9}z"};
  auto gen = gpu_test::rng(5);
  std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(mc.vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<core::SamplingParams> params;
  for (size_t i = 0; i < 14; ++i) {  // two requests per regex, and two unconstrained ones
    prompts.emplace_back(static_cast<size_t>(3 + 5 * i));
    for (int32_t& t : prompts.back()) t = token(gen);
    core::SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 40 + i;
    p.max_tokens = 24;
    if (i < 2 * regexes.size()) {
      p.structured = compiler.compile({structured::ConstraintSpec::Kind::kRegex, regexes[i % regexes.size()], {}, "regex"});
    } else {
      p.ignore_eos = true;
    }
    params.push_back(p);
  }
  auto run = [&](bool eager, core::AsyncScheduling async) {
    core::EngineConfig config = small_config(eager);
    config.device.async_scheduling = async;
    config.scheduler.max_num_seqs = 16;
    // Every step the same rows in both loops, so the same kernels and bits (near_ties.h): all
    // prompts (497 tokens) prefill in the first step, and every decode step pads to one bucket of
    // 16 rows. Otherwise a sequence that finished at step n, which the asynchronous loop has already
    // planned into step n+1, makes that step one row longer than the synchronous one's: across a
    // bucket edge (8 -> 16 rows: GEMV -> cuBLASLt) or a prefill chunk's edge its company rounds
    // otherwise, and a seeded draw near a tie parts (seen on the GPU machine, 2 runs in ~10).
    config.scheduler.max_num_batched_tokens = 512;
    config.device.cuda_graph_batch_sizes = {16};
    config.scheduler.eos_token_id = kEos;
    auto runner = std::make_unique<CudaModelRunner>(weights, config);
    CudaModelRunner* cuda = runner.get();
    config.num_blocks = runner->num_blocks();
    engine::EngineCore engine(config, std::move(runner));
    EXPECT_EQ(engine.async_scheduling(), async != core::AsyncScheduling::kOff);
    Completions out;
    out.tokens.resize(prompts.size());
    std::vector<std::shared_ptr<engine::OutputChannel>> channels;
    for (size_t i = 0; i < prompts.size(); ++i) {
      channels.push_back(std::make_shared<engine::OutputChannel>([&out, i](engine::RequestOutput&& o) {
        for (auto& d : o.completions) out.tokens[i].insert(out.tokens[i].end(), d.token_ids.begin(), d.token_ids.end());
      }));
      engine.submit(prompts[i], params[i], channels.back());
    }
    while (engine.step()) {
    }
    out.graph_replays = cuda->graph_replays();
    return out;
  };
  const Completions sync = run(false, core::AsyncScheduling::kOff);
  const Completions late = run(false, core::AsyncScheduling::kAuto);
  const Completions late_eager = run(true, core::AsyncScheduling::kAuto);
  EXPECT_GT(late.graph_replays, 0) << "decode steps should replay graphs";
  EXPECT_EQ(late_eager.graph_replays, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(late.tokens[i], sync.tokens[i]) << "request " << i << ": masks that follow the launch (graphs)";
    EXPECT_EQ(late_eager.tokens[i], sync.tokens[i]) << "request " << i << ": masks that follow the launch (eager)";
    if (params[i].structured == nullptr) continue;
    // Every token but a final EOS is one the grammar takes, and an EOS only where it may end.
    structured::Matcher matcher(params[i].structured);
    std::string text;
    for (size_t t = 0; t < late.tokens[i].size(); ++t) {
      const int32_t id = late.tokens[i][t];
      if (id == kEos) {
        EXPECT_EQ(t + 1, late.tokens[i].size()) << "request " << i << ": EOS before the end";
        EXPECT_TRUE(matcher.can_end()) << "request " << i << ": EOS where the grammar cannot end: " << text;
        EXPECT_TRUE(std::regex_match(text, std::regex(regexes[i % regexes.size()]))) << text;
        break;
      }
      ASSERT_TRUE(matcher.accept_token(id)) << "request " << i << " token " << t << " (" << id << ") after '" << text << "'";
      text += vocabulary[static_cast<size_t>(id)];
    }
  }
}

}  // namespace
}  // namespace tachyon::runner
