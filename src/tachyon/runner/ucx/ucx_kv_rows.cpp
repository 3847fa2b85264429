#include "tachyon/runner/ucx/ucx_kv_rows.h"

#include <algorithm>
#include <cstring>

#include "tachyon/base/byte_codec.h"
#include "tachyon/base/check.h"

namespace tachyon::runner::ucx {
namespace {

constexpr uint32_t kDescriptorMagic = 0x58435554;  // "TUCX"
// A read's deadline: a second, plus a second per GB (a UCX transport slower than that is
// broken, or its peer frozen; the prompt is then computed on the decode side).
constexpr double kReadBytesPerSecond = 1e9;

template <typename T>
T take(const std::string& in, size_t& offset) {
  std::optional<T> value = take_value<T>(in, offset);
  TACHYON_CHECK(value.has_value()) << "a UCX KV descriptor ends early";
  return *value;
}

std::string take_bytes(const std::string& in, size_t& offset) {
  const auto size = take<uint64_t>(in, offset);
  TACHYON_CHECK(size <= in.size() - offset) << "a UCX KV descriptor ends early";
  std::string out = in.substr(offset, size);
  offset += size;
  return out;
}

// The source cache as its descriptor names it.
struct Source {
  std::string worker_address;
  struct Plane {
    uint64_t address;
    int64_t slots;
    int64_t width;
  };
  std::vector<Plane> planes;
  std::vector<std::string> rkeys;
};

Source parse(const std::string& descriptor) {
  size_t offset = 0;
  TACHYON_CHECK(take<uint32_t>(descriptor, offset) == kDescriptorMagic) << "not a UCX KV descriptor";
  Source source;
  const auto num_planes = take<uint32_t>(descriptor, offset);
  source.worker_address = take_bytes(descriptor, offset);
  for (uint32_t p = 0; p < num_planes; ++p) {
    Source::Plane plane;
    plane.address = take<uint64_t>(descriptor, offset);
    plane.slots = take<int64_t>(descriptor, offset);
    plane.width = take<int64_t>(descriptor, offset);
    source.planes.push_back(plane);
    source.rkeys.push_back(take_bytes(descriptor, offset));
  }
  TACHYON_CHECK(offset == descriptor.size()) << "a UCX KV descriptor with trailing bytes";
  return source;
}

}  // namespace

UcxKvRowAccess::UcxKvRowAccess(KvRowAccess& host_cache)
    : ForwardingKvRowAccess(host_cache), layout_(host_cache.host_layout()) {
  TACHYON_CHECK(!layout_.planes.empty() && layout_.block_size > 0)
      << "--kv-transport ucx needs a KV cache in host memory (the CPU runner's); Debian's UCX cannot read GPU "
         "memory, so a GPU server moves KV by CUDA IPC on one node or as rows over TCP (--kv-transport auto|tcp)";
  fingerprint_ = "ucx f32";
  for (const HostPlane& plane : layout_.planes) fingerprint_ += " " + std::to_string(plane.width);
}

std::string UcxKvRowAccess::reference_descriptor() const {
  std::lock_guard lock(mutex_);
  if (!descriptor_.empty()) return descriptor_;
  std::string out;
  put_value(out, kDescriptorMagic);
  put_value(out, static_cast<uint32_t>(layout_.planes.size()));
  put_value(out, static_cast<uint64_t>(rma_.worker_address().size()));
  out += rma_.worker_address();
  for (const HostPlane& plane : layout_.planes) {
    const std::string rkey = rma_.expose(plane.data, static_cast<size_t>(plane.slots * plane.width) * sizeof(float));
    put_value(out, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(plane.data)));
    put_value(out, plane.slots);
    put_value(out, plane.width);
    put_value(out, static_cast<uint64_t>(rkey.size()));
    out += rkey;
  }
  descriptor_ = std::move(out);
  return descriptor_;
}

int64_t UcxKvRowAccess::copy_by_reference(const std::string& descriptor, int64_t source_block_size,
                                          std::span<const int32_t> source_blocks, std::span<const int32_t> block_table,
                                          int64_t num_tokens) {
  const Source source = parse(descriptor);
  TACHYON_CHECK(source.planes.size() == layout_.planes.size())
      << "the prefill server's KV cache has " << source.planes.size() << " planes, this one " << layout_.planes.size();
  const int64_t block_size = layout_.block_size;
  TACHYON_CHECK(num_tokens >= 0 && source_block_size > 0 &&
                static_cast<int64_t>(source_blocks.size()) * source_block_size >= num_tokens &&
                static_cast<int64_t>(block_table.size()) * block_size >= num_tokens)
      << source_blocks.size() << " source blocks of " << source_block_size << " and " << block_table.size()
      << " blocks of " << block_size << " cannot hold " << num_tokens << " tokens";
  std::vector<UcxRma::Get> gets;
  int64_t bytes = 0;
  for (size_t p = 0; p < layout_.planes.size(); ++p) {
    const HostPlane& local = layout_.planes[p];
    const Source::Plane& remote = source.planes[p];
    TACHYON_CHECK(remote.width == local.width)
        << "plane " << p << " is " << remote.width << " values wide at the source, " << local.width << " here";
    const auto row_bytes = static_cast<size_t>(local.width) * sizeof(float);
    // One GET per run of tokens contiguous in both caches: up to the end of either's block.
    for (int64_t t = 0; t < num_tokens;) {
      const int64_t run = std::min({source_block_size - t % source_block_size, block_size - t % block_size, num_tokens - t});
      const int64_t from = int64_t{source_blocks[static_cast<size_t>(t / source_block_size)]} * source_block_size +
                           t % source_block_size;
      const int64_t to = int64_t{block_table[static_cast<size_t>(t / block_size)]} * block_size + t % block_size;
      TACHYON_CHECK(from >= 0 && from + run <= remote.slots)
          << "source KV slots [" << from << ", " << from + run << ") outside the prefill server's " << remote.slots;
      TACHYON_CHECK(to >= 0 && to + run <= local.slots) << "KV slots [" << to << ", " << to + run << ") outside the cache";
      gets.push_back({static_cast<int>(p), remote.address + static_cast<uint64_t>(from) * row_bytes,
                      local.data + to * local.width, static_cast<size_t>(run) * row_bytes});
      bytes += static_cast<int64_t>(gets.back().bytes);
      t += run;
    }
  }
  const auto timeout = std::chrono::milliseconds(1000 + static_cast<int64_t>(static_cast<double>(bytes) / kReadBytesPerSecond * 1000));
  rma_.read(source.worker_address, source.rkeys, gets, timeout);
  return bytes;
}

}  // namespace tachyon::runner::ucx
