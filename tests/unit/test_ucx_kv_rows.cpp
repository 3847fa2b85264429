// KV by reference through UCX (runner/ucx/ucx_kv_rows.h): a cache reads another cache's rows with
// one-sided GETs, through both block tables, and gets them bit for bit (values with NaN payloads
// included) for block sizes that do not divide each other; a descriptor of another layout, or
// source blocks outside the source, are refused before anything is read; a source process that
// died fails the read within its deadline. Each reader and source has its own UCX context, as two
// servers would; here UCX runs over what the machine has (shared memory, TCP on loopback).
// Without UCX in the build, `--kv-transport ucx` is refused by name.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "tachyon/model/make_model.h"
#include "tachyon/model/model_config.h"
#include "tachyon/runner/kv_export.h"
#include "tachyon/app/kv_transport.h"
#include "tachyon/runner/cpu_model_runner.h"
#ifdef TACHYON_HAVE_UCX
#include "tachyon/runner/ucx/ucx_kv_rows.h"
#endif

namespace tachyon::runner {
namespace {

using app::ucx_available;
using app::with_kv_transport;

#ifdef TACHYON_HAVE_UCX

// A tiny model's config: dense attention (K and V planes) or DSA (latent and index-key planes).
model::ModelConfig config_of(const std::string& arch) {
  return model::make_model_config({.arch = arch, .preset = arch == "deepseek_v32" ? "tiny-dsa" : "tiny"});
}

// Every plane of `cache` filled with random bits (NaN payloads and denormals among them).
void fill_random(PagedKvCache& cache, uint32_t seed) {
  std::mt19937 rng(seed);
  PagedKvRowAccess rows(cache);
  for (const KvRowAccess::HostPlane& plane : rows.host_layout().planes) {
    for (int64_t i = 0; i < plane.slots * plane.width; ++i) {
      const uint32_t bits = rng();
      std::memcpy(&plane.data[i], &bits, sizeof(bits));
    }
  }
}

std::vector<int32_t> shuffled_blocks(int32_t num_blocks, size_t count, uint32_t seed) {
  std::vector<int32_t> blocks(static_cast<size_t>(num_blocks));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(seed));
  blocks.resize(count);
  return blocks;
}

std::vector<uint32_t> gathered_bits(KvRowAccess& rows, const std::vector<int32_t>& table, int64_t tokens) {
  std::vector<float> out(static_cast<size_t>(tokens * rows.values_per_token()));
  rows.gather(table, tokens, out);
  std::vector<uint32_t> bits(out.size());
  std::memcpy(bits.data(), out.data(), out.size() * sizeof(float));
  return bits;
}

struct Case {
  std::string arch;
  int32_t source_block_size;
  int32_t block_size;
  int64_t tokens;
};

class UcxKvRows : public ::testing::TestWithParam<Case> {};

TEST_P(UcxKvRows, ReadsTheSourcesRowsBitForBit) {
  const Case c = GetParam();
  const model::ModelConfig config = config_of(c.arch);
  PagedKvCache source_cache(config, 64, c.source_block_size);
  PagedKvCache cache(config, 64, c.block_size);
  fill_random(source_cache, 1);
  fill_random(cache, 2);
  PagedKvRowAccess source_rows(source_cache), rows(cache);
  ucx::UcxKvRowAccess source(source_rows), reader(rows);
  ASSERT_EQ(source.reference_fingerprint(), reader.reference_fingerprint());
  const auto source_table = shuffled_blocks(64, static_cast<size_t>((c.tokens + c.source_block_size - 1) / c.source_block_size), 7);
  const auto table = shuffled_blocks(64, static_cast<size_t>((c.tokens + c.block_size - 1) / c.block_size), 8);
  ASSERT_NE(gathered_bits(reader, table, c.tokens), gathered_bits(source, source_table, c.tokens));
  const int64_t bytes =
      reader.copy_by_reference(source.reference_descriptor(), c.source_block_size, source_table, table, c.tokens);
  EXPECT_EQ(bytes, c.tokens * reader.values_per_token() * static_cast<int64_t>(sizeof(float)));
  EXPECT_EQ(gathered_bits(reader, table, c.tokens), gathered_bits(source, source_table, c.tokens));
  // A second read reuses the connection, from other blocks.
  const auto other_table = shuffled_blocks(64, source_table.size(), 9);
  reader.copy_by_reference(source.reference_descriptor(), c.source_block_size, other_table, table, c.tokens);
  EXPECT_EQ(gathered_bits(reader, table, c.tokens), gathered_bits(source, other_table, c.tokens));
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, UcxKvRows,
                         ::testing::Values(Case{"qwen3", 16, 16, 97}, Case{"qwen3", 4, 16, 17}, Case{"qwen3", 16, 4, 1},
                                           Case{"qwen3", 5, 3, 97}, Case{"deepseek_v32", 3, 8, 61}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return c.arch + "_blocks_" + std::to_string(c.source_block_size) + "_to_" +
                                  std::to_string(c.block_size) + "_tokens_" + std::to_string(c.tokens);
                         });

TEST(UcxKvRowsRefusals, AnotherLayoutOrBlocksOutsideTheSourceAreRefusedBeforeReading) {
  const model::ModelConfig dense = config_of("qwen3");
  const model::ModelConfig latent = config_of("deepseek_v32");
  PagedKvCache dense_cache(dense, 8, 4), latent_cache(latent, 8, 4), cache(dense, 8, 4);
  PagedKvRowAccess dense_rows(dense_cache), latent_rows(latent_cache), rows(cache);
  ucx::UcxKvRowAccess dense_source(dense_rows), latent_source(latent_rows), reader(rows);
  const std::vector<int32_t> table = {0, 1};
  EXPECT_THROW(reader.copy_by_reference(latent_source.reference_descriptor(), 4, table, table, 8), Error);
  const std::vector<int32_t> outside = {0, 8};
  EXPECT_THROW(reader.copy_by_reference(dense_source.reference_descriptor(), 4, outside, table, 8), Error);
  EXPECT_THROW(reader.copy_by_reference(dense_source.reference_descriptor(), 4, table, outside, 8), Error);
  std::string cut = dense_source.reference_descriptor();
  cut.resize(cut.size() - 3);
  EXPECT_THROW(reader.copy_by_reference(cut, 4, table, table, 8), Error);
  EXPECT_THROW(reader.copy_by_reference("not a descriptor", 4, table, table, 8), Error);
  reader.copy_by_reference(dense_source.reference_descriptor(), 4, table, table, 8);  // and the right one reads
}

// A source in another process that dies after lending its descriptor: the read fails (Error, so
// the decode engine computes the prompt) within a few seconds, and a later read of a live
// source still works.
TEST(UcxKvRowsRefusals, ASourceThatDiedFailsTheRead) {
  const model::ModelConfig config = config_of("qwen3");
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the source: lends its descriptor, then waits to be killed
    try {
      ::close(pipe_fds[0]);
      PagedKvCache source_cache(config, 8, 4);
      PagedKvRowAccess source_rows(source_cache);
      ucx::UcxKvRowAccess source(source_rows);
      const std::string descriptor = source.reference_descriptor();
      const uint64_t size = descriptor.size();
      if (::write(pipe_fds[1], &size, sizeof(size)) == sizeof(size) &&
          ::write(pipe_fds[1], descriptor.data(), size) == static_cast<ssize_t>(size)) {
        for (;;) ::pause();
      }
    } catch (...) {
    }
    ::_exit(1);  // never back into the test runner
  }
  // Killed and reaped however the test ends (a failed check must not leave it running).
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid <= 0) return;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{child};
  ::close(pipe_fds[1]);
  uint64_t size = 0;
  ASSERT_EQ(::read(pipe_fds[0], &size, sizeof(size)), static_cast<ssize_t>(sizeof(size)));
  std::string descriptor(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(pipe_fds[0], descriptor.data() + got, size - got);
    ASSERT_GT(n, 0);
    got += static_cast<size_t>(n);
  }
  ::close(pipe_fds[0]);
  PagedKvCache cache(config, 8, 4);
  PagedKvRowAccess rows(cache);
  ucx::UcxKvRowAccess reader(rows);
  const std::vector<int32_t> table = {0, 1};
  reader.copy_by_reference(descriptor, 4, table, table, 8);  // alive: reads
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  reaper.pid = 0;  // reaped
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(reader.copy_by_reference(descriptor, 4, table, table, 8), Error);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 5.0) << "a dead source held the read for " << waited << " s";
  PagedKvCache live_cache(config, 8, 4);
  PagedKvRowAccess live_rows(live_cache);
  ucx::UcxKvRowAccess live(live_rows);
  reader.copy_by_reference(live.reference_descriptor(), 4, table, table, 8);
}

