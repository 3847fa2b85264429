// CpuCommunicator: collectives over threads that share memory; see the header for the protocol.
#include "tachyon/dist/cpu_communicator.h"

#include <cstring>
#include <sstream>

#include "tachyon/base/check.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::dist {
namespace {

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

// Why a (send [send_bytes], recv [recv_bytes]) pair is unusable, or "" when it is fine.
// `in_place` says the two sit exactly where the op's in-place form puts them.
std::string check_buffers(const void* send, size_t send_bytes, const void* recv, size_t recv_bytes, bool in_place) {
  std::ostringstream why;
  if (send_bytes > 0 && send == nullptr)
    why << "send is null for " << send_bytes << " bytes";
  else if (recv_bytes > 0 && recv == nullptr)
    why << "recv is null for " << recv_bytes << " bytes";
  else if (!in_place && overlaps(send, send_bytes, recv, recv_bytes))
    why << "send and recv overlap other than in place";
  return why.str();
}

// dst[i] = inputs[0][offset + i] + inputs[1][offset + i] + ..., added in input (= rank) order
// in the accumulator type Acc, so every rank computes the same bits.
template <typename T, typename Acc, typename Load, typename Store>
void sum_in_order(const std::vector<const void*>& inputs, size_t offset, size_t count, std::byte* out, Load load,
                  Store store) {
  T* dst = reinterpret_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    Acc acc = load(static_cast<const T*>(inputs[0])[offset + i]);
    for (size_t r = 1; r < inputs.size(); ++r) acc += load(static_cast<const T*>(inputs[r])[offset + i]);
    dst[i] = store(acc);
  }
}

}  // namespace

void ThreadBarrier::arrive_and_wait() {
  std::unique_lock lock(mutex_);
  uint64_t generation = generation_;
  if (++arrived_ == count_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation; });
}

bool ThreadBarrier::arrive_and_wait_unless_aborted() {
  std::unique_lock lock(mutex_);
  if (aborted_) return false;
  uint64_t generation = generation_;
  if (++arrived_ == count_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return true;
  }
  // A generation that completed before the abort is a normal return: every thread passed.
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  return generation_ != generation;
}

void ThreadBarrier::abort() {
  {
    std::lock_guard lock(mutex_);
    aborted_ = true;
  }
  cv_.notify_all();
}

CpuWorld::CpuWorld(int size) : size_(size), barrier_(size) {
  TACHYON_CHECK(size >= 1) << "CpuWorld needs at least one rank, got " << size;
  slots_.resize(size);
  for (int r = 0; r < size; ++r) {
    mailboxes_.push_back(std::make_unique<Mailbox>());
    mailboxes_.back()->from.resize(size);
  }
}

void CpuWorld::abort(const std::string& reason) {
  {
    std::lock_guard lock(abort_mutex_);
    if (!abort_reason_.empty()) return;
    abort_reason_ = reason.empty() ? "aborted" : reason;
  }
  barrier_.abort();
  for (const std::unique_ptr<Mailbox>& box : mailboxes_) {
    {
      std::lock_guard lock(box->mutex);
      box->aborted = true;
    }
    box->cv.notify_all();
  }
}

std::string CpuWorld::abort_reason() const {
  std::lock_guard lock(abort_mutex_);
  return abort_reason_;
}

CpuCommunicator::CpuCommunicator(CpuWorld& world, int rank) : world_(world), rank_(rank) {
  TACHYON_CHECK(rank >= 0 && rank < world.size())
      << "CpuCommunicator: rank " << rank << " is outside a world of " << world.size();
}

namespace {

const char* op_name(int op) {
  static const char* names[] = {"all_reduce", "all_gather",  "reduce_scatter", "broadcast",
                                "all_gatherv", "barrier", "all_to_all_v"};
  return names[op];
}

}  // namespace

void CpuCommunicator::begin(Slot slot) {
  CpuWorld::Op op = slot.op;
  world_.slots_[rank_] = std::move(slot);
  if (!world_.barrier_.arrive_and_wait_unless_aborted()) throw_aborted(op_name(static_cast<int>(op)));
  std::string why = disagreement();
  if (why.empty()) return;
  // Every rank found the same disagreement in the same table; leave together so that no rank
  // rewrites its slot while another still reads it, then throw on all of them.
  world_.barrier_.arrive_and_wait();
  TACHYON_FAIL() << "rank " << rank_ << " of " << size() << ": " << op_name(static_cast<int>(op)) << ": " << why;
}

