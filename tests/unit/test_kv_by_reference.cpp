// Prefill/decode disaggregation by reference (server/pd_transport.h, status 6-8): the decode side
// copies a prompt's rows out of the prefill side's cache itself (CUDA IPC on the GPU machine; here
// a stand-in runner whose "mapping" is the other engine's cache in this process, and UCX reads
// between two host caches, runner/ucx/ucx_kv_rows.h, when the build has UCX), and the source
// keeps the blocks pinned until the decode side says the copy is done. Checked: imports equal one
// engine's output and compute nothing; a copy the source can no longer confirm (its hold timed
// out and the blocks were reused) is never used: the prompt is computed and the output is still
// one engine's; a payload dropped unconfirmed gives the blocks back; a pull whose fingerprint the
// source does not share gets rows. Every KV block is free on both sides at the end.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <thread>

#include "tachyon/engine/engine_core.h"
#include "tachyon/model/make_model.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/app/kv_transport.h"
#include "tachyon/server/pd_transport.h"
#include "kv_transfer_test_util.h"

namespace tachyon::server {
namespace {

using engine::EngineCore;
using engine::OutputChannel;
using kv_test::run_idle;
using kv_test::tokens_of;
using kv_test::wait_for;

// The CPU runner's rows, plus copies by reference out of another such cache in this process: the
// descriptor names it in a registry, as an IPC handle names a cache on the GPU.
class InProcessReferenceRows : public runner::ForwardingKvRowAccess {
 public:
  explicit InProcessReferenceRows(runner::KvRowAccess& inner) : ForwardingKvRowAccess(inner) {
    static int next = 0;
    name_ = "in-process cache " + std::to_string(next++);
    registry()[name_] = this;
  }
  ~InProcessReferenceRows() override { registry().erase(name_); }
  std::string reference_fingerprint() const override {
    std::string fingerprint = "in-process";
    for (int64_t width : plane_widths()) fingerprint += " " + std::to_string(width);
    return fingerprint;
  }
  std::string reference_descriptor() const override { return name_; }
  int64_t copy_by_reference(const std::string& descriptor, int64_t, std::span<const int32_t> source_blocks,
                            std::span<const int32_t> table, int64_t n) override {
    auto it = registry().find(descriptor);
    if (it == registry().end()) throw Error("no cache " + descriptor);
    std::vector<float> rows(static_cast<size_t>(n * values_per_token()));
    it->second->gather(source_blocks, n, rows);
    scatter(table, n, rows);
    return static_cast<int64_t>(rows.size() * sizeof(float));
  }

 private:
  static std::map<std::string, InProcessReferenceRows*>& registry() {
    static std::map<std::string, InProcessReferenceRows*> caches;
    return caches;
  }
  std::string name_;
};

class InProcessReferenceRunner : public runner::ForwardingModelRunner {
 public:
  explicit InProcessReferenceRunner(std::unique_ptr<runner::ModelRunner> inner)
      : ForwardingModelRunner(std::move(inner)), rows_(*this->inner().kv_rows()) {}
  runner::KvRowAccess* kv_rows() override { return &rows_; }

 private:
  InProcessReferenceRows rows_;
};

// The by-reference rows of either kind, counting the copies that returned.
class CountingRows : public runner::ForwardingKvRowAccess {
 public:
  using ForwardingKvRowAccess::ForwardingKvRowAccess;
  int64_t copy_by_reference(const std::string& descriptor, int64_t source_block_size, std::span<const int32_t> source_blocks,
                            std::span<const int32_t> table, int64_t n) override {
    const int64_t bytes = ForwardingKvRowAccess::copy_by_reference(descriptor, source_block_size, source_blocks, table, n);
    ++copies;
    return bytes;
  }
  int copies = 0;
};

class ReferenceRunner : public runner::ForwardingModelRunner {
 public:
  explicit ReferenceRunner(std::unique_ptr<runner::ModelRunner> inner)
      : ForwardingModelRunner(std::move(inner)), rows_(*this->inner().kv_rows()) {}
  runner::KvRowAccess* kv_rows() override { return &rows_; }
  CountingRows& rows() { return rows_; }

