#include "tachyon/runner/cuda/cuda_kv_rows.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tachyon/base/byte_codec.h"
#include "tachyon/base/check.h"
#include "tachyon/kernels/cuda/kv_copy.h"
#include "tachyon/tensor/dtype.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::runner {

namespace {

using kernels::cuda::KvCopyPlane;

// The descriptor: the IPC handle, the cache's block count, then each plane's offset in the
// allocation (u64) in the planes' order.
template <typename T>
T take(const std::string& in, size_t& offset) {
  std::optional<T> value = take_value<T>(in, offset);
  TACHYON_CHECK(value.has_value()) << "a KV cache descriptor ends early";
  return *value;
}

size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

CudaKvRowAccess::CudaKvRowAccess(const model::gpu::KvCache& cache, const std::vector<model::gpu::KvRegion>& regions,
                                 int64_t num_layers, int32_t block_size, int32_t num_blocks, cudaStream_t compute,
                                 const void* allocation)
    : block_size_(block_size), num_blocks_(num_blocks), compute_(compute),
      allocation_(static_cast<const std::byte*>(allocation)) {
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    for (size_t r = 0; r < regions.size(); ++r) {
      TACHYON_CHECK(regions[r].dtype == DType::kBF16 && regions[r].bytes_per_token % sizeof(uint16_t) == 0)
          << "internal: KV rows move from bf16 caches only (region " << regions[r].name << ")";
      planes_.push_back({cache.bytes(layer, r), static_cast<int64_t>(regions[r].bytes_per_token / sizeof(uint16_t))});
    }
  }
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking));
  // By reference: the fingerprint names the GPU and the planes; the copy's tables are sized for
  // the largest prompt this cache holds, with source blocks of one token at worst.
  int device = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  TACHYON_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  char hex[3];
  fingerprint_ = "cuda-ipc bf16 gpu ";
  for (char byte : prop.uuid.bytes) {
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(byte));
    fingerprint_ += hex;
  }
  fingerprint_ += " planes";
  for (const Plane& plane : planes_) fingerprint_ += " " + std::to_string(plane.width);
  max_source_blocks_ = static_cast<size_t>(num_blocks_) * static_cast<size_t>(block_size_);
  const size_t bytes = align16(planes_.size() * sizeof(KvCopyPlane)) + align16(max_source_blocks_ * sizeof(int32_t)) +
                       static_cast<size_t>(num_blocks_) * sizeof(int32_t);
  copy_host_ = cuda::PinnedBuffer(bytes);
  copy_device_ = cuda::DeviceBuffer(bytes);
}

CudaKvRowAccess::~CudaKvRowAccess() {
  for (const Mapping& m : mapped_) cudaIpcCloseMemHandle(m.base);
  if (copies_ != nullptr) cudaStreamDestroy(copies_);
}

std::string CudaKvRowAccess::reference_descriptor() const {
  cudaIpcMemHandle_t handle{};
  TACHYON_CUDA_CHECK(cudaIpcGetMemHandle(&handle, const_cast<std::byte*>(allocation_)));
  std::string out(reinterpret_cast<const char*>(&handle), sizeof(handle));
  put_value(out, static_cast<uint64_t>(num_blocks_));
  put_value(out, static_cast<uint64_t>(planes_.size()));
  for (const Plane& plane : planes_) put_value(out, static_cast<uint64_t>(plane.base - allocation_));
  return out;
}

// A source stays mapped for the next prompt it sends (a prefill server's cache lives as long as
// it does); a restarted source has a new handle. A mapping unused for a minute is closed: the
// mapping keeps the source's allocation alive, which a dead prefill server's would otherwise stay
// for as long as this server runs. Copies are synchronous, so no copy uses a closed mapping.
std::byte* CudaKvRowAccess::map_source(const std::string& handle) {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(mapped_, [&](const Mapping& m) {
    if (m.handle == handle || now - m.last_used < std::chrono::minutes(1)) return false;
    cudaIpcCloseMemHandle(m.base);
    return true;
  });
  for (Mapping& m : mapped_) {
    if (m.handle == handle) {
      m.last_used = now;
      return static_cast<std::byte*>(m.base);
    }
  }
  cudaIpcMemHandle_t ipc{};
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  void* base = nullptr;
  const cudaError_t status = cudaIpcOpenMemHandle(&base, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    throw Error(std::string("cannot map the prefill server's KV cache through CUDA IPC: ") + cudaGetErrorString(status));
  }
  mapped_.push_back({handle, base, now});
  return static_cast<std::byte*>(base);
}

