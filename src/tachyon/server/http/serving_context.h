// ServingContext: everything a served model needs, built once at start-up and shared by the
// HTTP threads: the model and its engine (on its own thread), tokenizer, chat template, limits,
// metrics and the per-client share of the engine. Immutable after construction except the
// engine (thread-safe by design), the
// metrics (atomics) and the lifecycle flags.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tachyon/base/heap_trim.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/server/chat_output.h"
#include "tachyon/server/http/client_quota.h"
#include "tachyon/server/metrics.h"
#include "tachyon/server/openai_protocol.h"
#include "tachyon/server/pooling_config.h"
#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server {

class KvTransferServer;  // server/pd_transport.h
class PdMetrics;         // server/pd_metrics.h
class TaskSlots;         // http/task_slots.h
class ResponsesStore;    // server/responses_store.h

struct ServingOptions {
  std::filesystem::path model_dir;
  std::string served_model_name;  // default: the directory's name
  core::EngineConfig engine;
  int32_t max_n = 16;
  int32_t max_stop = 16;
  int32_t max_logprobs = 20;
  int32_t max_sequences_per_request = 256;  // prompts x n of one request; more: 400
  // Sequences (prompts x n) one client address may have in flight; more: 429. 0: half the
  // engine's waiting queue (max_queued_requests / 2); negative: no limit.
  int64_t max_sequences_per_client = 0;
  // Output parsers of chat answers: "auto" (from the chat template), "none", or a name
  // (tool_parser_names(), reasoning_parser_names()); an unknown name refuses to start.
  std::string tool_call_parser = "auto";
  std::string reasoning_parser = "auto";
  // /v1/embeddings for a directory without a sentence-transformers pooling config: --pooling
  // ("" none; last, mean, cls) and --normalize-embeddings (server/pooling_config.h).
  std::string pooling;
  bool normalize_embeddings = false;
  // Prefill/decode disaggregation (http/pd_roles.h): "" (a whole server), "prefill" or "decode".
  // A prefill server answers KV pulls on kv_transfer_host:kv_transfer_port (0: any free port).
  std::string role;
  std::string kv_transfer_host = "127.0.0.1";
  int kv_transfer_port = 0;
  int kv_transfer_max_pulls = 16;  // pulls answered at once; more are refused (server/pd_transport.h)
  // Prefill role: the share of the KV cache that leases (and prompts running for one) may hold,
  // past which prefills get 503; and how long a lease waits to be pulled.
  double kv_lease_max_share = 0.5;
  double kv_lease_timeout_s = 30.0;
  // Decode role: requests that may wait at once for their prompt's KV, each on a thread of its
  // own (http/pd_roles.h); more get 503 with Retry-After.
  int kv_pull_max_waiting = 256;
  // Both roles: how the KV moves (auto, tcp or ucx; app/kv_transport.h).
  std::string kv_transport = "auto";
  // The Responses API's kept responses (server/responses_store.h), at most this many bytes of
  // JSON; 0 keeps none. A server with a role keeps none (its prefill server could not read them).
  size_t responses_store_bytes = size_t{64} << 20;
};



class ServingContext {
 public:
  explicit ServingContext(const ServingOptions& options);
  ~ServingContext();

  const ServerLimits& limits() const { return limits_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const tokenizer::ChatTemplate* chat_template() const { return chat_template_.get(); }
  engine::EngineCore& engine() { return *engine_; }
  ServerMetrics& metrics() { return *metrics_; }
  ClientQuota& client_quota() { return *client_quota_; }
  // Null when responses are not kept (responses_store_bytes 0, or a role).
  ResponsesStore* responses_store() { return responses_store_.get(); }
  int64_t created() const { return created_; }
  const ChatParsers& chat_parsers() const { return chat_parsers_; }
  // The model directory's sentence-transformers pooling config (server/pooling_config.h), if any.
  const std::optional<PoolingConfig>& pooling() const { return pooling_; }
  // Every token's final hidden state of one input, [tokens, hidden_size()], computed beside the
  // engine's steps with no KV block (app::LoadedRunner); empty where the runner gives none, and
  // no_hidden_states_reason() says why.
  const std::function<std::vector<float>(std::span<const int32_t>)>& final_hidden_states() const {
    return final_hidden_states_;
  }
  int64_t hidden_size() const { return hidden_size_; }
  const std::string& no_hidden_states_reason() const { return no_hidden_states_reason_; }
  // The token that ends an answer (from config.json or the tokenizer); none when unknown.
  std::optional<int32_t> eos_token_id() const { return eos_token_id_; }

  const std::string& role() const { return role_; }
  int kv_transfer_port() const;  // the prefill role's bound KV port; 0 otherwise
  PdMetrics* pd_metrics() { return pd_metrics_.get(); }  // null without a role
  TaskSlots* kv_pulls() { return kv_pulls_.get(); }       // the decode role's KV pulls; null otherwise
  // Cancels every KV pull (each ends within 100 ms) and waits for them; no new ones start.
  void stop_kv_pulls();

  // Lifecycle: serving until draining starts (SIGTERM); then new requests get 503.
  bool draining() const { return draining_; }
  void start_draining() { draining_ = true; }
  // Throws ApiException 503 "service_unavailable" when new requests are refused: the engine failed
  // (its reason, code "engine_failed"; engine/engine_failure.h), or the server drains.
  void refuse_if_unavailable();

 private:
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> chat_template_;
  IdleHeapTrim heap_trim_;  // before engine_: the engine thread uses it until the engine stops
  std::unique_ptr<engine::EngineCore> engine_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<ClientQuota> client_quota_;
  std::unique_ptr<ResponsesStore> responses_store_;
  ServerLimits limits_;
  ChatParsers chat_parsers_;
  std::optional<PoolingConfig> pooling_;
  std::function<std::vector<float>(std::span<const int32_t>)> final_hidden_states_;
  int64_t hidden_size_ = 0;
  std::string no_hidden_states_reason_;
  std::optional<int32_t> eos_token_id_;
  int64_t created_ = 0;
  std::atomic<bool> draining_{false};
  std::string role_;
  std::unique_ptr<PdMetrics> pd_metrics_;          // with a role
  std::unique_ptr<KvTransferServer> kv_transfer_;  // prefill role only; stops before the engine
  std::unique_ptr<TaskSlots> kv_pulls_;            // decode role only; stops before the engine
};

}  // namespace tachyon::server