 private:
  CountingRows rows_;
};

// Each test runs with the in-process stand-in and, when the build has UCX, with UCX reads.
std::vector<std::string> transports() {
  std::vector<std::string> out = {"in_process"};
  if (app::ucx_available()) out.push_back("ucx");
  return out;
}

class KvByReference : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("tachyon-kv-by-reference-" + std::to_string(::getpid())));
    model::make_model({.arch = "qwen3", .preset = "tiny", .seed = 8, .out_dir = *dir_});
    model_ = new model::DenseModel(model::DenseModel::load(*dir_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete model_;
    delete dir_;
  }
  // An engine over the tiny model; `runner` (when given) receives the by-reference runner.
  static std::unique_ptr<EngineCore> engine(int32_t block_size, ReferenceRunner** runner = nullptr,
                                            int32_t num_blocks = 512) {
    core::EngineConfig c;
    c.scheduler.max_model_len = 256;
    c.num_blocks = num_blocks;
    c.block_size = block_size;
    auto cpu = std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, block_size);
    if (runner == nullptr) return std::make_unique<EngineCore>(c, std::move(cpu));
    std::unique_ptr<runner::ModelRunner> by_reference =
        GetParam() == "ucx" ? app::with_kv_transport(std::move(cpu), "ucx")
                            : std::make_unique<InProcessReferenceRunner>(std::move(cpu));
    auto wrapped = std::make_unique<ReferenceRunner>(std::move(by_reference));
    *runner = wrapped.get();
    return std::make_unique<EngineCore>(c, std::move(wrapped));
  }
  // The prefill engine's KV port, serving by reference as `tachyon serve --role prefill` does;
  // `freeze` (when set) runs before each hold's release, on the port's thread.
  static std::unique_ptr<KvTransferServer> port(EngineCore& prefill, std::chrono::milliseconds hold_timeout,
                                                std::function<void()> freeze = nullptr) {
    std::optional<KvTransferServer::ByReference> source = by_reference_source(prefill, hold_timeout);
    if (freeze) {
      source->release_hold = [release = source->release_hold, freeze](engine::KvLeaseKey key, bool copied) {
        freeze();
        return release(key, copied);
      };
    }
    return std::make_unique<KvTransferServer>(
        "127.0.0.1", 0,
        [&prefill](engine::KvLeaseKey key, size_t from, bool claim) { return prefill.read_kv_stream(key, from, claim); },
        [&prefill](engine::KvLeaseKey key) { prefill.release_kv(key); }, std::chrono::seconds(5), nullptr, 16, source);
  }
  static std::filesystem::path* dir_;
  static model::DenseModel* model_;
};
std::filesystem::path* KvByReference::dir_ = nullptr;
model::DenseModel* KvByReference::model_ = nullptr;

struct Requests {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<core::SamplingParams> params;
};

// Greedy and seeded requests of 1-60 tokens; `seed` varies the prompts.
Requests requests(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  Requests r;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 60);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 512);
    r.prompts.push_back(prompt);
    core::SamplingParams p;
    p.max_tokens = 6;
    p.ignore_eos = true;
    p.temperature = i % 2 == 0 ? 0.0f : 0.8f;
    if (i % 2 == 1) p.seed = 100 + static_cast<uint64_t>(i);
    r.params.push_back(p);
  }
  return r;
}

// What one engine answers.
std::vector<std::vector<int32_t>> plain_outputs(EngineCore& plain, const Requests& r) {
  std::vector<std::shared_ptr<OutputChannel>> channels;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    channels.push_back(std::make_shared<OutputChannel>());
    plain.submit(r.prompts[i], r.params[i], channels.back());
  }
  run_idle(plain);
  std::vector<std::vector<int32_t>> out;
  for (auto& channel : channels) out.push_back(tokens_of(*channel));
  return out;
}

// Prefills every request on `prefill` (its first tokens go to `first`, held by the caller).
std::vector<int64_t> prefill_all(EngineCore& prefill, const Requests& r, std::vector<std::shared_ptr<OutputChannel>>& first) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    first.push_back(std::make_shared<OutputChannel>());
    ids.push_back(prefill.submit_prefill(r.prompts[i], r.params[i], first.back()));
  }
  run_idle(prefill);
  return ids;
}

// Once the KV port is gone: the prefill engine frees what it still holds, and neither side keeps a block.
void expect_every_block_free(EngineCore& prefill, EngineCore& decode) {
  run_idle(prefill);
  EXPECT_EQ(prefill.stats().kv_blocks_free, prefill.stats().kv_blocks_total);
  EXPECT_EQ(decode.stats().kv_blocks_free, decode.stats().kv_blocks_total);
}

// A pull of request `id` naming the cache fingerprint `fingerprint`.
engine::KvPayload pull(const KvTransferServer& server, EngineCore& prefill, int64_t id, const std::string& fingerprint) {
  return fetch_kv("127.0.0.1", server.port(), {prefill.kv_epoch(), id}, std::chrono::seconds(5), std::chrono::minutes(1),
                  nullptr, fingerprint);
}

