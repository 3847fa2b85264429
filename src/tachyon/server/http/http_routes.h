// How the route files register on the Router (internal to server/http/). Each route reaches the
// served model through `context`, which throws a 503 while the model loads.
#pragma once

#include <chrono>
#include <functional>

#include "tachyon/server/http/http_router.h"
#include "tachyon/server/http/serving_context.h"

namespace tachyon::server {

using ContextAccess = std::function<ServingContext&()>;

// POST /v1/completions, /v1/chat/completions.
void add_generation_routes(Router& router, ContextAccess context, std::chrono::milliseconds keepalive_interval);
// POST /v1/messages (the Anthropic Messages API), its errors in Anthropic's shape.
void add_messages_routes(Router& router, ContextAccess context, std::chrono::milliseconds keepalive_interval);
// POST /v1/responses (OpenAI's Responses API).
void add_responses_routes(Router& router, ContextAccess context, std::chrono::milliseconds keepalive_interval);
// GET /v1/models, /v1/models/{id}, /health, /version, /metrics; POST /tokenize, /detokenize.
// `loaded` says whether a model is there yet (/health answers 503 until then).
void add_info_routes(Router& router, ContextAccess context, std::function<bool()> loaded);
// POST /v1/embeddings (routes_embeddings.cpp).
void add_embeddings_routes(Router& router, ContextAccess context);

}  // namespace tachyon::server
