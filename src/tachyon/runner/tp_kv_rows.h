// The KvRowAccess (runner/model_runner.h) of one tensor-parallel group of CPU ranks, chosen by
// what each rank caches: whole latent rows (replicated_kv_rows.h), its K/V heads
// (sharded_kv_rows.h), or under decode context parallelism its tokens' rows (dcp_kv_rows.h); a
// group of one rank without DCP is its cache's own rows (kv_export.h). A
// transfer then moves the rows one rank of the whole model caches, whatever the layout. Used by
// TpCpuModelRunner (its one group) and DpCpuModelRunner (each replica's group, behind a
// PooledKvRowAccess). Tests: tests/unit/test_sharded_kv_rows.cpp, test_dcp_kv_rows.cpp,
// tests/server/pd_tensor_parallel.py.
#pragma once

#include <memory>
#include <vector>

#include "tachyon/model/dcp_layout.h"
#include "tachyon/model/model_config.h"
#include "tachyon/runner/kv_export.h"

namespace tachyon::runner {

// caches[r]: the cache of rank r of a group of caches.size() ranks over the model `full`.
std::unique_ptr<KvRowAccess> make_tp_kv_rows(const std::vector<PagedKvCache*>& caches, const model::ModelConfig& full,
                                             model::DcpOptions dcp = {});

}  // namespace tachyon::runner
