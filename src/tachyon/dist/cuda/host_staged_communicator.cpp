// The host-staged collectives: copy to host (stream-ordered, then waited for), the CPU backend's
// collective, copy back, wait again (so the host copies may go). See the header.
#include "tachyon/dist/cuda/host_staged_communicator.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/tensor/cuda/cuda_check.h"
#include "tachyon/tensor/cuda/device_guard.h"

namespace tachyon::dist {
namespace {

using Bytes = std::vector<std::byte>;

// A captured stream cannot be synchronized, and every call below synchronizes it.
void refuse_capture(void* stream, const char* op) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TACHYON_CUDA_CHECK(cudaStreamIsCapturing(cuda::as_stream(stream), &capture));
  TACHYON_CHECK(capture == cudaStreamCaptureStatusNone)
      << "the host-staged communicator's " << op << " was called on a stream being captured into a CUDA graph: "
      << "ranks that share a GPU wait for each other on the host, so they run eagerly (enforce_eager)";
}

// The copies are ordered on the rank's stream, after the work that wrote the bytes sent, and
// each waits for its own completion, so the host collective reads finished bytes.
Bytes to_host(const void* device, size_t bytes, void* stream) {
  Bytes host(bytes);
  if (bytes > 0) {
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, bytes, cudaMemcpyDefault, cuda::as_stream(stream)));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(cuda::as_stream(stream)));
  }
  return host;
}

void to_device(void* device, const Bytes& host, void* stream) {
  if (host.empty()) return;
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), host.size(), cudaMemcpyDefault, cuda::as_stream(stream)));
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(cuda::as_stream(stream)));
}

size_t sum(std::span<const size_t> counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(CpuWorld& world, int rank) : host_(world, rank) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }

  void all_reduce(const void* send, void* recv, size_t count, ReduceType type, void* stream) override {
    refuse_capture(stream, "all_reduce");
    const size_t bytes = count * reduce_type_size(type);
    const Bytes in = to_host(send, bytes, stream);
    Bytes out(bytes);
    host_.all_reduce(in.data(), out.data(), count, type, nullptr);
    to_device(recv, out, stream);
  }

  void all_gather(const void* send, void* recv, size_t bytes, void* stream) override {
    refuse_capture(stream, "all_gather");
    const Bytes in = to_host(send, bytes, stream);
    Bytes out(bytes * static_cast<size_t>(size()));
    host_.all_gather(in.data(), out.data(), bytes, nullptr);
    to_device(recv, out, stream);
  }

  void reduce_scatter(const void* send, void* recv, size_t count, ReduceType type, void* stream) override {
    refuse_capture(stream, "reduce_scatter");
    const size_t bytes = count * reduce_type_size(type);
    const Bytes in = to_host(send, bytes * static_cast<size_t>(size()), stream);
    Bytes out(bytes);
    host_.reduce_scatter(in.data(), out.data(), count, type, nullptr);
    to_device(recv, out, stream);
  }

  void broadcast(void* data, size_t bytes, int root, void* stream) override {
    refuse_capture(stream, "broadcast");
    Bytes host = rank() == root ? to_host(data, bytes, stream) : Bytes(bytes);
    host_.broadcast(host.data(), bytes, root, nullptr);
    if (rank() != root) to_device(data, host, stream);
  }

  void all_gatherv(std::span<const GatherItem> items, void* stream) override {
    refuse_capture(stream, "all_gatherv");
    std::vector<Bytes> ins, outs;
    std::vector<GatherItem> host_items;
    ins.reserve(items.size());
    outs.reserve(items.size());
    for (const GatherItem& item : items) {
      ins.push_back(to_host(item.send, item.send_bytes, stream));
      outs.emplace_back(sum(item.recv_counts));
      host_items.push_back({ins.back().data(), item.send_bytes, outs.back().data(), item.recv_counts});
    }
    host_.all_gatherv(host_items, nullptr);
    for (size_t i = 0; i < items.size(); ++i) to_device(items[i].recv, outs[i], stream);
  }

  void all_to_all_v(std::span<const AllToAllItem> items, void* stream) override {
    refuse_capture(stream, "all_to_all_v");
    std::vector<Bytes> ins, outs;
    std::vector<AllToAllItem> host_items;
    ins.reserve(items.size());
    outs.reserve(items.size());
    for (const AllToAllItem& item : items) {
      ins.push_back(to_host(item.send, sum(item.send_counts), stream));
      outs.emplace_back(sum(item.recv_counts));
      host_items.push_back({ins.back().data(), item.send_counts, outs.back().data(), item.recv_counts});
    }
    host_.all_to_all_v(host_items, nullptr);
    for (size_t i = 0; i < items.size(); ++i) to_device(items[i].recv, outs[i], stream);
  }

  void send(const void* data, size_t bytes, int peer, void* stream) override {
    refuse_capture(stream, "send");
    const Bytes host = to_host(data, bytes, stream);
    host_.send(host.data(), bytes, peer, nullptr);
  }

  void recv(void* data, size_t bytes, int peer, void* stream) override {
    refuse_capture(stream, "recv");
    Bytes host(bytes);
    host_.recv(host.data(), bytes, peer, nullptr);
    to_device(data, host, stream);
  }

  void send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data, size_t recv_bytes, int src,
                 void* stream) override {
    refuse_capture(stream, "send_recv");
    const Bytes out = to_host(send_data, send_bytes, stream);
    Bytes in(recv_bytes);
    host_.send_recv(out.data(), send_bytes, dst, in.data(), recv_bytes, src, nullptr);
    to_device(recv_data, in, stream);
  }

  void barrier() override { host_.barrier(); }

 private:
  CpuCommunicator host_;
};

}  // namespace

std::unique_ptr<Communicator> HostStagedGroup::join(int rank) {
  return std::make_unique<HostStagedCommunicator>(world_, rank);
}

}  // namespace tachyon::dist
