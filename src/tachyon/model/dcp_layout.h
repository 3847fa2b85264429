// Decode context parallelism's options (--decode-context-parallel-size N,
// --dcp-kv-cache-interleave-size I) and its token map, kernels::DcpLayout (kernels/dcp_layout.h:
// which rank holds which token, and why a rank's cache is an ordinary paged cache of block size
// B / N under the engine's block table), named here for the model and runner code that uses it.
#pragma once

#include "tachyon/kernels/dcp_layout.h"

namespace tachyon::model {

// What --decode-context-parallel-size and --dcp-kv-cache-interleave-size ask for.
struct DcpOptions {
  int size = 1;        // ranks of one DCP group; 1: no DCP
  int interleave = 1;  // consecutive tokens per rank before the next rank's
};

using DcpLayout = kernels::DcpLayout;

}  // namespace tachyon::model