void CpuCommunicator::throw_aborted(std::string_view call) const {
  throw GroupAborted("rank " + std::to_string(rank_) + " of " + std::to_string(size()) + ": " + std::string(call) +
                     ": the group was aborted: " + world_.abort_reason());
}

std::string CpuCommunicator::disagreement() const {
  const std::vector<Slot>& slots = world_.slots_;
  const Slot& first = slots[0];
  std::ostringstream why;
  for (int r = 1; r < size(); ++r) {
    if (slots[r].op != first.op) {
      why << "rank " << r << " called " << op_name(static_cast<int>(slots[r].op)) << " while rank 0 called "
          << op_name(static_cast<int>(first.op));
      return why.str();
    }
  }
  for (int r = 0; r < size(); ++r) {
    if (!slots[r].error.empty()) return "rank " + std::to_string(r) + ": " + slots[r].error;
  }
  if (first.op == CpuWorld::Op::kAllToAllV) return exchange_disagreement();
  for (int r = 1; r < size(); ++r) {
    const Slot& s = slots[r];
    switch (first.op) {
      case CpuWorld::Op::kAllReduce:
      case CpuWorld::Op::kReduceScatter:
        if (s.count != first.count || s.type != first.type) {
          why << "rank " << r << " passed " << s.count << " " << reduce_type_name(s.type) << " elements, rank 0 passed "
              << first.count << " " << reduce_type_name(first.type);
        }
        break;
      case CpuWorld::Op::kAllGather:
        if (s.count != first.count)
          why << "rank " << r << " passed " << s.count << " bytes, rank 0 passed " << first.count;
        break;
      case CpuWorld::Op::kBroadcast:
        if (s.root != first.root)
          why << "rank " << r << " passed root " << s.root << ", rank 0 passed root " << first.root;
        else if (s.count != first.count)
          why << "rank " << r << " passed " << s.count << " bytes, rank 0 passed " << first.count;
        break;
      case CpuWorld::Op::kAllGatherv:
        if (s.items.size() != first.items.size()) {
          why << "rank " << r << " passed " << s.items.size() << " items, rank 0 passed " << first.items.size();
          break;
        }
        for (size_t i = 0; i < s.items.size() && why.tellp() == 0; ++i) {
          for (int k = 0; k < size(); ++k) {
            if (s.items[i].recv_counts[k] != first.items[i].recv_counts[k]) {
              why << "item " << i << ": rank " << r << " expects " << s.items[i].recv_counts[k] << " bytes from rank "
                  << k << ", rank 0 expects " << first.items[i].recv_counts[k];
              break;
            }
          }
        }
        break;
      case CpuWorld::Op::kBarrier:
      case CpuWorld::Op::kAllToAllV: break;
    }
    if (why.tellp() > 0) return why.str();
  }
  return "";
}

std::string CpuCommunicator::exchange_disagreement() const {
  const std::vector<Slot>& slots = world_.slots_;
  std::ostringstream why;
  for (int r = 1; r < size(); ++r) {
    if (slots[r].exchanges.size() != slots[0].exchanges.size()) {
      why << "rank " << r << " passed " << slots[r].exchanges.size() << " items, rank 0 passed "
          << slots[0].exchanges.size();
      return why.str();
    }
  }
  for (size_t i = 0; i < slots[0].exchanges.size(); ++i) {
    for (int q = 0; q < size(); ++q) {
      for (int r = 0; r < size(); ++r) {
        const size_t expected = slots[q].exchanges[i].recv_counts[r], sent = slots[r].exchanges[i].send_counts[q];
        if (expected == sent) continue;
        why << "item " << i << ": rank " << q << " expects " << expected << " bytes from rank " << r
            << ", which sends it " << sent;
        return why.str();
      }
    }
  }
  return "";
}

void CpuCommunicator::sum_ranks(size_t element_offset, size_t count, ReduceType type, std::byte* out) const {
  std::vector<const void*> inputs;
  for (const Slot& slot : world_.slots_) inputs.push_back(slot.send);
  switch (type) {
    case ReduceType::kF32:
      sum_in_order<float, float>(
          inputs, element_offset, count, out, [](float v) { return v; }, [](float a) { return a; });
      break;
    case ReduceType::kBF16:
      sum_in_order<uint16_t, float>(inputs, element_offset, count, out, bf16_to_f32, f32_to_bf16);
      break;
    case ReduceType::kF16:
      sum_in_order<uint16_t, float>(inputs, element_offset, count, out, f16_to_f32, f32_to_f16);
      break;
    case ReduceType::kI32:  // unsigned accumulation: overflow wraps instead of being undefined
      sum_in_order<int32_t, uint32_t>(
          inputs, element_offset, count, out, [](int32_t v) { return uint32_t(v); },
          [](uint32_t a) { return int32_t(a); });
      break;
    case ReduceType::kI64:
      sum_in_order<int64_t, uint64_t>(
          inputs, element_offset, count, out, [](int64_t v) { return uint64_t(v); },
          [](uint64_t a) { return int64_t(a); });
      break;
  }
}

