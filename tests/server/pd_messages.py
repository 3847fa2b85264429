"""server.pd_messages: the Anthropic Messages API through `tachyon router`: the prefill server
computes the prompt of a /v1/messages body (system prompt, tools, a prefill), the decode server
imports its rows and answers; greedy answers equal one plain server's, whole and streamed, every
request is imported (no prompt recomputed on the decode server), an invalid body comes back as
Anthropic's error, an answer the engine gave up on is the same 400 as one server's,
/v1/messages/count_tokens answers through the router as one server does, OpenAI's Responses API
(/v1/responses) runs through it as /v1/messages does, and every KV block is free afterwards.
    pd_messages.py TACHYON TOKENIZERS_DIR"""
import json
import sys
import urllib.error
import urllib.request

from pd_cluster import Cluster, kv_usage, metric, post, wait_until

IMPORTS = "tachyon:kv_transfer_imports_total"


def answer(base, path, body, whole_text, delta_text):
    """(status, the answer's text or the error object): whole_text reads a whole answer's text,
    delta_text a streamed event's ("" for none)."""
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())
    if not body.get("stream"):
        return 200, whole_text(json.loads(raw))
    text = ""
    for line in raw.split("\n"):
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event["type"] == "error":
                return 500, event
            text += delta_text(event)
    return 200, text


def messages(base, body):
    return answer(base, "/v1/messages", body,
                  lambda a: "".join(b.get("text", "") for b in a["content"] if b["type"] == "text"),
                  lambda e: e["delta"]["text"] if e["type"] == "content_block_delta"
                  and e["delta"]["type"] == "text_delta" else "")


def responses(base, body):
    return answer(base, "/v1/responses", body,
                  lambda a: "".join(p["text"] for item in a["output"] if item["type"] == "message"
                                    for p in item["content"]),
                  lambda e: e["delta"] if e["type"] == "response.output_text.delta" else "")


cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    prefill = cluster.serve("prefill", "--role", "prefill")
    decode = cluster.serve("decode", "--role", "decode")
    plain = cluster.serve("plain")
    router = cluster.router([prefill], [decode])
    tools = [{"name": "weather", "description": "The weather of a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    bodies = []
    for i in range(6):
        body = {"model": "tiny", "max_tokens": 12, "temperature": 0, "stream": i % 2 == 1,
                "messages": [{"role": "user", "content": f"question {i}: what is the weather like in Paris today?"}]}
        if i >= 2:
            body["system"] = "You answer in one line."
        if i >= 4:
            body["tools"] = tools
            body["messages"].append({"role": "assistant", "content": "Let me think"})  # a prefill
        bodies.append(body)
    imported = metric(decode.url, IMPORTS)
    for i, body in enumerate(bodies):
        got, want = messages(router.url, body), messages(plain.url, body)
        if got != want or got[0] != 200:
            sys.exit(f"request {i}: through the router {got}, one server {want}")
    imports = metric(decode.url, IMPORTS) - imported
    print(f"{len(bodies)} messages through the router equal one server's; {imports:.0f} imported by the decode server")
    if imports != len(bodies):
        sys.exit("a prompt was computed on the decode server instead of moving from the prefill server")
    # Anthropic's token count through the router: a decode server's, equal to one server's.
    for body in bodies:
        count_body = {k: v for k, v in body.items() if k != "stream"}
        counted = [post(base, "/v1/messages/count_tokens", count_body) for base in (router.url, plain.url)]
        if counted[0][0] != 200 or counted[0][:2] != counted[1][:2]:
            sys.exit(f"count_tokens through the router {counted[0][:2]}, one server {counted[1][:2]}")
    print(f"count_tokens through the router equals one server's ({counted[0][1]})")
    status, error = messages(router.url, {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    print(f"no max_tokens through the router: {status} {json.dumps(error)}")
    if status != 400 or error.get("type") != "error" or error["error"].get("type") != "invalid_request_error":
        sys.exit("an invalid body did not come back as Anthropic's 400")
    # An answer the decode server's engine gave up on (a forced tool call whose schema doubles the
    # open parses with every '['): one server says 400 with why; the decode server's head went
    # first (200, keep-alive spaces), so the router must read the status from the body.
    items = {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]}
    array = {"type": "array", "items": items, "minItems": 1}
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "required": ["x"],
              "$defs": {"a": array, "b": array}}
    gave_up = {"model": "tiny", "max_tokens": 64, "temperature": 0, "thinking": {"type": "disabled"},
               "messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "f", "input_schema": schema}],
               "tool_choice": {"type": "tool", "name": "f"}}
    got, want = messages(router.url, gave_up), messages(plain.url, gave_up)
    print(f"an answer the engine gave up on: through the router {got[0]}, one server {want[0]}")
    if got != want or got[0] != 400 or "too ambiguous" not in got[1]["error"]["message"]:
        sys.exit(f"through the router {got}, one server {want}")
    # OpenAI's Responses API the same way: greedy answers equal one server's, every prompt imported.
    imported = metric(decode.url, IMPORTS)
    fn_tools = [{"type": "function", "name": "weather", "description": "The weather of a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    for i in range(4):
        body = {"model": "tiny", "max_output_tokens": 12, "temperature": 0, "stream": i % 2 == 1,
                "input": [{"role": "user", "content": f"question {i}: what is the weather like in Rome?"}]}
        if i >= 2:
            body.update({"instructions": "You answer in one line.", "tools": fn_tools})
        got, want = responses(router.url, body), responses(plain.url, body)
        if got != want or got[0] != 200:
            sys.exit(f"response {i}: through the router {got}, one server {want}")
    imports = metric(decode.url, IMPORTS) - imported
    print(f"4 responses through the router equal one server's; {imports:.0f} imported by the decode server")
    if imports != 4:
        sys.exit("a responses prompt was computed on the decode server instead of moving from the prefill server")
    wait_until(lambda: all(kv_usage(s) == 0 for s in (prefill, decode, plain)), 20, "KV left in use")
    print("every KV block free")
finally:
    cluster.close()
