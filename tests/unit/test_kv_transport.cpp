// The TCP transport of prefill/decode disaggregation (server/pd_transport.h) between a prefill
// engine and a decode engine in one process: intact transfers import, and a truncated frame, a
// corrupted body or a stalled sender mid-stream makes the decode side recompute the prompt;
// either way every output equals one engine's, and every KV block is free on both sides
// afterwards. A pull started while a chunked prefill runs receives rows before the prompt has
// finished, and imports them. The server answers several pulls at once (all in flight together,
// the same bytes as one by one) and refuses pulls past its bound.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <random>
#include <xxhash.h>

#include "tachyon/engine/engine_core.h"
#include "tachyon/model/make_model.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/server/pd_transport.h"
#include "kv_transfer_test_util.h"

namespace tachyon::server {
namespace {

using engine::EngineCore;
using engine::KvTransferError;
using engine::OutputChannel;
using kv_test::run_idle;
using kv_test::tokens_of;
using kv_test::wait_for;

// Engines over one tiny model, made once per suite.
class KvTransportEngines : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("tachyon-kv-transport-" + std::to_string(::getpid())));
    model::make_model({.arch = "qwen3", .preset = "tiny", .seed = 6, .out_dir = *dir_});
    model_ = new model::DenseModel(model::DenseModel::load(*dir_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete model_;
    delete dir_;
  }
  static std::unique_ptr<EngineCore> engine(int32_t block_size, int64_t max_num_batched_tokens = 2048) {
    core::EngineConfig c;
    c.scheduler.max_model_len = 256;
    c.scheduler.max_num_batched_tokens = max_num_batched_tokens;
    c.num_blocks = 512;
    c.block_size = block_size;
    return std::make_unique<EngineCore>(c, std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, block_size));
  }
  static std::filesystem::path* dir_;
  static model::DenseModel* model_;
};
std::filesystem::path* KvTransportEngines::dir_ = nullptr;
model::DenseModel* KvTransportEngines::model_ = nullptr;

class KvTransportTest : public KvTransportEngines, public ::testing::WithParamInterface<KvTransportFault> {};

TEST_P(KvTransportTest, FaultsRecomputeAndOutputsStayIdentical) {
  std::mt19937 rng(77);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<core::SamplingParams> params;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 50);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 512);
    prompts.push_back(prompt);
    core::SamplingParams p;
    p.max_tokens = 6;
    p.ignore_eos = true;
    p.temperature = i % 2 == 0 ? 0.0f : 0.8f;
    if (i % 2 == 1) p.seed = 40 + static_cast<uint64_t>(i);
    params.push_back(p);
  }
  auto plain = engine(4);
  std::vector<std::shared_ptr<OutputChannel>> plain_channels;
  for (size_t i = 0; i < prompts.size(); ++i) {
    plain_channels.push_back(std::make_shared<OutputChannel>());
    plain->submit(prompts[i], params[i], plain_channels.back());
  }
  run_idle(*plain);

  auto prefill = engine(4);
  auto decode = engine(16);
  // A stalled sender answers its queued pulls one by one long after the decode side gave up; the
  // leases it has not reached yet come back by their timeout.
  const bool stall = GetParam() == KvTransportFault::kStall;
  if (stall) prefill->set_kv_lease_timeout(std::chrono::milliseconds(500));
  auto server = std::make_unique<KvTransferServer>(
      "127.0.0.1", 0,
      [&](engine::KvLeaseKey key, size_t from, bool claim) { return prefill->read_kv_stream(key, from, claim); },
      [&](engine::KvLeaseKey key) { prefill->release_kv(key); }, std::chrono::milliseconds(300));
  server->inject_fault(GetParam());
  std::vector<int64_t> ids;
  std::vector<std::shared_ptr<OutputChannel>> first;  // a channel that goes away aborts its request
  for (size_t i = 0; i < prompts.size(); ++i) {
    first.push_back(std::make_shared<OutputChannel>());
    ids.push_back(prefill->submit_prefill(prompts[i], params[i], first.back()));
  }
  run_idle(*prefill);
  int recomputed = 0;
  std::vector<std::shared_ptr<OutputChannel>> channels;
  for (size_t i = 0; i < prompts.size(); ++i) {
    channels.push_back(std::make_shared<OutputChannel>());
    try {
      engine::KvPayload payload = fetch_kv("127.0.0.1", server->port(), {prefill->kv_epoch(), ids[i]},
                                           std::chrono::milliseconds(100));
      decode->submit_imported(std::move(payload), params[i], channels.back());
    } catch (const KvTransferError&) {
      ++recomputed;
      decode->submit(prompts[i], params[i], channels.back());
    }
  }
  run_idle(*decode);
  server.reset();
  if (stall) std::this_thread::sleep_for(std::chrono::milliseconds(600));
  run_idle(*prefill);
  EXPECT_EQ(recomputed, GetParam() == KvTransportFault::kNone ? 0 : static_cast<int>(prompts.size()));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(tokens_of(*channels[i]), tokens_of(*plain_channels[i])) << "prompt " << i;
  }
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
  EXPECT_EQ(decode->stats().kv_blocks_free, decode->stats().kv_blocks_total);
}