int64_t CudaKvRowAccess::copy_by_reference(const std::string& descriptor, int64_t source_block_size,
                                           std::span<const int32_t> source_blocks, std::span<const int32_t> block_table,
                                           int64_t num_tokens) {
  check_span(block_table, num_tokens, static_cast<size_t>(num_tokens * values_per_token()));
  size_t offset = sizeof(cudaIpcMemHandle_t);
  TACHYON_CHECK(descriptor.size() >= offset) << "a KV cache descriptor ends early";
  const auto source_num_blocks = take<uint64_t>(descriptor, offset);
  const auto num_planes = take<uint64_t>(descriptor, offset);
  TACHYON_CHECK(num_planes == planes_.size()) << "the prefill server's KV cache has " << num_planes
                                              << " planes, this one " << planes_.size();
  TACHYON_CHECK(source_block_size > 0 && static_cast<int64_t>(source_blocks.size()) * source_block_size >= num_tokens &&
                source_blocks.size() <= max_source_blocks_)
      << source_blocks.size() << " source blocks of " << source_block_size << " cannot hold " << num_tokens << " tokens";
  for (int32_t block : source_blocks) {
    TACHYON_CHECK(block >= 0 && static_cast<uint64_t>(block) < source_num_blocks)
        << "source KV block " << block << " outside the prefill server's cache of " << source_num_blocks;
  }
  std::lock_guard lock(mutex_);
  const std::byte* source = map_source(descriptor.substr(0, sizeof(cudaIpcMemHandle_t)));
  auto* host = copy_host_.as<std::byte>();
  auto* planes = reinterpret_cast<KvCopyPlane*>(host);
  for (size_t p = 0; p < planes_.size(); ++p) {
    planes[p] = {source + take<uint64_t>(descriptor, offset), planes_[p].base,
                 planes_[p].width * static_cast<int64_t>(sizeof(uint16_t))};
  }
  const size_t source_at = align16(planes_.size() * sizeof(KvCopyPlane));
  const size_t dest_at = source_at + align16(max_source_blocks_ * sizeof(int32_t));
  const size_t dest_blocks = static_cast<size_t>((num_tokens + block_size_ - 1) / block_size_);
  std::memcpy(host + source_at, source_blocks.data(), source_blocks.size() * sizeof(int32_t));
  std::memcpy(host + dest_at, block_table.data(), dest_blocks * sizeof(int32_t));
  auto* device = copy_device_.as<std::byte>();
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(device, host, source_at, cudaMemcpyHostToDevice, compute_));
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(device + source_at, host + source_at, source_blocks.size() * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, compute_));
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(device + dest_at, host + dest_at, dest_blocks * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, compute_));
  kernels::cuda::copy_kv_rows(reinterpret_cast<const KvCopyPlane*>(device), planes, static_cast<int32_t>(planes_.size()),
                              reinterpret_cast<const int32_t*>(device + source_at), static_cast<int32_t>(source_block_size),
                              reinterpret_cast<const int32_t*>(device + dest_at), block_size_, num_tokens, compute_);
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(compute_));  // the source may unpin its blocks once this returns
  return num_tokens * values_per_token() * static_cast<int64_t>(sizeof(uint16_t));  // bf16
}

int64_t CudaKvRowAccess::values_per_token() const {
  int64_t total = 0;
  for (const Plane& plane : planes_) total += plane.width;
  return total;
}

std::vector<int64_t> CudaKvRowAccess::plane_widths() const {
  std::vector<int64_t> widths;
  for (const Plane& plane : planes_) widths.push_back(plane.width);
  return widths;
}

void CudaKvRowAccess::check_span(std::span<const int32_t> block_table, int64_t num_tokens, size_t values) const {
  TACHYON_CHECK(num_tokens >= 0 && static_cast<int64_t>(block_table.size()) * block_size_ >= num_tokens)
      << "a block table of " << block_table.size() << " blocks of " << block_size_ << " cannot hold " << num_tokens
      << " tokens";
  for (int32_t block : block_table) {
    TACHYON_CHECK(block >= 0 && block < num_blocks_) << "KV block " << block << " outside the cache";
  }
  TACHYON_CHECK(static_cast<int64_t>(values) == num_tokens * values_per_token())
      << "a KV row buffer of " << values << " values for " << num_tokens << " tokens of " << values_per_token();
}

uint16_t* CudaKvRowAccess::host_values(size_t num_values) const {
  const size_t bytes = num_values * sizeof(uint16_t);
  if (staging_.bytes() < bytes) staging_ = cuda::PinnedBuffer(std::max(bytes, 2 * staging_.bytes()));
  return staging_.as<uint16_t>();
}

// The contiguous copies of a span, in the row buffer's order ([plane][token][width]): each
// (plane, block) run of tokens is one.
std::vector<CudaKvRowAccess::Run> CudaKvRowAccess::runs(std::span<const int32_t> block_table,
                                                        int64_t num_tokens) const {
  std::vector<Run> out;
  size_t at = 0;
  for (const Plane& plane : planes_) {
    const size_t row_bytes = static_cast<size_t>(plane.width) * sizeof(uint16_t);
    for (int64_t first = 0; first < num_tokens; first += block_size_) {
      const int64_t rows = std::min<int64_t>(block_size_, num_tokens - first);
      const size_t slot = static_cast<size_t>(block_table[static_cast<size_t>(first / block_size_)]) * block_size_;
      out.push_back({plane.base + slot * row_bytes, at, static_cast<size_t>(rows) * row_bytes});
      at += static_cast<size_t>(rows * plane.width);
    }
  }
  return out;
}

// Staging holds the rows as the output does, in bf16; one pass widens them (exactly: a bf16
// value is the high half of its f32).
void CudaKvRowAccess::gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const {
  check_span(block_table, num_tokens, out.size());
  std::lock_guard lock(mutex_);
  uint16_t* host = host_values(out.size());
  for (const Run& run : runs(block_table, num_tokens)) {
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(host + run.values, run.device, run.bytes, cudaMemcpyDeviceToHost, copies_));
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(copies_));
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(host[i]);
}

// Rows gathered from a bf16 cache narrow back to their own bits.
void CudaKvRowAccess::scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) {
  check_span(block_table, num_tokens, rows.size());
  std::lock_guard lock(mutex_);
  uint16_t* host = host_values(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) host[i] = f32_to_bf16(rows[i]);
  for (const Run& run : runs(block_table, num_tokens)) {
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(run.device, host + run.values, run.bytes, cudaMemcpyHostToDevice, compute_));
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(compute_));  // the staging is reused; the next step reads the rows
}

}  // namespace tachyon::runner
