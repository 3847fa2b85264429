// What `tachyon serve --role prefill|decode` changes in the generation routes (completions, chat
// and Anthropic messages; prefill/decode disaggregation, docs/disaggregation.md). The router
// (server/router/) drives both:
//   prefill: the request is validated and tokenized as usual, then only its prompt runs; the
//            answer, given as soon as the prompt is queued, is {"kv_transfer": {"port", "epoch",
//            "request_id"}} naming the KV lease its rows stream into on this server's KV port,
//            or {"kv_transfer": null, "reason"} when the request is not one disaggregation
//            carries (several prompts, n > 1, logprobs, structured outputs);
//   decode:  a request with the header X-Tachyon-Kv: host:port:epoch:request_id pulls the rows
//            as the prefill server writes them (server/pd_transport.h) and decodes from them once
//            the stream's commit arrived; when the pull fails, or the rows are
//            of another prompt, the prompt is computed here instead (never a wrong answer).
//            The pull runs on a thread of its own, not on an HTTP worker: it waits as long as the
//            prompt runs on the prefill server (two minutes at most), and pulls that waited on
//            the workers let a slow or stalled prefill server take every worker and lock every
//            other request out. Pulls waiting at once are bounded (--kv-pull-max-waiting); past
//            the bound a request gets 503 with Retry-After.
#pragma once

#include <functional>
#include <memory>

#include "tachyon/engine/kv_transfer.h"
#include "tachyon/server/http/generation.h"
#include "tachyon/server/http/http_message.h"
#include "tachyon/server/http/http_router.h"

namespace tachyon::server {

inline constexpr const char* kKvSourceHeader = "X-Tachyon-Kv";
// The router's client's address, sent with every request it forwards. A server with a role (one
// behind a router, trusted as X-Tachyon-Kv is) counts the request against that client's quota and
// fair share; any other server ignores the header, so that no client can claim another's.
inline constexpr const char* kClientHeader = "X-Tachyon-Client";

// The address a request's quota and fair share are counted against: the router's client for a
// server with a role (the header, when it is a plausible address), else the peer.
std::string client_address(const ServingContext& context, const HttpRequest& req);
// GET: {"block_size", "hashes": [32 hex digits each]}, the chained hashes of the blocks in this
// server's prefix cache (as of its engine's last step), for the router's prefix policy.
inline constexpr const char* kPrefixHashesPath = "/kv/prefix_hashes";

// GET kPrefixHashesPath, on every server (a router's prefix policy reads prefill servers').
void answer_prefix_hashes(ServingContext& context, HttpResponse& res);

// Prefill role: queues the prompt and answers `res` with its lease at once.
void answer_prefill(ServingContext& context, const Generation& g, HttpResponse& res);

// Whether the request names a KV source (the header): its route runs as an async one
// (Router::add_async's `when`), so that its answer may come from a pull's thread.
bool names_kv_source(const HttpRequest& req);

using ImportedRows = std::shared_ptr<const engine::KvPayload>;
// Decode role: when the request names a KV source and is one disaggregation carries, pulls its
// rows on a thread of its own, holding one of the context's pull slots while it waits, and then
// calls `then` on that thread with them, or with null when the pull failed (the reason goes to
// the log and the prompt is computed here). Returns false, and never calls `then`, when there is
// nothing to pull. Throws ApiException 503 when every slot is held or the server is stopping.
// `then` must not throw (it answers the request, errors included).
bool pull_imported(ServingContext& context, const HttpRequest& req, const Generation& g,
                   std::function<void(ImportedRows)> then);

// How a generation route answers from the prompt's pulled rows (null: none, computed here).
using AnswerFromRows = std::function<void(ServingContext&, Generation, ImportedRows, HttpResponse&)>;
// A generation route's answer for this server's role, through `respond`: a prefill server's lease
// at once; a decode server's `answer` once the pull ended (on the pull's thread, a failure in
// `error_body`'s shape); any other server's `answer` at once.
void answer_for_role(ServingContext& context, const HttpRequest& req, Generation g, const Respond& respond,
                     AnswerFromRows answer, ErrorBodyFn error_body);

}  // namespace tachyon::server
