#include "tachyon/runner/plan_wire.h"

#include <cstring>
#include <memory>
#include <type_traits>

#include "tachyon/base/check.h"

namespace tachyon::runner {
namespace {

constexpr int64_t kFormatVersion = 1;

class Writer {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));
  }
  template <typename T>
  void put_array(const std::vector<T>& values) {
    put<int64_t>(static_cast<int64_t>(values.size()));
    const size_t at = bytes_.size();
    bytes_.resize(at + values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(bytes_.data() + at, values.data(), values.size() * sizeof(T));
  }
  std::vector<std::byte> take() { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  template <typename T>
  std::vector<T> get_array() {
    const int64_t count = get<int64_t>();
    TACHYON_CHECK(count >= 0 && static_cast<uint64_t>(count) <= (bytes_.size() - at_) / sizeof(T))
        << "plan bytes: an array of " << count << " elements runs past the end";
    std::vector<T> values(static_cast<size_t>(count));
    if (count > 0) std::memcpy(values.data(), bytes_.data() + at_, values.size() * sizeof(T));
    at_ += values.size() * sizeof(T);
    return values;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  void need(size_t n) const {
    TACHYON_CHECK(bytes_.size() - at_ >= n) << "plan bytes: truncated at byte " << at_ << " of " << bytes_.size();
  }
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
};

// What a follower samples with: greedy, no penalties (its tokens are discarded).
const std::shared_ptr<const core::SamplingParams> kFollowerSampling = [] {
  auto p = std::make_shared<core::SamplingParams>();
  p->temperature = 0.0f;
  return std::shared_ptr<const core::SamplingParams>(std::move(p));
}();

}  // namespace

std::vector<std::byte> encode_plan(const core::StepPlan& plan) {
  TACHYON_CHECK(!plan.has_drafts()) << "plans with draft tokens do not travel to other nodes yet";
  Writer w;
  w.put<int64_t>(kFormatVersion);
  w.put<int32_t>(plan.block_size);
  w.put_array(plan.token_ids);
  w.put_array(plan.positions);
  w.put_array(plan.slot_mapping);
  w.put_array(plan.logits_rows);
  w.put<int64_t>(static_cast<int64_t>(plan.sequences.size()));
  for (const core::ScheduledSequence& s : plan.sequences) {
    w.put<int64_t>(s.sequence_id);
    w.put<int64_t>(s.first_token);
    w.put<int64_t>(s.num_tokens);
    w.put<int64_t>(s.num_computed);
    w.put<uint8_t>(s.sample ? 1 : 0);
    w.put_array(s.block_table);
  }
  return w.take();
}

core::StepPlan decode_plan(std::span<const std::byte> bytes) {
  Reader r(bytes);
  const int64_t version = r.get<int64_t>();
  TACHYON_CHECK(version == kFormatVersion)
      << "plan bytes of format " << version << ", this build reads " << kFormatVersion
      << ": run the same tachyon build on every node";
  core::StepPlan plan;
  plan.block_size = r.get<int32_t>();
  plan.token_ids = r.get_array<int32_t>();
  plan.positions = r.get_array<int64_t>();
  plan.slot_mapping = r.get_array<int64_t>();
  plan.logits_rows = r.get_array<int64_t>();
  const int64_t sequences = r.get<int64_t>();
  TACHYON_CHECK(sequences >= 0 && sequences <= static_cast<int64_t>(bytes.size()))
      << "plan bytes: " << sequences << " sequences";
  for (int64_t i = 0; i < sequences; ++i) {
    core::ScheduledSequence s;
    s.sequence_id = r.get<int64_t>();
    s.first_token = r.get<int64_t>();
    s.num_tokens = r.get<int64_t>();
    s.num_computed = r.get<int64_t>();
    s.sample = r.get<uint8_t>() != 0;
    s.block_table = r.get_array<int32_t>();
    if (s.sample) s.params = kFollowerSampling;
    plan.sequences.push_back(std::move(s));
  }
  TACHYON_CHECK(r.done()) << "plan bytes: " << bytes.size() << " bytes hold more than one plan";
  return plan;
}

size_t max_encoded_plan_bytes(int64_t max_tokens, int64_t max_seqs, int64_t max_blocks_per_seq) {
  const size_t header = 8 + 4 + 5 * 8;                      // version, block size, 4 array lengths, sequences
  const size_t per_token = 4 + 8 + 8 + 8;                   // id, position, slot, (at most) a logits row
  const size_t per_seq = 4 * 8 + 1 + 8 + 4 * static_cast<size_t>(max_blocks_per_seq);
  return header + per_token * static_cast<size_t>(max_tokens) + per_seq * static_cast<size_t>(max_seqs);
}

}  // namespace tachyon::runner