std::string fault_name(const ::testing::TestParamInfo<KvTransportFault>& info) {
  static const char* const kNames[] = {"None", "Truncate", "Corrupt", "Stall"};
  return kNames[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Faults, KvTransportTest,
                         ::testing::Values(KvTransportFault::kNone, KvTransportFault::kTruncate,
                                           KvTransportFault::kCorrupt, KvTransportFault::kStall),
                         fault_name);

// A 60-token prompt in steps of 8 tokens: the pull, started after the first step, is handed rows
// while the prompt still runs (the test steps the prefill engine itself, so this is not a race:
// the engine waits until the transport has handed out the first chunk), then the rest and the
// commit; the decode engine imports them and answers as one engine does.
TEST_F(KvTransportEngines, RowsLeaveBeforeThePromptFinishes) {
  std::vector<int32_t> prompt(60);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % 512);
  core::SamplingParams params;
  params.max_tokens = 6;
  params.ignore_eos = true;
  auto plain = engine(4);
  auto plain_channel = std::make_shared<OutputChannel>();
  plain->submit(prompt, params, plain_channel);
  run_idle(*plain);

  auto prefill = engine(4, /*max_num_batched_tokens=*/8);
  auto decode = engine(16);
  KvTransferServer server(
      "127.0.0.1", 0,
      [&](engine::KvLeaseKey key, size_t from, bool claim) { return prefill->read_kv_stream(key, from, claim); },
      [&](engine::KvLeaseKey key) { prefill->release_kv(key); });
  prefill->set_kv_stream_listener([&server] { server.wake(); });
  auto first = std::make_shared<OutputChannel>();
  const int64_t id = prefill->submit_prefill(prompt, params, first);
  prefill->step();  // the first 8 tokens: two full blocks staged
  std::optional<engine::KvPayload> payload;
  std::string failure;
  std::thread puller([&] {
    try {
      payload = fetch_kv("127.0.0.1", server.port(), {prefill->kv_epoch(), id}, std::chrono::seconds(10));
    } catch (const KvTransferError& e) {
      failure = e.what();
    }
  });
  // Bounded only so that a transport that never hands out early rows fails instead of hanging.
  wait_for([&] { return prefill->kv_lease_stats().early_tokens > 0; });
  run_idle(*prefill);
  puller.join();
  prefill->set_kv_stream_listener(nullptr);
  ASSERT_TRUE(payload.has_value()) << failure;
  EXPECT_GE(prefill->kv_lease_stats().early_tokens, 8) << "rows handed to the pull before the prompt finished";
  EXPECT_GT(payload->chunks.size(), 1u);
  auto channel = std::make_shared<OutputChannel>();
  decode->submit_imported(std::move(*payload), params, channel);
  run_idle(*decode);
  run_idle(*prefill);
  EXPECT_EQ(tokens_of(*channel), tokens_of(*plain_channel));
  EXPECT_EQ(decode->stats().prompt_tokens_computed, 0);
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
  EXPECT_EQ(decode->stats().kv_blocks_free, decode->stats().kv_blocks_total);
}

