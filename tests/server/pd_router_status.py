"""server.pd_router_status: a non-streamed answer through the router has the status of what
happened, as one server's has. Two stand-ins (this script's own HTTP servers) play the prefill
server (it answers at once, with no lease) and the decode server, which answers by the prompt:
  - "fine": a completion (200, the same body);
  - "engine": what a decode server sends when its engine fails under the request: a 200 head, the
    keep-alive spaces, then the OpenAI error object (its head goes first, docs/disaggregation.md);
    the router's client must get 500 and that error object;
  - "dies": a 200 head, spaces, half a completion, then the connection closes: 503 with an error
    object naming the decode server, never a 200 whose body is cut short;
  - "large": a 1 MiB completion, more than a relay holds (256 KiB): a 200 with the body whole.
Streamed, an engine failure stays a 200 stream whose last event is the error (as one server's).
With the router's head sent before the decode answer is whole, "engine" and "dies" get a 200 and
the test fails.
    pd_router_status.py TACHYON TOKENIZERS_DIR"""
import http.client
import json
import sys

from pd_cluster import Cluster
from pd_stand_in import StandIn, StandInHandler

ENGINE_ERROR = {"error": {"message": "the engine failed: stand-in", "type": "internal_server_error", "param": None,
                          "code": "engine_failed"}}


def completion(text):
    return {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "length"}]}


class Handler(StandInHandler):
    def decode(self, body):
        prompt, spaces = body["prompt"], b"   \n  "
        if body.get("stream"):
            events = (b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n' + b"data: " +
                      json.dumps(ENGINE_ERROR).encode() + b"\n\n")
            return self.answer(events, content_type="text/event-stream")
        if prompt == "fine":
            return self.answer(json.dumps(completion("fine")).encode())
        if prompt == "engine":
            return self.answer(spaces + json.dumps(ENGINE_ERROR).encode())
        if prompt == "large":
            return self.answer(spaces + json.dumps(completion("y" * (1 << 20))).encode())
        if prompt == "dies":
            half = json.dumps(completion("cut")).encode()[:20]
            self.answer(spaces + half, length=1000)  # promises 1000 bytes, sends fewer, then closes
            self.wfile.flush()
            self.close_connection = True
            return
        self.send_error(400)


def raw_post(port, body):
    """(status, body text) exactly as the router answers, whatever the body says."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    status, text = r.status, r.read().decode()
    c.close()
    return status, text


prefill, decode = StandIn("prefill", Handler), StandIn("decode", Handler)
cluster = Cluster(sys.argv[1], sys.argv[2], canary=True)  # serves no model: no make-model
failures = []
try:
    router = cluster.router([prefill], [decode])
    ask = lambda prompt, **extra: raw_post(router.port, {"model": "tiny", "prompt": prompt, "max_tokens": 4, **extra})

    status, text = ask("fine")
    print(f"fine: {status} {text[:80]!r}")
    if status != 200 or json.loads(text) != completion("fine"):
        failures.append("a plain answer did not come through whole with 200")

    status, text = ask("engine")
    print(f"engine failure: {status} {text[:120]!r}")
    if status != 500 or json.loads(text) != ENGINE_ERROR:
        failures.append("an engine failure on the decode server did not reach the client as a 500 with its error")

    status, text = ask("large")
    print(f"large: {status}, {len(text)} bytes")
    if status != 200 or json.loads(text) != completion("y" * (1 << 20)):
        failures.append("an answer larger than a relay holds did not come through whole with 200")

    status, text = ask("engine", stream=True)
    last = [line for line in text.split("\n") if line.startswith("data: ")][-1]
    print(f"streamed engine failure: {status}, last event {last[:100]!r}")
    if status != 200 or json.loads(last[6:]) != ENGINE_ERROR:
        failures.append("a streamed engine failure did not end its 200 stream with the error event")

    # Last: the router marks a decode server that failed mid-answer down until its next health check.
    status, text = ask("dies")
    print(f"decode server dies mid-answer: {status} {text[:120]!r}")
    try:
        error = json.loads(text).get("error", {})
    except ValueError:  # a body cut short
        error = {}
    if status != 503 or decode.url not in error.get("message", ""):
        failures.append("a decode answer cut short did not give 503 with an error naming the decode server")
finally:
    cluster.close()
    prefill.shutdown()
    decode.shutdown()
if failures:
    sys.exit("; ".join(failures))
print("server.pd_router_status: ok")
