// UcxKvRowAccess: KV by reference across nodes (`--kv-transport ucx`). A prefill server's cache
// in host memory (the CPU runner's) is registered with UCX; its descriptor carries the worker's
// address and each plane's address, slot count and remote key. The decode server reads the
// prompt's rows straight out of it into its own blocks with one-sided GETs (runner/ucx/ucx_rma.h),
// one per run of tokens that is contiguous on both sides, so the two caches may page differently.
// The rest of the protocol is by-reference's (server/pd_transport.h): the source pins the blocks
// until the decode side's word, and an unconfirmed copy is never used.
// The fingerprint names the transport, the dtype (f32) and the planes' widths, and nothing about
// the host: any node that can reach the source's worker may read. Debian's UCX has no CUDA
// memory support, so a GPU cache (no host planes) is refused by name.
// Test: tests/unit/test_ucx_kv_rows.cpp, tests/unit/test_kv_by_reference.cpp (its ucx cases),
// tests/server/pd_equivalence.py (server.pd_equivalence_ucx).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/ucx/ucx_rma.h"

namespace tachyon::runner::ucx {

class UcxKvRowAccess : public ForwardingKvRowAccess {
 public:
  // Rows and the layout come from `host_cache`, which outlives this. Throws Error when its cache
  // is not in host memory, or UCX cannot start.
  explicit UcxKvRowAccess(KvRowAccess& host_cache);
  std::string reference_fingerprint() const override { return fingerprint_; }
  // Registers the cache with UCX on the first call (a decode server never registers its own).
  std::string reference_descriptor() const override;
  int64_t copy_by_reference(const std::string& descriptor, int64_t source_block_size,
                            std::span<const int32_t> source_blocks, std::span<const int32_t> block_table,
                            int64_t num_tokens) override;

 private:
  HostLayout layout_;
  std::string fingerprint_;
  mutable std::mutex mutex_;  // the descriptor, made once
  mutable std::string descriptor_;
  mutable UcxRma rma_;
};

}  // namespace tachyon::runner::ucx