TEST(KvTransportCodec, RejectsBodiesWhoseLengthsDisagree) {
  engine::KvChunk chunk{.begin = 4, .num_tokens = 3, .rows = {1, 2, 3, 4, 5, 6}};
  const std::string body = encode_kv_chunk(chunk, 2);
  int64_t width = 0;
  EXPECT_EQ(decode_kv_chunk(body, width).rows, chunk.rows);
  EXPECT_EQ(width, 2);
  EXPECT_THROW(decode_kv_chunk(body.substr(0, body.size() - 4), width), KvTransferError);
  EXPECT_THROW(decode_kv_chunk(body + "xxxx", width), KvTransferError);
  EXPECT_THROW(decode_kv_chunk(std::string(6, '\0'), width), KvTransferError);
  engine::KvCommit commit{
      .prompt = {1, 2, 3}, .first_token = 4, .seed = 5, .cached_tokens = 2, .values_per_token = 2, .num_chunks = 1};
  const std::string committed = encode_kv_commit(commit, 99);
  uint64_t sums = 0;
  const engine::KvCommit decoded = decode_kv_commit(committed, sums);
  EXPECT_EQ(decoded.prompt, commit.prompt);
  EXPECT_EQ(decoded.first_token, 4);
  EXPECT_EQ(decoded.seed, 5u);
  EXPECT_EQ(decoded.cached_tokens, 2);
  EXPECT_EQ(decoded.values_per_token, 2);
  EXPECT_EQ(sums, 99u);
  EXPECT_THROW(decode_kv_commit(committed.substr(0, committed.size() - 4), sums), KvTransferError);
  EXPECT_THROW(decode_kv_commit(committed + "xxxx", sums), KvTransferError);
  // More cached tokens than the prompt has (or fewer than none) is no commit this server wrote.
  for (const int64_t cached : {int64_t{4}, int64_t{-1}}) {
    engine::KvCommit bad = commit;
    bad.cached_tokens = cached;
    EXPECT_THROW(decode_kv_commit(encode_kv_commit(bad, 99), sums), KvTransferError) << cached;
  }
}

// Joined chunks are the rows of one gather: [plane][token][width] over the whole prompt.
TEST(KvTransportCodec, ChunksJoinPlaneByPlane) {
  engine::KvPayload payload;
  payload.prompt = {1, 2, 3};
  payload.values_per_token = 3;  // planes of widths 1 and 2
  payload.chunks.push_back(std::make_shared<const engine::KvChunk>(engine::KvChunk{0, 2, {10, 11, 20, 21, 22, 23}}));
  payload.chunks.push_back(std::make_shared<const engine::KvChunk>(engine::KvChunk{2, 1, {12, 24, 25}}));
  engine::KvPayload joined = payload;
  engine::join_kv_chunks(joined, {1, 2});
  EXPECT_EQ(joined.rows, (std::vector<float>{10, 11, 12, 20, 21, 22, 23, 24, 25}));
  engine::KvPayload gap = payload;
  gap.chunks.erase(gap.chunks.begin());
  EXPECT_THROW(engine::join_kv_chunks(gap, {1, 2}), KvTransferError);
  EXPECT_THROW(engine::join_kv_chunks(payload, {2, 2}), KvTransferError);
}

TEST(KvTransportCodec, UnreachablePrefillServerIsATransferError) {
  KvTransferServer server("127.0.0.1", 0, [](engine::KvLeaseKey, size_t, bool) -> engine::KvStreamRead {
    throw KvTransferError("no such lease");
  }, [](engine::KvLeaseKey) {});
  EXPECT_THROW(fetch_kv("127.0.0.1", server.port(), {1, 2}, std::chrono::milliseconds(500)), KvTransferError);
  EXPECT_THROW(fetch_kv("127.0.0.1", 1, {1, 2}, std::chrono::milliseconds(200)), KvTransferError);
}

// A pull sent by hand on a socket with a bounded receive buffer that the test drains only when it wants:
// the server cannot finish a large frame before then.
int open_pull(int port, engine::KvLeaseKey key) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int small = 256 * 1024;  // doubled by the kernel: far below a 16 MiB frame plus the sender's 4 MiB
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  const timeval patience{30, 0};  // a read that never completes fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const uint32_t head[2] = {0x31564b54, 1};  // "TKV1", fetch
  char request[24];
  std::memcpy(request, head, 8);
  std::memcpy(request + 8, &key.epoch, 8);
  std::memcpy(request + 16, &key.request_id, 8);
  EXPECT_EQ(::send(fd, request, sizeof(request), 0), 24);
  return fd;
}

