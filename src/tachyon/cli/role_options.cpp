#include "tachyon/cli/role_options.h"

#include "tachyon/base/check.h"
#include "tachyon/app/kv_transport.h"

namespace tachyon::cli {

void add_role_options(CLI::App& cmd, server::ServingOptions& serving) {
  cmd.add_option("--role", serving.role,
                 "prefill/decode disaggregation: 'prefill' runs prompts and lends their KV, 'decode' takes it "
                 "(use with `tachyon router`; CPU, or one GPU per server with a bf16 KV cache)")
      ->check(CLI::IsMember({"prefill", "decode"}));
  cmd.add_option("--kv-transfer-port", serving.kv_transfer_port,
                 "prefill role: the TCP port decode servers pull KV from (0: any free port)")
      ->default_val(0);
  cmd.add_option("--kv-transfer-max-pulls", serving.kv_transfer_max_pulls,
                 "prefill role: KV pulls answered at once; a pull beyond it is refused and the decode server "
                 "computes that prompt itself")
      ->default_val(16)
      ->check(CLI::Range(1, 4096));
  cmd.add_option("--kv-pull-max-waiting", serving.kv_pull_max_waiting,
                 "decode role: requests that may wait at once for their prompt's KV from a prefill server (each on "
                 "a thread of its own, not an HTTP worker); more get 503 with Retry-After")
      ->default_val(256)
      ->check(CLI::Range(1, 65536));
  cmd.add_option("--kv-lease-max-share", serving.kv_lease_max_share,
                 "prefill role: the share of the KV cache that KV waiting to be pulled may hold; past it prefills "
                 "get 503 with Retry-After")
      ->default_val(0.5)
      ->check(CLI::Range(0.01, 1.0));
  cmd.add_option("--kv-transport", serving.kv_transport,
                 "both roles: how the KV moves: 'auto' by reference through CUDA IPC when both servers share a GPU, "
                 "else as rows over the prefill server's TCP KV port; 'tcp' always as rows; 'ucx' by reference "
                 "through UCX (one-sided reads of the prefill server's host cache, RDMA where the network has it; "
                 "CPU servers, both set to ucx)")
      ->default_val("auto")
      ->check(CLI::IsMember({"auto", "tcp", "ucx"}));
  cmd.add_option("--kv-lease-timeout", serving.kv_lease_timeout_s,
                 "prefill role: seconds a prompt's KV waits to be pulled before it is freed")
      ->default_val(30.0)
      ->check(CLI::Range(0.1, 3600.0));
}

void check_role_options(const server::ServingOptions& serving) {
  TACHYON_CHECK(serving.kv_transport == "auto" || !serving.role.empty())
      << "--kv-transport " << serving.kv_transport << " needs --role prefill or decode";
  if (serving.role.empty()) return;
  const core::EngineConfig& engine = serving.engine;
  // UCX reads host memory here (Debian's UCX has no CUDA support), and rows over TCP on the GPU
  // ran only between engines (tests/gpu/test_cuda_kv_transfer.cpp), not between servers.
  TACHYON_CHECK(engine.device.kind == "cpu" || serving.kv_transport == "auto")
      << "--kv-transport " << serving.kv_transport << " on cuda is untested (ucx reads host memory only); use auto";
  TACHYON_CHECK(serving.kv_transport != "ucx" || app::ucx_available())
      << "--kv-transport ucx: this build has no UCX (install Debian's libucx-dev and build again)";
  TACHYON_CHECK(engine.device.kind == "cpu" || engine.device.kind == "cuda")
      << "--role needs --device cpu or cuda (got " << engine.device.kind << "): say which";
  // On the GPU the KV moves as bf16 rows (by reference through CUDA IPC on one GPU, else over
  // TCP); the GPU machine's PD suite verified that (scripts/gpu-test.sh), not an FP8 cache.
  TACHYON_CHECK(engine.device.kind == "cpu" || engine.device.kv_cache_dtype == DType::kBF16)
      << "--role on cuda needs a bf16 KV cache (--kv-cache-dtype fp8 is not transferred)";
  // Drafts belong to decoding: a decode server verifies n-gram and draft-model drafts over
  // imported prompts, on the CPU and on one GPU (tests/server/pd_speculative.py, run on the GPU by
  // scripts/gpu-test.sh). MTP modules read the prompt's hidden states, so on the CPU a prefill
  // server given --speculative-method mtp runs its modules over each prompt and their rows move
  // with the KV (engine/drafter.h, tests/server/pd_mtp.py); the GPU runner drafts with its module
  // inside itself (runner/cuda/cuda_mtp_drafter.h), whose rows no transfer carries yet.
  if (engine.speculative.enabled()) {
    const std::string& method = engine.speculative.method;
    TACHYON_CHECK(serving.role == "decode" || method == "mtp")
        << "--role " << serving.role << " with --speculative-method " << method
        << ": drafts belong to decoding; give them to the --role decode server (a prefill server takes mtp "
           "only: its modules' rows of the prompt move to the decode server)";
    TACHYON_CHECK(engine.device.kind == "cpu" || (serving.role == "decode" && method != "mtp"))
        << "--role " << serving.role << " with --speculative-method " << method
        << " on cuda is not verified by any test yet (n-gram and draft-model drafts on a decode server are; MTP "
           "across the roles runs on the CPU)";
  }
  // Tensor-parallel CPU ranks move their KV as one rank's rows: a latent-attention model's ranks
  // each hold them whole (runner/replicated_kv_rows.h), a dense model's their K/V heads
  // (runner/sharded_kv_rows.h), ranks under --dcp their tokens' rows (runner/dcp_kv_rows.h), and
  // --dp replicas their own sequences' (runner/pooled_kv_rows.h), --pcp groups every token each
  // (runner/replicated_kv_rows.h); expert parallelism and two-batch overlap change no cache;
  // tests/server/pd_tensor_parallel.py. GPU ranks and several nodes have no PD test.
  TACHYON_CHECK(engine.device.nnodes == 1 &&
                (engine.device.tensor_parallel_size == 1 || engine.device.kind == "cpu"))
      << "--role with tensor parallelism runs on CPU thread ranks of one node only (untested elsewhere)";
  TACHYON_CHECK(engine.device.tensor_parallel_size == 1 || serving.kv_transport != "ucx")
      << "--role with --tp and --kv-transport ucx is untested (the ranks' rows move over TCP: auto)";
  // Asynchronous scheduling and online FP8 weights (with an FP8 KV cache too on the CPU):
  // tests/server/pd_options.py, on the CPU and on the GPU (scripts/gpu-test.sh), where the KV
  // stays bf16 (above).
  TACHYON_CHECK(engine.device.kind == "cpu" || engine.device.quantization.empty() ||
                engine.device.quantization == "fp8")
      << "--role on cuda with --quantization " << engine.device.quantization << " is untested (fp8 is)";
}

}  // namespace tachyon::cli
