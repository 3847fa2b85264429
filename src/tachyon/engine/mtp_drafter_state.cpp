// MtpDrafter's state of one sequence as bytes (prefill/decode disaggregation, drafter.h): a
// prefill server's modules ran over the prompt, so the decode server's go on from their rows
// instead of starting at the first decoded token. Both ends are the same build on the same kind
// of host (base/byte_codec.h), so values travel in the host's representation; the magic number
// and the checks below guard against anything else.
//   "TMTP" u32 | version u32 | begin i64 | tokens i64 | modules i64 |
//   per module: length i64 | rows u64 | f32[rows] | inputs u64 | f32[inputs] |
//   drafts_for i64 | drafts u64 | i32[drafts] |
//   drafted_from: position i64 | argmax i32 | hidden u64 | f32[hidden]
#include <algorithm>
#include <cstring>
#include <optional>

#include "tachyon/base/byte_codec.h"
#include "tachyon/engine/mtp_drafter.h"

namespace tachyon::engine {

namespace {

constexpr uint32_t kMagic = 0x50544d54;  // "TMTP"
constexpr uint32_t kVersion = 2;

template <typename T>
void put_array(std::string& out, const std::vector<T>& values) {
  put_value(out, static_cast<uint64_t>(values.size()));
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// The array at `offset`; nullopt when `in` ends first.
template <typename T>
std::optional<std::vector<T>> take_array(const std::string& in, size_t& offset) {
  const std::optional<uint64_t> count = take_value<uint64_t>(in, offset);
  if (!count || *count > (in.size() - offset) / sizeof(T)) return std::nullopt;
  std::vector<T> values(static_cast<size_t>(*count));
  if (!values.empty()) std::memcpy(values.data(), in.data() + offset, values.size() * sizeof(T));
  offset += values.size() * sizeof(T);
  return values;
}

}  // namespace

std::string MtpDrafter::export_state(int64_t sequence_id) const {
  auto it = states_.find(sequence_id);
  if (it == states_.end()) return {};
  const SequenceState& s = it->second;
  std::string out;
  put_value(out, kMagic);
  put_value(out, kVersion);
  put_value(out, s.begin);
  put_value(out, static_cast<int64_t>(s.tokens.size()));
  put_value(out, static_cast<int64_t>(s.modules.size()));
  for (const ModuleRows& module : s.modules) {
    put_value(out, module.cache->length);
    put_array(out, modules_->copy_rows(*module.cache));
    put_array(out, module.inputs);
  }
  put_value(out, s.drafts_for);
  put_array(out, s.drafts);
  put_value(out, s.drafted_from.position);
  put_value(out, s.drafted_from.argmax);
  put_array(out, s.drafted_from.hidden);
  return out;
}

bool MtpDrafter::import_state(int64_t sequence_id, std::span<const int32_t> tokens, const std::string& state) {
  size_t offset = 0;
  const auto magic = take_value<uint32_t>(state, offset);
  const auto version = take_value<uint32_t>(state, offset);
  const auto begin = take_value<int64_t>(state, offset);
  const auto known = take_value<int64_t>(state, offset);
  const auto num_modules = take_value<int64_t>(state, offset);
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  if (!magic || *magic != kMagic || !version || *version != kVersion || !begin || !known || !num_modules ||
      *begin < 0 || *known < 1 || *begin + *known != num_tokens || *num_modules != num_used_) {
    return false;
  }
  SequenceState s;
  s.begin = *begin;
  s.tokens.assign(tokens.begin() + *begin, tokens.end());
  // Module m's rows: the real ones one behind module m - 1's (module 0: every known token's but
  // the last), the rest waiting as inputs, as advance() leaves them.
  int64_t received = *known - 1;  // hidden rows module m has been given
  for (int64_t m = 0; m < num_used_; ++m) {
    const auto length = take_value<int64_t>(state, offset);
    const auto rows = take_array<float>(state, offset);
    auto inputs = take_array<float>(state, offset);
    if (!length || !rows || !inputs || inputs->size() % static_cast<size_t>(hidden_size_) != 0 ||
        *length != std::min(received, std::max<int64_t>(0, *known - 1 - m)) || *length + rows_of(*inputs) != received) {
      return false;
    }
    std::unique_ptr<MtpModules::Cache> cache = modules_->cache_with_rows(m, *rows, *length);
    if (cache == nullptr) return false;
    s.modules.push_back({std::move(cache), std::move(*inputs)});
    received = *length;
  }
  const auto drafts_for = take_value<int64_t>(state, offset);
  auto drafts = take_array<int32_t>(state, offset);
  const auto newest_position = take_value<int64_t>(state, offset);
  const auto newest_argmax = take_value<int32_t>(state, offset);
  auto newest_hidden = take_array<float>(state, offset);
  if (!drafts_for || !drafts || !newest_position || !newest_argmax || !newest_hidden || offset != state.size()) {
    return false;
  }
  const int64_t vocab = modules_->vocab_size();
  const auto in_vocab = [&](int32_t t) { return t >= 0 && t < vocab; };
  // Drafts continue the sequence's last token, from module 0's row just before it.
  const bool drafted = !drafts->empty() && *drafts_for == num_tokens && *newest_position == num_tokens - 2 &&
                       in_vocab(*newest_argmax) && static_cast<int64_t>(newest_hidden->size()) == hidden_size_ &&
                       std::all_of(drafts->begin(), drafts->end(), in_vocab);
  if (drafted) {
    s.drafted_from = {*newest_position, *newest_argmax, std::move(*newest_hidden)};
    s.drafts = static_cast<int64_t>(drafts->size()) == num_tokens_ ? std::move(*drafts) : draft(s, s.drafted_from);
    s.drafts_for = *drafts_for;
  }
  states_.insert_or_assign(sequence_id, std::move(s));
  return true;
}

}  // namespace tachyon::engine
