// POST /v1/embeddings. A generative model (no pooling config in its directory) is refused with a
// 400 that says why; a model with a sentence-transformers pooling config is refused too, naming
// its pooling, because the pooling path (final hidden states -> mean / cls / last -> normalize) is
// not built yet: an answer must never be made of anything but the model's own states.
#include "tachyon/server/http/http_routes.h"
#include "tachyon/server/http/http_util.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server {
namespace {

void check_input(const fields::Json& body) {
  const fields::Json* input = fields::find(body, "input");
  if (input == nullptr) fields::fail("input", "'input' is required: a string, an array of strings, or token ids.");
  if (!input->is_string() && !input->is_array()) {
    fields::fail("input", "Invalid type for 'input': expected a string or an array, but got " + fields::type_name(*input) + ".");
  }
}

void embeddings(ServingContext& context, const HttpRequest& req) {
  const fields::Json body = fields::parse_body(req.body, context.limits());
  fields::check_model(body, context.limits());
  check_input(body);
  const std::optional<PoolingConfig>& pooling = context.pooling();
  if (!pooling) {
    fields::fail("model", "'" + context.limits().model_name + "' is a generative model: its directory has no "
                          "sentence-transformers pooling config (modules.json naming a Pooling module), so it "
                          "serves no embeddings. Serve an embedding model for /v1/embeddings.");
  }
  fields::fail("model", "'" + context.limits().model_name + "' has a pooling config (" + pooling_mode_name(pooling->mode) +
                            (pooling->normalize ? " pooling, normalized" : " pooling") +
                            "), but this server does not compute embeddings yet.");
}

}  // namespace

void add_embeddings_routes(Router& router, ContextAccess context) {
  router.add("POST", "/v1/embeddings", [context](const HttpRequest& req, HttpResponse&) { embeddings(context(), req); });
}

}  // namespace tachyon::server
