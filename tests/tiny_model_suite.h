// A test suite over one tiny random-weight Qwen3 model: written to a temporary directory and
// loaded as the CPU reference once per suite (make-model is deterministic in its seed), removed
// afterwards. Shared by the engine tests that drive the CPU runner.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"

namespace tachyon::testing {

template <uint64_t Seed>
class TinyModelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("tachyon-tiny-" + std::to_string(Seed) + "-" + std::to_string(::getpid())));
    model::make_model({.arch = "qwen3", .preset = "tiny", .seed = Seed, .out_dir = *dir_});
    model_ = new model::DenseModel(model::DenseModel::load(*dir_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete model_;
    delete dir_;
  }

  static inline std::filesystem::path* dir_ = nullptr;
  static inline model::DenseModel* model_ = nullptr;
};

}  // namespace tachyon::testing
