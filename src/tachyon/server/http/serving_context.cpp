#include "tachyon/server/http/serving_context.h"

#include <algorithm>

#include "tachyon/base/check.h"
#include "tachyon/base/heap_trim.h"
#include "tachyon/base/file_util.h"
#include "tachyon/app/runner_factory.h"
#include "tachyon/app/kv_transport.h"
#include "tachyon/server/chat_prompt.h"
#include "tachyon/server/http/task_slots.h"
#include "tachyon/server/pd_metrics.h"
#include "tachyon/server/responses_store.h"
#include "tachyon/server/pd_transport.h"

namespace tachyon::server {

ServingContext::ServingContext(const ServingOptions& options) {
  TACHYON_CHECK(std::filesystem::exists(options.model_dir / "tokenizer.json"))
      << options.model_dir.string() << " has no tokenizer.json; the server needs one";
  tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(options.model_dir));
  chat_template_ = model_chat_template(*tokenizer_, options.model_dir);
  chat_parsers_ = resolve_chat_parsers(options.tool_call_parser, options.reasoning_parser, *tokenizer_,
                                       chat_template_ ? chat_template_->source() : "");
  pooling_ = resolve_pooling_config(options.model_dir, options.pooling, options.normalize_embeddings);
  core::EngineConfig engine_config = options.engine;
  app::LoadedRunner loaded = app::load_runner(options.model_dir, engine_config);
  const model::ModelConfig& model_config = loaded.model_config;
  final_hidden_states_ = std::move(loaded.final_hidden_states);
  hidden_size_ = model_config.hidden_size;
  if (!final_hidden_states_) {
    no_hidden_states_reason_ = engine_config.device.kind == "cuda"
                                   ? "the CUDA runner does not return hidden states"
                                   : "the runner of CPU thread ranks (--tp, --dp, --pcp) does not return hidden states";
  }
  if (!engine_config.scheduler.eos_token_id) {
    if (model_config.eos_token_id) {
      engine_config.scheduler.eos_token_id = static_cast<int32_t>(*model_config.eos_token_id);
    } else if (tokenizer_->eos_id()) {
      engine_config.scheduler.eos_token_id = *tokenizer_->eos_id();
    }
  }
  eos_token_id_ = engine_config.scheduler.eos_token_id;
  limits_.model_name = options.served_model_name.empty() ? std::filesystem::path(options.model_dir).filename().string()
                                                         : options.served_model_name;
  limits_.max_model_len = engine_config.scheduler.max_model_len;
  limits_.vocab_size = model_config.vocab_size;
  limits_.max_n = options.max_n;
  limits_.max_stop = options.max_stop;
  limits_.max_logprobs = options.max_logprobs;
  limits_.max_sequences_per_request = options.max_sequences_per_request;
  // Structured outputs: the vocabulary's byte trie, built once here, so no request pays for it.
  limits_.grammar_compiler = std::make_shared<structured::GrammarCompiler>(
      structured::TokenVocabulary::from_tokenizer(*tokenizer_, model_config.vocab_size));
  if (!options.role.empty()) {
    // Refused at start-up rather than on the first request: a role server exists to move KV.
    TACHYON_CHECK(loaded.runner->kv_rows() != nullptr)
        << "--role " << options.role << ": this runner cannot move its KV cache";
    loaded.runner = app::with_kv_transport(std::move(loaded.runner), options.kv_transport);
  }
  engine_ = std::make_unique<engine::EngineCore>(engine_config, std::move(loaded.runner), std::move(loaded.drafter));
  metrics_ = std::make_unique<ServerMetrics>(limits_.model_name);
  const int64_t per_client = options.max_sequences_per_client != 0
                                 ? options.max_sequences_per_client
                                 : std::max<int64_t>(1, engine_config.max_queued_requests / 2);
  client_quota_ = std::make_unique<ClientQuota>(per_client);
  created_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  engine_->set_step_observer([metrics = metrics_.get()](int64_t tokens) { metrics->observe_tokens_per_step(static_cast<double>(tokens)); });
  // An idle server gives the memory its last burst freed back to the system (base/heap_trim.h).
  engine_->set_loop_observer([trim = &heap_trim_](bool worked) { worked ? trim->busy() : static_cast<void>(trim->idle()); });
  role_ = options.role;
  if (role_.empty() && options.responses_store_bytes > 0) {
    responses_store_ = std::make_unique<ResponsesStore>(options.responses_store_bytes);
  }
  if (!role_.empty()) {
    pd_metrics_ = std::make_unique<PdMetrics>(role_);
    metrics_->set_role_series([this](std::string& out) {
      pd_metrics_->render(out, engine_->kv_lease_stats(), kv_transfer_ ? kv_transfer_->pull_stats() : KvPullStats{},
                          engine_->stats());
    });
  }
  if (role_ == "prefill") {
    engine::EngineCore* engine = engine_.get();
    engine->set_kv_lease_timeout(std::chrono::milliseconds(static_cast<int64_t>(options.kv_lease_timeout_s * 1000)));
    engine->set_kv_lease_max_blocks(
        std::max<int64_t>(1, static_cast<int64_t>(options.kv_lease_max_share * engine->stats().kv_blocks_total)));
    kv_transfer_ = std::make_unique<KvTransferServer>(
        options.kv_transfer_host, options.kv_transfer_port,
        [engine](engine::KvLeaseKey key, size_t from, bool claim) { return engine->read_kv_stream(key, from, claim); },
        [engine](engine::KvLeaseKey key) { engine->release_kv(key); }, std::chrono::seconds(5),
        // A stream's rows are freed on the KV port's thread, after the engine went idle and
        // trimmed: mark the heap busy so that the engine's next idle check trims them too.
        [pd = pd_metrics_.get(), trim = &heap_trim_](int64_t bytes, double seconds) {
          pd->on_transfer(bytes, seconds);
          trim->busy();
        },
        options.kv_transfer_max_pulls,
        by_reference_source(*engine, std::chrono::milliseconds(static_cast<int64_t>(options.kv_lease_timeout_s * 1000))));
    kv_transfer_->inject_fault(kv_transport_fault_from_env());
    engine->set_kv_stream_listener([transfer = kv_transfer_.get()] { transfer->wake(); });  // rows go out as staged
  }
  if (role_ == "decode") kv_pulls_ = std::make_unique<TaskSlots>(options.kv_pull_max_waiting);
  engine_->start();
}

ServingContext::~ServingContext() {
  stop_kv_pulls();  // a pull's thread answers through the engine
  engine_->set_kv_stream_listener(nullptr);  // the engine runs on, without waking the transport
  kv_transfer_.reset();
  engine_->stop();
}

void ServingContext::refuse_if_unavailable() {
  if (std::optional<std::string> failure = engine_->failure()) {
    throw ApiException({503, *failure + "; this server takes no more requests", "service_unavailable", "", "engine_failed"});
  }
  if (draining_) throw ApiException({503, "the server is shutting down", "service_unavailable", "", ""});
}

void ServingContext::stop_kv_pulls() {
  if (kv_pulls_ == nullptr) return;
  kv_pulls_->close();
  kv_pulls_->wait_all();
}

int ServingContext::kv_transfer_port() const { return kv_transfer_ != nullptr ? kv_transfer_->port() : 0; }

}  // namespace tachyon::server
