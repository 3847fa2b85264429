// How a prefill/decode server's KV moves (`--kv-transport`, docs/disaggregation.md):
//   auto  by reference through CUDA IPC when both caches sit on one GPU, else as rows over the
//         prefill server's TCP KV port (server/pd_transport.h);
//   tcp   always as rows over that port (no reference is offered or asked for);
//   ucx   by reference through UCX: the decode side reads the prefill side's host cache with
//         one-sided GETs (RDMA where the network has it; runner/ucx/ucx_kv_rows.h). Both servers
//         must say ucx: a pull whose fingerprint differs is answered with rows.
// The choice wraps the runner's KvRowAccess, so the engine and the transfer protocol stay as they
// are. Test: tests/unit/test_kv_by_reference.cpp.
#pragma once

#include <memory>
#include <string>

#include "tachyon/runner/model_runner.h"

namespace tachyon::app {

// Whether this build has UCX (Debian's libucx-dev was found when it was configured).
bool ucx_available();

// `runner`, its KV moving by `transport` ("auto", "tcp" or "ucx"). Throws Error for ucx when the
// build has no UCX or the runner's cache is not in host memory. A runner without KV rows is
// returned as it is.
std::unique_ptr<runner::ModelRunner> with_kv_transport(std::unique_ptr<runner::ModelRunner> runner,
                                                       const std::string& transport);

}  // namespace tachyon::app
