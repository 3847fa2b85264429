// DenseModel::forward's recycled_logits (model/dense_model.h): the logits take over the handed-back
// allocation, whatever it held, and come out bit for bit as from a fresh one. CpuModelRunner hands
// back its previous step's, so a serving step no larger than an earlier one allocates and zeroes no
// [rows, vocab] logits.
// Run: build/tests/unit_tests --gtest_filter='RecycledLogits*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "../tiny_model_suite.h"
#include "tachyon/model/attention_backend.h"

namespace tachyon::model {
namespace {

class RecycledLogits : public testing::TinyModelSuite<31> {
 protected:
  // Logits of every row of `tokens` as one fresh sequence, into `recycled`'s allocation.
  static std::vector<float> forward_all(const std::vector<int32_t>& tokens, std::vector<float> recycled = {}) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    SequenceKvCache cache(model_->config(), n);
    SequenceAttention attention(model_->config(), cache, n);
    std::vector<int64_t> positions(tokens.size());
    std::iota(positions.begin(), positions.end(), 0);
    return model_->forward(ForwardBatch{tokens, positions, positions}, attention, nullptr, std::move(recycled));
  }
};

TEST_F(RecycledLogits, TakeOverTheAllocationAndMatchAFreshOneBitForBit) {
  const std::vector<int32_t> tokens = {5, 17, 3, 99, 42};
  const size_t want_size = tokens.size() * static_cast<size_t>(model_->config().vocab_size);
  const std::vector<float> fresh = forward_all(tokens);
  ASSERT_EQ(fresh.size(), want_size);

  // Larger than needed and full of NaN (a previous, bigger step's leftovers).
  std::vector<float> larger(want_size + 3 * static_cast<size_t>(model_->config().vocab_size),
                            std::numeric_limits<float>::quiet_NaN());
  const float* allocation = larger.data();
  const std::vector<float> reused = forward_all(tokens, std::move(larger));
  EXPECT_EQ(reused.data(), allocation) << "the logits did not take over the handed-back allocation";
  ASSERT_EQ(reused.size(), want_size);
  EXPECT_EQ(std::memcmp(reused.data(), fresh.data(), want_size * sizeof(float)), 0);

  // Smaller than needed: it grows, and still matches.
  std::vector<float> smaller(7, std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> grown = forward_all(tokens, std::move(smaller));
  ASSERT_EQ(grown.size(), want_size);
  EXPECT_EQ(std::memcmp(grown.data(), fresh.data(), want_size * sizeof(float)), 0);
}

}  // namespace
}  // namespace tachyon::model