bool read_exact(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads one frame: {status, body}; status -1 when it was cut short or its checksum is wrong.
// `head`: its first 16 bytes when the caller has read them already.
std::pair<int, std::string> read_frame(int fd, const std::string& head_read = "") {
  char head[16];
  if (head_read.size() == sizeof(head)) {
    std::memcpy(head, head_read.data(), sizeof(head));
  } else if (!read_exact(fd, head, sizeof(head))) {
    return {-1, ""};
  }
  uint32_t status = 0;
  uint64_t length = 0, checksum = 0;
  std::memcpy(&status, head + 4, 4);
  std::memcpy(&length, head + 8, 8);
  std::string body(length, '\0');
  if (!read_exact(fd, body.data(), length) || !read_exact(fd, reinterpret_cast<char*>(&checksum), 8) ||
      checksum != XXH3_64bits(body.data(), body.size())) {
    return {-1, ""};
  }
  return {static_cast<int>(status), body};
}

// 16 MiB of rows per lease in one chunk, different for each request id, then the commit; served
// as often as asked.
std::vector<float> large_rows(engine::KvLeaseKey key) {
  std::vector<float> rows(64 * 65536);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>((i * 31 + key.request_id) % 1009);
  return rows;
}

engine::KvStreamRead large_stream(engine::KvLeaseKey key, size_t from, bool) {
  engine::KvStreamRead read;
  if (from == 0) read.chunks.push_back(std::make_shared<const engine::KvChunk>(engine::KvChunk{0, 64, large_rows(key)}));
  read.commit = engine::KvCommit{.prompt = std::vector<int32_t>(64, static_cast<int32_t>(key.request_id)),
                                 .first_token = 7, .seed = 11, .values_per_token = 65536, .num_chunks = 1};
  return read;
}

TEST(KvTransferServerPulls, AnswersSeveralPullsAtOnceWithTheBytesOfOneByOne) {
  constexpr int kPulls = 4;
  KvTransferServer server("127.0.0.1", 0, large_stream, [](engine::KvLeaseKey) {}, std::chrono::seconds(60));
  std::vector<int> fds;
  for (int i = 0; i < kPulls; ++i) fds.push_back(open_pull(server.port(), {1, i}));
  // None is drained yet, so none can finish: a server that answers one at a time shows 1 here,
  // and sends no other pull's head until the first is read whole.
  EXPECT_TRUE(wait_for([&] { return server.pull_stats().in_flight == kPulls; }))
      << "pulls in flight: " << server.pull_stats().in_flight;
  std::vector<std::string> heads(kPulls, std::string(16, '\0'));
  for (int i = 0; i < kPulls; ++i) {
    ASSERT_TRUE(read_exact(fds[i], heads[static_cast<size_t>(i)].data(), 16)) << "no head for pull " << i;
  }
  std::vector<std::pair<int, std::string>> frames(kPulls);
  std::vector<std::thread> readers;
  for (int i = 0; i < kPulls; ++i) {
    readers.emplace_back([&, i] { frames[static_cast<size_t>(i)] = read_frame(fds[i], heads[static_cast<size_t>(i)]); });
  }
  for (auto& reader : readers) reader.join();
  for (int fd : fds) ::close(fd);
  EXPECT_TRUE(wait_for([&] { return server.pull_stats().in_flight == 0; }));
  EXPECT_EQ(server.pull_stats().peak_in_flight, kPulls);
  for (int i = 0; i < kPulls; ++i) {
    ASSERT_EQ(frames[static_cast<size_t>(i)].first, 2) << "pull " << i << ": a chunk first";
    const engine::KvPayload serial = fetch_kv("127.0.0.1", server.port(), {1, i}, std::chrono::seconds(30));
    ASSERT_EQ(serial.chunks.size(), 1u);
    EXPECT_EQ(frames[static_cast<size_t>(i)].second, encode_kv_chunk(*serial.chunks[0], 65536)) << "pull " << i;
    EXPECT_EQ(serial.chunks[0]->rows, large_rows({1, i}));
  }
}

TEST(KvTransferServerPulls, RefusesAPullPastItsBound) {
  KvTransferServer server("127.0.0.1", 0, large_stream, [](engine::KvLeaseKey) {}, std::chrono::seconds(60),
                          nullptr, /*max_pulls=*/2);
  const int a = open_pull(server.port(), {1, 1});
  const int b = open_pull(server.port(), {1, 2});
  ASSERT_TRUE(wait_for([&] { return server.pull_stats().in_flight == 2; }));
  EXPECT_THROW(fetch_kv("127.0.0.1", server.port(), {1, 3}, std::chrono::seconds(10)), KvTransferError);
  EXPECT_EQ(server.pull_stats().refused, 1);
  EXPECT_EQ(read_frame(a).first, 2);
  EXPECT_EQ(read_frame(b).first, 2);
  ::close(a);
  ::close(b);
  EXPECT_TRUE(wait_for([&] { return server.pull_stats().in_flight == 0; }));
  EXPECT_EQ(fetch_kv("127.0.0.1", server.port(), {1, 3}, std::chrono::seconds(30)).chunks.at(0)->rows, large_rows({1, 3}));
}

}  // namespace
}  // namespace tachyon::server