TEST_P(KvByReference, ImportsCopyTheSourcesBlocksAndEqualOneEngine) {
  const Requests r = requests(10, 5);
  auto plain = engine(4);
  const auto expected = plain_outputs(*plain, r);
  ReferenceRunner* prefill_runner = nullptr;
  ReferenceRunner* decode_runner = nullptr;
  auto prefill = engine(4, &prefill_runner);
  auto decode = engine(16, &decode_runner);  // another block size: tokens are addressed through both tables
  ASSERT_EQ(decode->kv_reference_fingerprint(), prefill->kv_reference_fingerprint());
  auto server = port(*prefill, std::chrono::seconds(10));
  std::vector<std::shared_ptr<OutputChannel>> first, channels;
  const std::vector<int64_t> ids = prefill_all(*prefill, r, first);
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    engine::KvPayload payload = pull(*server, *prefill, ids[i], decode->kv_reference_fingerprint());
    ASSERT_TRUE(payload.by_reference()) << "request " << i;
    EXPECT_TRUE(payload.rows.empty());
    for (const auto& chunk : payload.chunks) EXPECT_TRUE(chunk->rows.empty());
    channels.push_back(std::make_shared<OutputChannel>());
    decode->submit_imported(std::move(payload), r.params[i], channels.back());
  }
  EXPECT_EQ(prefill->kv_lease_stats().held_for_copy, static_cast<int64_t>(r.prompts.size()))
      << "the source holds every taken stream's blocks until its copy is confirmed";
  run_idle(*decode);
  for (size_t i = 0; i < r.prompts.size(); ++i) EXPECT_EQ(tokens_of(*channels[i]), expected[i]) << "request " << i;
  EXPECT_EQ(decode->stats().prompt_tokens_computed, 0);
  EXPECT_EQ(decode->stats().kv_reference_imports, static_cast<int64_t>(r.prompts.size()));
  EXPECT_EQ(decode->stats().kv_reference_unconfirmed, 0);
  EXPECT_EQ(decode_runner->rows().copies, static_cast<int>(r.prompts.size()));
  EXPECT_TRUE(wait_for([&] { return prefill->kv_lease_stats().held_for_copy == 0; }));
  EXPECT_EQ(prefill->kv_lease_stats().copies_confirmed, static_cast<int64_t>(r.prompts.size()));
  server.reset();
  expect_every_block_free(*prefill, *decode);
}

// The holds time out before the decode side copies; the prefill engine frees the blocks and runs
// other prompts in them. The copies then read other rows, and their confirmations are refused, so
// the decode side computes every prompt itself: the output is still one engine's. (Used anyway,
// the copied rows would give other tokens: the check below that they differ guards the test.)
TEST_P(KvByReference, ACopyTheSourceCannotConfirmIsNeverUsed) {
  const Requests r = requests(6, 9);
  auto plain = engine(4);
  const auto expected = plain_outputs(*plain, r);
  ReferenceRunner* prefill_runner = nullptr;
  ReferenceRunner* decode_runner = nullptr;
  auto prefill = engine(4, &prefill_runner, /*num_blocks=*/100);  // few blocks: freed ones are reused at once
  auto decode = engine(4, &decode_runner);
  prefill->set_kv_lease_timeout(std::chrono::milliseconds(100));
  auto server = port(*prefill, std::chrono::seconds(10));
  std::vector<std::shared_ptr<OutputChannel>> first, channels;
  const std::vector<int64_t> ids = prefill_all(*prefill, r, first);
  std::vector<engine::KvPayload> payloads;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    payloads.push_back(pull(*server, *prefill, ids[i], decode->kv_reference_fingerprint()));
    ASSERT_TRUE(payloads.back().by_reference());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  run_idle(*prefill);  // the holds expire and their blocks go back
  EXPECT_EQ(prefill->kv_lease_stats().held_for_copy, 0);
  const Requests others = requests(12, 10);
  plain_outputs(*prefill, others);  // other prompts' rows in the freed blocks
  // What the stale rows would decode to: copied and used without the confirmation.
  auto unguarded = engine(4);
  std::vector<std::shared_ptr<OutputChannel>> unguarded_channels;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    engine::KvPayload stale;
    stale.prompt = payloads[i].prompt;
    stale.first_token = payloads[i].first_token;
    stale.seed = payloads[i].seed;
    stale.values_per_token = payloads[i].values_per_token;
    stale.rows.resize(stale.prompt.size() * static_cast<size_t>(stale.values_per_token));
    prefill_runner->rows().gather(engine::join_kv_block_chunks(payloads[i], payloads[i].reference_block_size),
                                  static_cast<int64_t>(stale.prompt.size()), stale.rows);
    unguarded_channels.push_back(std::make_shared<OutputChannel>());
    unguarded->submit_imported(std::move(stale), r.params[i], unguarded_channels.back());
  }
  run_idle(*unguarded);
  int differ = 0;
  for (size_t i = 0; i < r.prompts.size(); ++i) differ += tokens_of(*unguarded_channels[i]) != expected[i];
  EXPECT_GT(differ, 0) << "the reused blocks must hold other rows, or this test proves nothing";

  for (size_t i = 0; i < r.prompts.size(); ++i) {
    channels.push_back(std::make_shared<OutputChannel>());
    decode->submit_imported(std::move(payloads[i]), r.params[i], channels.back());
  }
  payloads.clear();
  run_idle(*decode);
  for (size_t i = 0; i < r.prompts.size(); ++i) EXPECT_EQ(tokens_of(*channels[i]), expected[i]) << "request " << i;
  EXPECT_EQ(decode->stats().kv_reference_unconfirmed, static_cast<int64_t>(r.prompts.size()));
  EXPECT_EQ(decode->stats().kv_reference_imports, 0);
  EXPECT_GT(decode->stats().prompt_tokens_computed, 0);
  EXPECT_EQ(prefill->kv_lease_stats().copies_confirmed, 0);
  server.reset();
  expect_every_block_free(*prefill, *decode);
}

