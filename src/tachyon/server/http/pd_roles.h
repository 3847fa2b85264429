// What `tachyon serve --role prefill|decode` changes in the generation routes (prefill/decode
// disaggregation, docs/disaggregation.md). The router (server/router/) drives both:
//   prefill: the request is validated and tokenized as usual, then only its prompt runs; the
//            answer, given as soon as the prompt is queued, is {"kv_transfer": {"port", "epoch",
//            "request_id"}} naming the KV lease its rows stream into on this server's KV port,
//            or {"kv_transfer": null, "reason"} when the request is not one disaggregation
//            carries (several prompts, n > 1, logprobs, structured outputs);
//   decode:  a request with the header X-Tachyon-Kv: host:port:epoch:request_id pulls the rows
//            as the prefill server writes them (server/pd_transport.h) and decodes from them once
//            the stream's commit arrived; when the pull fails, or the rows are
//            of another prompt, the prompt is computed here instead (never a wrong answer).
#pragma once

#include <memory>

#include "tachyon/engine/kv_transfer.h"
#include "tachyon/server/http/generation.h"
#include "tachyon/server/http/http_message.h"

namespace tachyon::server {

inline constexpr const char* kKvSourceHeader = "X-Tachyon-Kv";
// GET: {"block_size", "hashes": [32 hex digits each]}, the chained hashes of the blocks in this
// server's prefix cache (as of its engine's last step), for the router's prefix policy.
inline constexpr const char* kPrefixHashesPath = "/kv/prefix_hashes";

// GET kPrefixHashesPath, on every server (a router's prefix policy reads prefill servers').
void answer_prefix_hashes(ServingContext& context, HttpResponse& res);

// Prefill role: queues the prompt and answers `res` with its lease at once.
void answer_prefill(ServingContext& context, const Generation& g, HttpResponse& res);

// Decode role: the imported rows for this request, or null (no header, or the pull failed: the
// reason goes to the log and the prompt is computed here).
std::shared_ptr<const engine::KvPayload> fetch_imported(ServingContext& context, const HttpRequest& req,
                                                        const Generation& g);

}  // namespace tachyon::server
