// The router's bounds on glibc's allocator: one arena and no per-thread cache of freed chunks.
// Why: the router runs a few workers and I/O threads, a thread per exchange (server/http/
// pd_router.h) and one per upstream call, and
// glibc keeps memory per thread. Its tcache holds up to 7 freed chunks of each of 64 small sizes in
// every thread, and a chunk freed on another thread than the one that allocated it (a request
// read on an I/O thread and freed on a worker, an upstream answer read on its call's thread) lands
// in the freeing thread's cache. The workers' caches (64 when this was measured) fill slowly with every size the router
// uses: with one arena, the heap in use grew from 0.91 to 1.35 MiB over 4,000 requests after a
// warm-up (RSS +12.9% over the 20K soak); with the caches off it stays at 0.48 MiB
// (docs/disaggregation.md). Its arenas (up to
// 8 per core by default) would hold freed memory per thread group the same way. The router's
// allocations are few and small per request, so one arena and no cache cost it nothing measurable.
// glibc reads the tcache bound only at start (GLIBC_TUNABLES), so the router re-executes itself
// once with it set; a GLIBC_TUNABLES that already names tcache_count is the caller's and is kept.
// Test: tests/server/pd_router_allocator.py; the effect: tests/server/pd_soak.py.
#pragma once

namespace tachyon::cli {

// Call first thing in `tachyon router`: may replace the process (same pid, same arguments).
// Returns only when the bounds hold, or when re-executing failed (then it says so on stderr).
void bound_router_allocator();

}  // namespace tachyon::cli
