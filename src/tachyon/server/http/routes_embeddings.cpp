// POST /v1/embeddings. Each input runs one forward of the served model on its own, outside the
// engine's step loop: no sampling, no KV block (the CPU runner's final_hidden_states, which
// takes turns with the engine's steps); its final hidden states are pooled as the model's
// pooling config says (server/embeddings_pooling.h). Refused with a 400 saying why: a
// generative model (no pooling config, no --pooling), and a runner that gives no hidden states
// (the CUDA runner, --tp / --dp ranks). An answer is never made of anything but the model's own states.
#include "tachyon/server/embeddings_pooling.h"
#include "tachyon/server/embeddings_request.h"
#include "tachyon/server/http/http_routes.h"
#include "tachyon/server/http/http_util.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server {
namespace {

void embeddings(ServingContext& context, const HttpRequest& req, HttpResponse& res) {
  context.refuse_if_unavailable();  // a failed engine's runner computes no embeddings either
  const fields::Json body = fields::parse_body(req.body, context.limits());
  fields::check_model(body, context.limits());
  const std::optional<PoolingConfig>& pooling = context.pooling();
  const std::string& name = context.limits().model_name;
  if (!pooling) {
    if (fields::find(body, "input") == nullptr) fields::fail("input", "'input' is required: a string, an array of strings, or token ids.");
    fields::fail("model", "'" + name + "' is a generative model: its directory has no sentence-transformers pooling config "
                          "(modules.json naming a Pooling module) and the server was started without --pooling, so it "
                          "serves no embeddings. Serve an embedding model, or name its pooling with --pooling last|mean|cls.");
  }
  const EmbeddingsRequest request =
      read_embeddings_request(body, context.tokenizer(), context.limits(), *pooling, context.hidden_size());
  if (!context.final_hidden_states()) {
    fields::fail("model", "'" + name + "' has " + pooling_mode_name(pooling->mode) + " pooling, but " +
                              context.no_hidden_states_reason() +
                              ": embeddings are computed by the CPU runner (--device cpu, without --tp, --dp or --pcp).");
  }
  std::vector<std::vector<float>> vectors;
  vectors.reserve(request.inputs.size());
  for (const std::vector<int32_t>& ids : request.inputs) {
    const std::vector<float> hidden = context.final_hidden_states()(ids);  // [tokens, hidden]
    std::vector<float> v = pool_hidden_states(*pooling, hidden, static_cast<int64_t>(ids.size()), context.hidden_size());
    if (request.dimensions && *request.dimensions != context.hidden_size()) shorten_embedding(v, *request.dimensions);
    vectors.push_back(std::move(v));
  }
  send_json(res, 200, embeddings_response(request, vectors, name));
}

}  // namespace

void add_embeddings_routes(Router& router, ContextAccess context) {
  router.add("POST", "/v1/embeddings",
             [context](const HttpRequest& req, HttpResponse& res) { embeddings(context(), req, res); });
}

}  // namespace tachyon::server