// A prefill server whose KV port freezes after the commit (here: its thread stuck for 3 s in the
// hold's release) does not hold the decode engine: the copy waits for its confirmation (at most a
// second) on the copier's thread while the engine decodes another request to its end; then the
// copy goes unconfirmed and the prompt is computed, with one engine's output. (With the copy on
// the engine's thread, the first step alone took the second.)
TEST_P(KvByReference, AFrozenSourceDoesNotHoldTheDecodeEngine) {
  const Requests r = requests(2, 13);
  auto plain = engine(4);
  const auto expected = plain_outputs(*plain, r);
  ReferenceRunner* prefill_runner = nullptr;
  ReferenceRunner* decode_runner = nullptr;
  auto prefill = engine(4, &prefill_runner);
  auto decode = engine(4, &decode_runner);
  // Its thread stuck for 3 s in the hold's release: frozen.
  auto server = port(*prefill, std::chrono::seconds(10), [] { std::this_thread::sleep_for(std::chrono::seconds(3)); });
  std::vector<std::shared_ptr<OutputChannel>> first;
  const std::vector<int64_t> ids = prefill_all(*prefill, Requests{{r.prompts[0]}, {r.params[0]}}, first);
  engine::KvPayload payload = pull(*server, *prefill, ids[0], decode->kv_reference_fingerprint());
  ASSERT_TRUE(payload.by_reference());
  auto channel = std::make_shared<OutputChannel>();
  decode->submit_imported(std::move(payload), r.params[0], channel);
  auto other = std::make_shared<OutputChannel>();
  decode->submit(r.prompts[1], r.params[1], other);
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> other_tokens;
  while (other_tokens.size() < expected[1].size() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    decode->step();
    for (int32_t t : tokens_of(*other)) other_tokens.push_back(t);
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(other_tokens, expected[1]);
  EXPECT_LT(took, 0.8) << "the other request took " << took << " s: the frozen source held the decode engine";
  EXPECT_EQ(decode->stats().kv_reference_unconfirmed, 0) << "the copy's confirmation should still be waited for";
  run_idle(*decode);
  EXPECT_EQ(tokens_of(*channel), expected[0]);
  EXPECT_EQ(decode->stats().kv_reference_unconfirmed, 1);
  server.reset();
  expect_every_block_free(*prefill, *decode);
}

// An import aborted while its copy runs: the copy's blocks go back once the copy has returned
// (never while it may still write them), and nothing is delivered.
TEST_P(KvByReference, AnImportAbortedWhileItCopiesGivesItsBlocksBackAfterTheCopy) {
  const Requests r = requests(1, 14);
  ReferenceRunner* prefill_runner = nullptr;
  ReferenceRunner* decode_runner = nullptr;
  auto prefill = engine(4, &prefill_runner);
  auto decode = engine(4, &decode_runner);
  auto server = port(*prefill, std::chrono::seconds(10), [] { std::this_thread::sleep_for(std::chrono::milliseconds(500)); });
  std::vector<std::shared_ptr<OutputChannel>> first;
  const std::vector<int64_t> ids = prefill_all(*prefill, r, first);
  engine::KvPayload payload = pull(*server, *prefill, ids[0], decode->kv_reference_fingerprint());
  ASSERT_TRUE(payload.by_reference());
  auto channel = std::make_shared<OutputChannel>();
  const int64_t id = decode->submit_imported(std::move(payload), r.params[0], channel);
  decode->step();  // the copy starts, its confirmation waits
  EXPECT_LT(decode->stats().kv_blocks_free, decode->stats().kv_blocks_total) << "the copy holds its blocks";
  decode->abort(id);
  decode->step();
  EXPECT_LT(decode->stats().kv_blocks_free, decode->stats().kv_blocks_total)
      << "an abort must not free the blocks a copy may still write";
  run_idle(*decode);
  EXPECT_EQ(decode->stats().kv_blocks_free, decode->stats().kv_blocks_total);
  std::vector<int32_t> delivered = tokens_of(*channel);
  EXPECT_TRUE(delivered.empty()) << delivered.size() << " tokens delivered for an aborted import";
  server.reset();
  expect_every_block_free(*prefill, *decode);
}

// A decode side that drops its payload (its client left) closes the connection unconfirmed: the
// source unpins the blocks at once, not at the hold's timeout.
TEST_P(KvByReference, ADroppedPayloadGivesTheBlocksBack) {
  const Requests r = requests(3, 11);
  ReferenceRunner* prefill_runner = nullptr;
  auto prefill = engine(4, &prefill_runner);
  auto server = port(*prefill, std::chrono::minutes(5));
  std::vector<std::shared_ptr<OutputChannel>> first;
  const std::vector<int64_t> ids = prefill_all(*prefill, r, first);
  for (int64_t id : ids) {
    engine::KvPayload payload = pull(*server, *prefill, id, prefill->kv_reference_fingerprint());
    ASSERT_TRUE(payload.by_reference());
  }
  EXPECT_TRUE(wait_for([&] { return prefill->kv_lease_stats().held_for_copy == 0; }));
  EXPECT_EQ(prefill->kv_lease_stats().copies_confirmed, 0);
  run_idle(*prefill);
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
  server.reset();
}

// A pull from a cache of another fingerprint (another GPU, or no GPU) is answered with rows.
TEST_P(KvByReference, AnotherFingerprintGetsRows) {
  const Requests r = requests(2, 12);
  ReferenceRunner* prefill_runner = nullptr;
  auto prefill = engine(4, &prefill_runner);
  auto server = port(*prefill, std::chrono::seconds(10));
  std::vector<std::shared_ptr<OutputChannel>> first;
  const std::vector<int64_t> ids = prefill_all(*prefill, r, first);
  engine::KvPayload payload = pull(*server, *prefill, ids[0], "another cache");
  EXPECT_FALSE(payload.by_reference());
  ASSERT_FALSE(payload.chunks.empty());
  EXPECT_FALSE(payload.chunks[0]->rows.empty());
  EXPECT_EQ(prefill->kv_lease_stats().held_for_copy, 0);
  server.reset();
  prefill->release_kv({prefill->kv_epoch(), ids[1]});
  run_idle(*prefill);
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
}

INSTANTIATE_TEST_SUITE_P(Transports, KvByReference, ::testing::ValuesIn(transports()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(KvByReferenceCodec, BlockChunksRoundTripAndJoinInOrder) {
  const engine::KvChunk chunk{.begin = 8, .num_tokens = 5, .rows = {}, .blocks = {3, 9}};
  const std::string body = encode_kv_block_chunk(chunk);
  EXPECT_EQ(decode_kv_block_chunk(body).blocks, chunk.blocks);
  EXPECT_THROW(decode_kv_block_chunk(body.substr(0, body.size() - 2)), engine::KvTransferError);
  EXPECT_THROW(decode_kv_block_chunk(body + "xxxx"), engine::KvTransferError);
  engine::KvPayload payload;
  payload.prompt = std::vector<int32_t>(13, 1);
  payload.chunks.push_back(std::make_shared<const engine::KvChunk>(engine::KvChunk{0, 8, {}, {5, 6}}));
  payload.chunks.push_back(std::make_shared<const engine::KvChunk>(chunk));
  EXPECT_EQ(engine::join_kv_block_chunks(payload, 4), (std::vector<int32_t>{5, 6, 3, 9}));
  EXPECT_THROW(engine::join_kv_block_chunks(payload, 8), engine::KvTransferError);  // 2 blocks of 8 for 8 tokens
  payload.chunks.erase(payload.chunks.begin());
  EXPECT_THROW(engine::join_kv_block_chunks(payload, 4), engine::KvTransferError);  // a gap
}

}  // namespace
}  // namespace tachyon::server
