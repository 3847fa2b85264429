// BPE merging as HF's Word::merge_all: a linked list of symbols and a min-heap of candidate pairs
// ordered by (rank, position); stale heap entries are skipped when popped. Each piece costs
// O(n log n), so a long piece (SentencePiece-style vocabularies have no pre-tokenizer) stays fast.
#include "tachyon/tokenizer/bpe_model.h"

#include <cstdio>
#include <functional>
#include <queue>
#include <tuple>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer {

std::pair<std::string, std::string> BpeTables::merge_of(const nlohmann::json& entry, size_t rank,
                                                       const std::string& source) {
  if (entry.is_string()) {
    const std::string& line = entry.get_ref<const std::string&>();
    const std::size_t space = line.find(' ');
    TACHYON_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos)
        << "merge " << rank << " '" << line << "' is not two tokens in " << source;
    return {line.substr(0, space), line.substr(space + 1)};
  }
  TACHYON_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string())
      << "merge " << rank << " is not a pair in " << source;
  return {entry[0].get<std::string>(), entry[1].get<std::string>()};
}

BpeTables BpeTables::from_json(const nlohmann::json& model, const std::string& source) {
  BpeTables tables;
  const auto& vocab = model.at("vocab");
  tables.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) tables.vocab.emplace_back(token, id.get<int32_t>());
  const auto& merges = model.at("merges");
  tables.merges.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    tables.merges.push_back(merge_of(merges[rank], rank, source));
  }
  return tables;
}

BpeModel BpeModel::from_tables(const nlohmann::json& model, const BpeTables& tables, const std::string& source) {
  BpeModel m;
  int32_t max_id = -1;
  m.vocab_.reserve(tables.vocab.size());
  for (const auto& [token, value] : tables.vocab) {
    TACHYON_CHECK(value >= 0) << "negative id for token '" << token << "' in " << source;
    m.vocab_.insert(token, value);
    max_id = std::max(max_id, value);
  }
  m.id_to_token_.resize(static_cast<std::size_t>(max_id + 1));
  m.vocab_.for_each([&](const std::string& token, int32_t id) { m.id_to_token_[static_cast<size_t>(id)] = token; });

  auto opt_string = [&](const char* key) {
    return model.contains(key) && model[key].is_string() ? model[key].get<std::string>() : std::string();
  };
  m.continuing_subword_prefix_ = opt_string("continuing_subword_prefix");
  m.end_of_word_suffix_ = opt_string("end_of_word_suffix");
  m.fuse_unk_ = model.value("fuse_unk", false);
  m.byte_fallback_ = model.value("byte_fallback", false);
  m.ignore_merges_ = model.value("ignore_merges", false);
  const std::string unk = opt_string("unk_token");
  if (!unk.empty()) {
    m.unk_id_ = m.token_to_id(unk);
    TACHYON_CHECK(m.unk_id_.has_value()) << "unk_token '" << unk << "' is not in the vocabulary of " << source;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    m.byte_ids_[b] = m.token_to_id(name).value_or(-1);
  }

  m.merges_.reserve(tables.merges.size());
  const std::size_t prefix_len = m.continuing_subword_prefix_.size();
  std::string merged;  // reused: no allocation per merge once it has grown
  for (std::size_t rank = 0; rank < tables.merges.size(); ++rank) {
    const std::string_view left = tables.merges[rank].first, right = tables.merges[rank].second;
    const auto left_id = m.token_to_id(left);
    const auto right_id = m.token_to_id(right);
    TACHYON_CHECK(left_id && right_id) << "merge " << rank << " ('" << left << "', '" << right
                                       << "') uses a token missing from the vocabulary of " << source;
    // With a continuing-subword prefix the right part carries it, the merged token does not repeat it.
    merged.assign(left);
    merged += prefix_len > 0 && right.substr(0, prefix_len) == m.continuing_subword_prefix_ ? right.substr(prefix_len)
                                                                                           : right;
    const auto new_id = m.token_to_id(merged);
    TACHYON_CHECK(new_id.has_value()) << "merge " << rank << " result '" << merged
                                      << "' is not in the vocabulary of " << source;
    m.merges_.insert_or_assign(*left_id, *right_id, {.rank = static_cast<int32_t>(rank), .new_id = *new_id});
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const { return vocab_.find(token); }

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size())) return nullptr;
  const std::string& token = id_to_token_[id];
  return token.empty() ? nullptr : &token;
}

// One symbol per character; characters missing from the vocabulary become byte tokens
// (byte_fallback) or the unknown token, consecutive unknowns fused into one when fuse_unk is set.
std::vector<BpeModel::Symbol> BpeModel::initial_symbols(std::string_view piece) const {
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  auto add = [&](int32_t id, int32_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, len});
    if (index > 0) symbols[index - 1].next = index;
  };
  int32_t pending_unk_len = 0;  // bytes covered by an unknown token not yet added (0: none)
  std::string decorated;
  for (std::size_t i = 0; i < piece.size();) {
    const std::size_t n = utf8_char_len(piece, i);
    std::string_view ch = piece.substr(i, n);
    const bool is_first = i == 0;
    const bool is_last = i + n == piece.size();
    if ((!is_first && !continuing_subword_prefix_.empty()) || (is_last && !end_of_word_suffix_.empty())) {
      decorated = (is_first ? "" : continuing_subword_prefix_) + std::string(ch) + (is_last ? end_of_word_suffix_ : "");
      ch = decorated;
    }
    i += n;
    const auto len = static_cast<int32_t>(n);
    if (const auto id = token_to_id(ch)) {
      if (pending_unk_len > 0) add(*unk_id_, pending_unk_len);
      pending_unk_len = 0;
      add(*id, len);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        // HF does not flush a pending unknown here; it is emitted before the next known symbol.
        for (char c : ch) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (!unk_id_) continue;  // no unknown token: HF drops the character
    if (pending_unk_len > 0 && fuse_unk_) {
      pending_unk_len += len;
    } else {
      if (pending_unk_len > 0) add(*unk_id_, pending_unk_len);
      pending_unk_len = len;
    }
  }
  if (pending_unk_len > 0) add(*unk_id_, pending_unk_len);
  return symbols;
}

void BpeModel::merge_all(std::vector<Symbol>& symbols) const {
  // (rank, position, new_id); std::greater makes the lowest rank, then leftmost position, pop first.
  using Candidate = std::tuple<int32_t, int32_t, int32_t>;
  std::vector<Candidate> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>{}, std::move(storage));
  auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const MergeTable::Merge* merge = merges_.find(symbols[pos].id, symbols[next].id);
    if (merge != nullptr) queue.emplace(merge->rank, pos, merge->new_id);
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const auto [rank, pos, new_id] = queue.top();
    queue.pop();
    Symbol& left = symbols[pos];
    if (left.len == 0 || left.next < 0) continue;
    const int32_t right_pos = left.next;
    const MergeTable::Merge* merge = merges_.find(left.id, symbols[right_pos].id);
    if (merge == nullptr || merge->new_id != new_id) continue;  // stale entry
    Symbol& right = symbols[right_pos];
    left.id = new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) symbols[left.next].prev = pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(pos);
  }
}

std::vector<int32_t> BpeModel::tokenize(std::string_view piece) const {
  if (piece.empty()) return {};
  if (ignore_merges_) {
    if (const auto id = token_to_id(piece)) return {*id};
  }
  std::vector<Symbol> symbols = initial_symbols(piece);
  merge_all(symbols);
  std::vector<int32_t> ids;
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  return ids;
}

}  // namespace tachyon::tokenizer