void CpuCommunicator::all_reduce(const void* send, void* recv, size_t count, ReduceType type, void* /*stream*/) {
  size_t bytes = count * reduce_type_size(type);
  begin({.op = CpuWorld::Op::kAllReduce,
         .send = send,
         .count = count,
         .type = type,
         .error = check_buffers(send, bytes, recv, bytes, send == recv)});
  scratch_.resize(bytes);
  sum_ranks(0, count, type, scratch_.data());
  end();  // peers are done reading `send`, which may be `recv`
  if (bytes > 0) std::memcpy(recv, scratch_.data(), bytes);
}

void CpuCommunicator::reduce_scatter(const void* send, void* recv, size_t count, ReduceType type, void* /*stream*/) {
  size_t bytes = count * reduce_type_size(type);
  bool in_place = send != nullptr && recv == static_cast<const std::byte*>(send) + rank_ * bytes;
  begin({.op = CpuWorld::Op::kReduceScatter,
         .send = send,
         .count = count,
         .type = type,
         .error = check_buffers(send, bytes * size(), recv, bytes, in_place)});
  scratch_.resize(bytes);
  sum_ranks(rank_ * count, count, type, scratch_.data());
  end();
  if (bytes > 0) std::memcpy(recv, scratch_.data(), bytes);
}

void CpuCommunicator::all_gather(const void* send, void* recv, size_t bytes, void* /*stream*/) {
  std::byte* out = static_cast<std::byte*>(recv);
  bool in_place = out != nullptr && send == out + rank_ * bytes;
  begin({.op = CpuWorld::Op::kAllGather,
         .send = send,
         .count = bytes,
         .error = check_buffers(send, bytes, recv, bytes * size(), in_place)});
  // Peers read only our `send`, which is either outside `recv` or exactly our own run of it.
  for (int r = 0; r < size() && bytes > 0; ++r) {
    const void* src = world_.slots_[r].send;
    if (src != out + r * bytes) std::memcpy(out + r * bytes, src, bytes);
  }
  end();
}

void CpuCommunicator::broadcast(void* data, size_t bytes, int root, void* /*stream*/) {
  std::ostringstream why;
  if (root < 0 || root >= size())
    why << "root " << root << " is outside [0, " << size() << ")";
  else if (bytes > 0 && data == nullptr)
    why << "data is null for " << bytes << " bytes";
  begin({.op = CpuWorld::Op::kBroadcast, .send = data, .count = bytes, .root = root, .error = why.str()});
  const void* src = world_.slots_[root].send;
  if (rank_ != root && bytes > 0 && src != data) std::memcpy(data, src, bytes);
  end();
}

void CpuCommunicator::all_gatherv(std::span<const GatherItem> items, void* /*stream*/) {
  std::string error;
  for (size_t i = 0; i < items.size() && error.empty(); ++i) {
    const GatherItem& item = items[i];
    std::ostringstream why;
    if (item.recv_counts.size() != size_t(size())) {
      why << "item " << i << ": recv_counts has " << item.recv_counts.size() << " entries for " << size() << " ranks";
    } else if (item.send_bytes != item.recv_counts[rank_]) {
      why << "item " << i << ": send_bytes " << item.send_bytes << " but recv_counts[" << rank_
          << "] = " << item.recv_counts[rank_];
    } else {
      bool in_place =
          item.recv != nullptr && item.send == static_cast<std::byte*>(item.recv) + gather_offset(item, rank_);
      std::string buffers = check_buffers(item.send, item.send_bytes, item.recv, gather_total_bytes(item), in_place);
      if (!buffers.empty()) why << "item " << i << ": " << buffers;
    }
    error = why.str();
  }
  begin({.op = CpuWorld::Op::kAllGatherv, .items = items, .error = error});
  for (size_t i = 0; i < items.size(); ++i) {
    std::byte* out = static_cast<std::byte*>(items[i].recv);
    for (int r = 0; r < size(); ++r) {
      size_t bytes = items[i].recv_counts[r];
      const void* src = world_.slots_[r].items[i].send;
      if (bytes > 0 && src != out) std::memcpy(out, src, bytes);
      out += bytes;
    }
  }
  end();
}

