// safetensors reading and writing, and the checkpoint errors a user must be able to act on:
// each names the file and, where there is one, the tensor.
#include "tachyon/model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tachyon-st-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static TensorSource f32_tensor(std::vector<int64_t> shape, float start) {
    TensorSource t;
    t.dtype = DType::kF32;
    t.shape = std::move(shape);
    t.fill = [start, n = t.nbytes() / 4](std::byte* out) {
      for (size_t i = 0; i < n; ++i) {
        float v = start + static_cast<float>(i);
        std::memcpy(out + 4 * i, &v, 4);
      }
    };
    return t;
  }

  // A file with a hand-written header, for malformed-input cases.
  std::filesystem::path raw_file(const std::string& header, size_t data_bytes) {
    std::string bytes(8, '\0');
    uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    bytes += header;
    bytes.append(data_bytes, '\0');
    auto path = dir_ / "model.safetensors";
    write_file(path, bytes);
    return path;
  }

  std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
};

TEST_F(SafetensorsTest, WriteThenReadRoundTrips) {
  std::map<std::string, TensorSource> tensors;
  tensors.emplace("a.weight", f32_tensor({2, 3}, 0.0f));
  tensors.emplace("b.bias", f32_tensor({3}, 10.0f));
  write_safetensors(dir_ / "model.safetensors", tensors);
  SafetensorsCheckpoint checkpoint(dir_);
  ASSERT_EQ(checkpoint.tensors().size(), 2u);
  const TensorView& a = checkpoint.at("a.weight");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.dtype, DType::kF32);
  float values[6];
  std::memcpy(values, a.data, sizeof(values));
  EXPECT_EQ(values[5], 5.0f);
  float bias0;
  std::memcpy(&bias0, checkpoint.at("b.bias").data, 4);
  EXPECT_EQ(bias0, 10.0f);
}

TEST_F(SafetensorsTest, ShardedMatchesSingle) {
  std::map<std::string, TensorSource> tensors;
  for (int i = 0; i < 5; ++i) tensors.emplace("t" + std::to_string(i), f32_tensor({16}, static_cast<float>(i)));
  write_safetensors_sharded(dir_, tensors, 100);  // 64 bytes each: one tensor per shard
  EXPECT_TRUE(std::filesystem::exists(dir_ / "model-00005-of-00005.safetensors"));
  SafetensorsCheckpoint checkpoint(dir_);
  ASSERT_EQ(checkpoint.tensors().size(), 5u);
  float v;
  std::memcpy(&v, checkpoint.at("t3").data, 4);
  EXPECT_EQ(v, 3.0f);
}

TEST_F(SafetensorsTest, TruncatedFileNamesTensor) {
  raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  std::string e = error_of([&] { SafetensorsCheckpoint c(dir_); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("'w'"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, TruncatedHeader) {
  std::string bytes(8, '\0');
  uint64_t n = 1000;
  std::memcpy(bytes.data(), &n, 8);
  write_file(dir_ / "model.safetensors", bytes + "{}");
  EXPECT_NE(error_of([&] { SafetensorsCheckpoint c(dir_); }).find("truncated"), std::string::npos);
  write_file(dir_ / "model.safetensors", "abc");
  EXPECT_NE(error_of([&] { SafetensorsCheckpoint c(dir_); }).find("truncated"), std::string::npos);
}

TEST_F(SafetensorsTest, BadJsonHeader) {
  raw_file("{not json", 0);
  std::string e = error_of([&] { SafetensorsCheckpoint c(dir_); });
  EXPECT_NE(e.find("bad JSON header"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, UnsupportedDtypeNamesTensor) {
  raw_file(R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16);
  std::string e = error_of([&] { SafetensorsCheckpoint c(dir_); });
  EXPECT_NE(e.find("'ids'"), std::string::npos) << e;
  EXPECT_NE(e.find("unsupported dtype 'I64'"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, OffsetsDisagreeWithShape) {
  raw_file(R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})", 16);
  std::string e = error_of([&] { SafetensorsCheckpoint c(dir_); });
  EXPECT_NE(e.find("needs 8 bytes but data_offsets span 16"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, MissingCheckpoint) {
  std::string e = error_of([&] { SafetensorsCheckpoint c(dir_); });
  EXPECT_NE(e.find("no model.safetensors"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, IndexPointingToWrongShard) {
  std::map<std::string, TensorSource> tensors;
  tensors.emplace("a", f32_tensor({2}, 0.0f));
  write_safetensors(dir_ / "shard.safetensors", tensors);
  write_file(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": "shard.safetensors", "b": "shard.safetensors"}})");
  std::string e = error_of([&] { SafetensorsCheckpoint c(dir_); });
  EXPECT_NE(e.find("tensor 'b' is in shard.safetensors but it is not there"), std::string::npos) << e;
}

// Model-level checks: a real make-model checkpoint with one thing broken at a time.
class CheckpointErrors : public SafetensorsTest {
 protected:
  ModelConfig make(const std::string& preset = "tiny") {
    MakeModelOptions options{.arch = "llama", .preset = preset, .seed = 7, .out_dir = dir_};
    return make_model(options);
  }
  // Rewrites the checkpoint with `edit` applied to its tensor list.
  void rewrite(const std::function<void(std::map<std::string, TensorSource>&)>& edit) {
    std::map<std::string, TensorSource> tensors;
    {
      SafetensorsCheckpoint original(dir_);
      for (const auto& [name, view] : original.tensors()) {
        TensorSource t;
        t.dtype = view.dtype;
        t.shape = view.shape;
        std::vector<std::byte> bytes(view.data, view.data + t.nbytes());
        t.fill = [bytes](std::byte* out) { std::memcpy(out, bytes.data(), bytes.size()); };
        tensors.emplace(name, t);
      }
    }
    edit(tensors);
    write_safetensors(dir_ / "model.safetensors", tensors);
  }
  std::string load_error() {
    return error_of([&] {
      ModelConfig config = ModelConfig::from_dir(dir_);
      SafetensorsCheckpoint checkpoint(dir_);
      load_weights(config, checkpoint);
    });
  }
};

TEST_F(CheckpointErrors, IntactCheckpointLoads) {
  make();
  EXPECT_EQ(load_error(), "");
}

TEST_F(CheckpointErrors, MissingTensor) {
  make();
  rewrite([](auto& t) { t.erase("model.layers.1.mlp.up_proj.weight"); });
  std::string e = load_error();
  EXPECT_NE(e.find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << e;
}

TEST_F(CheckpointErrors, UnexpectedTensor) {
  make();
  rewrite([](auto& t) { t.emplace("model.layers.0.self_attn.q_proj.bias", f32_tensor({64}, 0.0f)); });
  std::string e = load_error();
  EXPECT_NE(e.find("unexpected tensor 'model.layers.0.self_attn.q_proj.bias'"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST_F(CheckpointErrors, WrongShape) {
  make();
  rewrite([](auto& t) { t["model.norm.weight"] = f32_tensor({63}, 1.0f); });
  std::string e = load_error();
  EXPECT_NE(e.find("'model.norm.weight' has shape [63] but the config needs [64]"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST_F(CheckpointErrors, TiedCheckpointMayCarryLmHead) {
  make("tiny-tied");
  rewrite([](auto& t) { t.emplace("lm_head.weight", f32_tensor({512, 64}, 0.0f)); });
  EXPECT_EQ(load_error(), "");
}

}  // namespace
}  // namespace tachyon::model