#endif  // TACHYON_HAVE_UCX

// `--kv-transport tcp` offers no reference (every pull gets rows); ucx needs a host cache and
// a build with UCX, and says so.
TEST(KvTransportChoice, TcpOffersNoReferenceAndUcxNamesWhatItNeeds) {
  const auto dir = std::filesystem::temp_directory_path() / ("tachyon-kv-transport-" + std::to_string(::getpid()));
  model::make_model({.arch = "qwen3", .preset = "tiny", .seed = 3, .out_dir = dir});
  const model::DenseModel model = model::DenseModel::load(dir);
  std::filesystem::remove_all(dir);
  auto tcp = with_kv_transport(std::make_unique<CpuModelRunner>(model, 8, 4), "tcp");
  ASSERT_NE(tcp->kv_rows(), nullptr);
  EXPECT_EQ(tcp->kv_rows()->reference_fingerprint(), "");
  auto automatic = with_kv_transport(std::make_unique<CpuModelRunner>(model, 8, 4), "auto");
  EXPECT_EQ(automatic->kv_rows()->reference_fingerprint(), "");  // the CPU cache: no CUDA IPC
  EXPECT_THROW(with_kv_transport(std::make_unique<CpuModelRunner>(model, 8, 4), "rdma"), Error);
  if (ucx_available()) {
    auto ucx = with_kv_transport(std::make_unique<CpuModelRunner>(model, 8, 4), "ucx");
    EXPECT_EQ(ucx->kv_rows()->reference_fingerprint().rfind("ucx f32", 0), 0u);
  } else {
    try {
      with_kv_transport(std::make_unique<CpuModelRunner>(model, 8, 4), "ucx");
      ADD_FAILURE() << "ucx without UCX in the build should be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("libucx-dev"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tachyon::runner
