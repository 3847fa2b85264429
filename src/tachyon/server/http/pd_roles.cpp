#include "tachyon/server/http/pd_roles.h"

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "tachyon/engine/engine_failure.h"
#include "tachyon/server/pd_metrics.h"
#include "tachyon/server/http/task_slots.h"
#include "tachyon/server/pd_transport.h"

namespace tachyon::server {
namespace {

// Why disaggregation does not carry this request, or "" when it does.
std::string not_transferable(const Generation& g) {
  if (g.prompts.size() != 1) return "several prompts";
  if (g.params.n != 1) return "n > 1";
  if (g.params.logprobs >= 0) return "logprobs";
  if (g.params.structured != nullptr) return "structured outputs";
  return "";
}

// Queues one prompt prefill-only and answers with its lease's name at once, so that the decode
// server pulls the rows while the prompt runs (server/pd_transport.h streams them as they are
// written). The output channel must outlive the answer (a channel that goes away aborts its
// request): it holds itself until the prompt's one token, or its abort, arrives.
void submit_prefill_answer(ServingContext& context, const Generation& g, HttpResponse& res) {
  auto self = std::make_shared<std::shared_ptr<engine::OutputChannel>>();
  *self = std::make_shared<engine::OutputChannel>([self](engine::RequestOutput&& out) {
    if (out.finished) self->reset();  // the engine holds the channel for the length of this call
  });
  int64_t request_id = 0;
  try {
    request_id = context.engine().submit_prefill(g.prompts[0], g.params, *self);
  } catch (const engine::QueueFullError& e) {
    self->reset();
    throw ApiException({503, e.what(), "service_unavailable", "", ""});
  } catch (const engine::KvLeasesFullError& e) {
    self->reset();
    throw ApiException({503, e.what(), "service_unavailable", "", ""});
  } catch (const engine::EngineFailedError& e) {  // failed since refuse_if_unavailable() looked
    self->reset();
    throw ApiException({503, std::string(e.what()) + "; this server takes no more requests", "service_unavailable", "",
                        "engine_failed"});
  } catch (const Error& e) {
    self->reset();
    throw ApiException({400, e.what(), "invalid_request_error", "", ""});
  }
  nlohmann::json answer;
  answer["kv_transfer"] = {{"port", context.kv_transfer_port()},
                           {"epoch", std::to_string(context.engine().kv_epoch())},
                           {"request_id", request_id}};
  res.body = answer.dump();
}

// "host:port:epoch:request_id" (the host may be a name or an IPv4 address).
bool parse_source(const std::string& value, std::string& host, int& port, engine::KvLeaseKey& key) {
  const size_t c3 = value.rfind(':');
  const size_t c2 = c3 == std::string::npos || c3 == 0 ? std::string::npos : value.rfind(':', c3 - 1);
  const size_t c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : value.rfind(':', c2 - 1);
  if (c1 == std::string::npos) return false;
  try {
    host = value.substr(0, c1);
    port = std::stoi(value.substr(c1 + 1, c2 - c1 - 1));
    key.epoch = std::stoull(value.substr(c2 + 1, c3 - c2 - 1));
    key.request_id = std::stoll(value.substr(c3 + 1));
  } catch (const std::exception&) {
    return false;
  }
  return !host.empty() && port > 0;
}

// The rows `source` names for the prompt of `g`, or null when the pull failed (the reason goes to
// the log; the prompt is computed here). Waits as long as the pull does: on a pull's thread.
ImportedRows fetch_imported(ServingContext& context, const std::string& source, const Generation& g,
                            const std::atomic<bool>& cancel) {
  std::string host;
  int port = 0;
  engine::KvLeaseKey key;
  PdMetrics* metrics = context.pd_metrics();
  if (!parse_source(source, host, port, key)) {
    std::fprintf(stderr, "[tachyon] decode: ignoring a malformed %s header; computing the prompt here\n", kKvSourceHeader);
    if (metrics != nullptr) metrics->on_recompute(RecomputeReason::kMalformedSource);
    return nullptr;
  }
  RecomputeReason reason = RecomputeReason::kPullFailed;
  try {
    const auto start = std::chrono::steady_clock::now();
    // Five seconds without a frame (the prefill server sends a heartbeat while its prompt runs) or
    // two minutes in all: the prompt is computed here instead.
    auto payload = std::make_shared<engine::KvPayload>(
        fetch_kv(host, port, key, std::chrono::seconds(5), std::chrono::minutes(2), &cancel,
                 context.engine().kv_reference_fingerprint()));
    if (metrics != nullptr) {
      metrics->on_transfer(kv_payload_bytes(*payload),
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (payload->prompt != g.prompts[0]) {
      reason = RecomputeReason::kOtherPrompt;
      throw engine::KvTransferError("the rows are of another prompt (" + std::to_string(payload->prompt.size()) +
                                    " tokens, this request has " + std::to_string(g.prompts[0].size()) + ")");
    }
    return payload;
  } catch (const engine::KvTransferError& e) {
    if (metrics != nullptr) metrics->on_recompute(reason);
    std::fprintf(stderr, "[tachyon] decode: KV transfer from %s failed, computing the prompt here: %s\n", source.c_str(),
                 e.what());
    return nullptr;
  }
}

}  // namespace

void answer_prefix_hashes(ServingContext& context, HttpResponse& res) {
  std::string hashes = "[";
  char hex[40];
  for (const engine::BlockHash& h : context.engine().published_prefix_hashes()) {
    std::snprintf(hex, sizeof(hex), "\"%016llx%016llx\",", static_cast<unsigned long long>(h.high),
                  static_cast<unsigned long long>(h.low));
    hashes += hex;
  }
  if (hashes.size() > 1) hashes.pop_back();
  hashes += "]";
  res.content_type = "application/json";
  res.body = "{\"block_size\":" + std::to_string(context.engine().block_size()) + ",\"hashes\":" + hashes + "}";
}

void answer_prefill(ServingContext& context, const Generation& g, HttpResponse& res) {
  res.content_type = "application/json";
  const std::string why = not_transferable(g);
  if (!why.empty()) {
    res.body = nlohmann::json{{"kv_transfer", nullptr}, {"reason", why}}.dump();
    return;
  }
  submit_prefill_answer(context, g, res);
}

bool names_kv_source(const HttpRequest& req) { return !req.header(kKvSourceHeader).empty(); }

std::string client_address(const ServingContext& context, const HttpRequest& req) {
  if (context.role().empty()) return req.peer;
  std::string client = req.header(kClientHeader);
  // An IPv4 or IPv6 address as the router writes it; anything else is not a router's.
  const bool plausible = !client.empty() && client.size() <= 64 &&
                         client.find_first_not_of("0123456789abcdefABCDEF.:%") == std::string::npos;
  return plausible ? client : req.peer;
}

bool pull_imported(ServingContext& context, const HttpRequest& req, const Generation& g,
                   std::function<void(ImportedRows)> then) {
  std::string source = req.header(kKvSourceHeader);
  TaskSlots* pulls = context.kv_pulls();
  if (source.empty() || pulls == nullptr || !not_transferable(g).empty()) return false;
  TaskSlots::Slot slot = pulls->try_take();
  if (slot == nullptr) {
    if (pulls->closing()) throw ApiException({503, "the server is shutting down", "service_unavailable", "", ""});
    throw ApiException({503,
                        "this decode server has " + std::to_string(pulls->limit()) +
                            " requests waiting for their prompts' KV (--kv-pull-max-waiting); retry shortly",
                        "service_unavailable", "", ""});
  }
  // The slot goes back when the thread ends, after `then` answered.
  auto pull = [&context, source = std::move(source), g, then = std::move(then), slot, cancel = &pulls->closing()] {
    ImportedRows rows;
    try {
      rows = fetch_imported(context, source, g, *cancel);
    } catch (const std::exception& e) {  // not a transfer error (out of memory): computed here too
      std::fprintf(stderr, "[tachyon] decode: the KV pull from %s failed, computing the prompt here: %s\n",
                   source.c_str(), e.what());
    }
    then(std::move(rows));
  };
  try {
    std::thread(std::move(pull)).detach();
  } catch (const std::system_error&) {  // out of threads: this request only
    throw ApiException({503, "this decode server cannot start a thread for the KV pull now; retry shortly",
                        "service_unavailable", "", ""});
  }
  return true;
}

void answer_for_role(ServingContext& context, const HttpRequest& req, Generation g, const Respond& respond,
                     AnswerFromRows answer, ErrorBodyFn error_body) {
  HttpResponse res;
  if (context.role() == "prefill") {
    answer_prefill(context, g, res);
    return respond(std::move(res));
  }
  auto after_pull = [&context, g, respond, answer, error_body](ImportedRows imported) mutable {
    HttpResponse res;
    try {  // a server that began to drain while the rows came answers 503 (GenerationRun)
      answer(context, std::move(g), std::move(imported), res);
    } catch (...) {
      res = exception_response(error_body);
    }
    respond(std::move(res));
  };
  if (context.role() == "decode" && pull_imported(context, req, g, std::move(after_pull))) return;
  answer(context, std::move(g), nullptr, res);
  respond(std::move(res));
}

}  // namespace tachyon::server