void CpuCommunicator::all_to_all_v(std::span<const AllToAllItem> items, void* /*stream*/) {
  std::string error;
  for (size_t i = 0; i < items.size() && error.empty(); ++i) {
    const AllToAllItem& item = items[i];
    std::ostringstream why;
    if (item.send_counts.size() != size_t(size()) || item.recv_counts.size() != size_t(size())) {
      why << "item " << i << ": send_counts has " << item.send_counts.size() << " and recv_counts "
          << item.recv_counts.size() << " entries for " << size() << " ranks";
    } else {
      const size_t send_bytes = run_offset(item.send_counts, size()), recv_bytes = run_offset(item.recv_counts, size());
      std::string buffers = check_buffers(item.send, send_bytes, item.recv, recv_bytes, /*in_place=*/false);
      if (!buffers.empty()) why << "item " << i << ": " << buffers;
    }
    error = why.str();
  }
  begin({.op = CpuWorld::Op::kAllToAllV, .exchanges = items, .error = error});
  // Each rank pulls its runs from the peers' send buffers, which nobody writes during the call.
  for (size_t i = 0; i < items.size(); ++i) {
    std::byte* out = static_cast<std::byte*>(items[i].recv);
    for (int r = 0; r < size(); ++r) {
      const AllToAllItem& peer = world_.slots_[r].exchanges[i];
      const size_t bytes = items[i].recv_counts[r];
      if (bytes > 0) std::memcpy(out, static_cast<const std::byte*>(peer.send) + run_offset(peer.send_counts, rank_), bytes);
      out += bytes;
    }
  }
  end();
}

void CpuCommunicator::barrier() {
  begin({.op = CpuWorld::Op::kBarrier});
  end();
}

void CpuCommunicator::send(const void* data, size_t bytes, int peer, void* /*stream*/) {
  TACHYON_CHECK(peer >= 0 && peer < size())
      << "rank " << rank_ << " of " << size() << ": send: peer " << peer << " is outside [0, " << size() << ")";
  TACHYON_CHECK(bytes == 0 || data != nullptr) << "rank " << rank_ << ": send: data is null for " << bytes << " bytes";
  const std::byte* src = static_cast<const std::byte*>(data);
  CpuWorld::Mailbox& box = *world_.mailboxes_[peer];
  {
    std::unique_lock lock(box.mutex);
    if (box.aborted) {
      lock.unlock();
      throw_aborted("send");
    }
    box.from[rank_].emplace_back(src, src + bytes);
  }
  box.cv.notify_all();
}

void CpuCommunicator::recv(void* data, size_t bytes, int peer, void* /*stream*/) {
  TACHYON_CHECK(peer >= 0 && peer < size())
      << "rank " << rank_ << " of " << size() << ": recv: peer " << peer << " is outside [0, " << size() << ")";
  TACHYON_CHECK(bytes == 0 || data != nullptr) << "rank " << rank_ << ": recv: data is null for " << bytes << " bytes";
  CpuWorld::Mailbox& box = *world_.mailboxes_[rank_];
  std::vector<std::byte> message;
  {
    std::unique_lock lock(box.mutex);
    box.cv.wait(lock, [&] { return !box.from[peer].empty() || box.aborted; });
    if (box.from[peer].empty()) {
      lock.unlock();
      throw_aborted("recv");
    }
    message = std::move(box.from[peer].front());
    box.from[peer].pop_front();
  }
  TACHYON_CHECK(message.size() == bytes) << "rank " << rank_ << " of " << size() << ": recv: expected " << bytes
                                         << " bytes from rank " << peer << ", the matching send carried "
                                         << message.size();
  if (bytes > 0) std::memcpy(data, message.data(), bytes);
}

void CpuCommunicator::send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data, size_t recv_bytes,
                                int src, void* stream) {
  TACHYON_CHECK(!overlaps(send_data, send_bytes, recv_data, recv_bytes))
      << "rank " << rank_ << ": send_recv: send and recv buffers overlap";
  send(send_data, send_bytes, dst, stream);  // eager: returns before the peer receives
  recv(recv_data, recv_bytes, src, stream);
}

}  // namespace tachyon::dist
