// A model named by its hub id resolves from a Hugging Face cache laid out by this test (a tiny
// model from make-model under models--Org--Name/snapshots/<revision>, refs/main naming it):
// HF_HUB_CACHE first, then HF_HOME/hub; `tachyon generate Org/Name` runs from it; an id not in
// the cache fails naming the paths looked in. ctest -R hub_cache
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../cli_run.h"
#include "tachyon/base/check.h"
#include "tachyon/cli/hub_cache.h"

namespace tachyon::cli::hub_cache_test {
namespace fs = std::filesystem;
using tachyon::testing::run_cli;

// The cache root of a fake hub holding models--Org--Tiny at revision "0123abcd".
class HubCache : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() / ("tachyon-hub-" + std::to_string(::getpid())));
    const fs::path repo = *root_ / "home" / "hub" / "models--Org--Tiny";
    fs::create_directories(repo / "refs");
    std::ofstream(repo / "refs" / "main") << "0123abcd";
    const auto made = run_cli("make-model --arch qwen3 --preset tiny --seed 3 --tokenizer " + std::string(TACHYON_TOKENIZERS) +
                              "/qwen3 --out " + (repo / "snapshots" / "0123abcd").string());
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }
  void SetUp() override {
    ::unsetenv("HF_HUB_CACHE");
    ::setenv("HF_HOME", (*root_ / "home").c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("HF_HUB_CACHE");
    ::unsetenv("HF_HOME");
  }
  static fs::path* root_;
};
fs::path* HubCache::root_ = nullptr;

TEST_F(HubCache, HubIdResolvesToTheSnapshotRefsMainNames) {
  const ResolvedModel model = resolve_model("Org/Tiny");
  EXPECT_EQ(model.dir, *root_ / "home" / "hub" / "models--Org--Tiny" / "snapshots" / "0123abcd");
  EXPECT_EQ(model.hub_id, "Org/Tiny");
  // HF_HUB_CACHE wins over HF_HOME.
  ::setenv("HF_HUB_CACHE", (*root_ / "elsewhere").c_str(), 1);
  EXPECT_EQ(hub_cache_dir(), *root_ / "elsewhere");
  EXPECT_THROW(resolve_model("Org/Tiny"), Error);
  ::setenv("HF_HUB_CACHE", (*root_ / "home" / "hub").c_str(), 1);
  EXPECT_EQ(resolve_model("Org/Tiny").dir, model.dir);
  // A directory is a directory, hub-like name or not.
  EXPECT_EQ(resolve_model(model.dir.string()).hub_id, "");
}

TEST_F(HubCache, MissingModelNamesThePathsLookedIn) {
  try {
    resolve_model("Org/Missing");
    ADD_FAILURE() << "resolved a model that is not there";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find((*root_ / "home" / "hub" / "models--Org--Missing" / "refs" / "main").string()), std::string::npos)
        << message;
    EXPECT_NE(message.find("HF_HUB_CACHE"), std::string::npos) << message;
  }
  EXPECT_THROW(resolve_model("not a model"), Error);
}

TEST_F(HubCache, GenerateRunsFromTheCache) {
  const auto ok = run_cli("generate Org/Tiny --prompt hello --max-tokens 2");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  const auto missing = run_cli("generate Org/Missing --prompt hello --max-tokens 2");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("models--Org--Missing"), std::string::npos) << missing.output;
}

}  // namespace tachyon::cli::hub_cache_test
