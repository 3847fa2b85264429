"""server.pd_usage: the usage a client reads through `tachyon router` is one plain server's for the
same requests in the same order, cached prompt tokens included: the prompt is computed (and found
in the prefix cache) on the prefill server, so the count of prompt tokens the cache served comes
from there with the prompt's rows, not from the decode server (which imports the prompt into
fresh blocks and looks nothing up). Each route's usage: completions and chat whole and streamed
(stream_options.include_usage), the Responses API, and Anthropic's Messages API (input_tokens
without the cached ones, cache_read_input_tokens with them); every prompt sent twice in a row, so
the second finds its blocks.
    pd_usage.py TACHYON TOKENIZERS_DIR"""
import json
import sys
import urllib.request

from pd_cluster import Cluster, kv_usage, metric, wait_until


def usage(base, path, body):
    """The answer's usage object: the whole answer's, or a streamed answer's last one."""
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        raw = r.read().decode()
    if not body.get("stream"):
        return json.loads(raw)["usage"]
    found = None
    for line in raw.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("usage"):
            found = event["usage"]
        if event.get("type") == "response.completed":
            found = event["response"]["usage"]
        if event.get("type") == "message_delta":
            found = dict(found or {}, **event["usage"])
    return found


def cached(path, u):
    if path == "/v1/messages":
        return u["cache_read_input_tokens"]
    details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
    return details.get("cached_tokens", 0)


words = "the quick brown fox jumps over a lazy dog while seven tiny robots count prime numbers".split()


def prompt(i, length):
    return " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(length))


def requests():
    """(path, body) pairs, each sent twice in a row: the second finds the first's blocks."""
    base = {"model": "tiny", "temperature": 0}
    out = []
    for i, length in enumerate((60, 90)):
        out.append(("/v1/completions", dict(base, prompt=prompt(i, length), max_tokens=4)))
        out.append(("/v1/completions", dict(base, prompt=prompt(i + 10, length), max_tokens=4, stream=True,
                                            stream_options={"include_usage": True})))
        chat = [{"role": "user", "content": prompt(i + 20, length)}]
        out.append(("/v1/chat/completions", dict(base, messages=chat, max_tokens=4)))
        out.append(("/v1/chat/completions", dict(base, messages=[{"role": "user", "content": prompt(i + 30, length)}],
                                                 max_tokens=4, stream=True, stream_options={"include_usage": True})))
        out.append(("/v1/responses", dict(base, input=prompt(i + 40, length), max_output_tokens=4)))
        out.append(("/v1/messages", dict(base, messages=[{"role": "user", "content": prompt(i + 50, length)}],
                                         max_tokens=4)))
        out.append(("/v1/messages", dict(base, messages=[{"role": "user", "content": prompt(i + 60, length)}],
                                         max_tokens=4, stream=True)))
    return [r for r in out for _ in range(2)]


cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    prefill = cluster.serve("prefill", "--role", "prefill")
    decode = cluster.serve("decode", "--role", "decode")
    plain = cluster.serve("plain")
    router = cluster.router([prefill], [decode])
    failures = 0
    hits = 0
    for n, (path, body) in enumerate(requests()):
        want = usage(plain.url, path, body)
        got = usage(router.url, path, body)
        hits += 1 if cached(path, want) > 0 else 0
        if got != want:
            failures += 1
            print(f"request {n} ({path}{', streamed' if body.get('stream') else ''}): router {got} != plain {want}")
    count = len(requests())
    print(f"{count} requests: {count - failures} with the plain server's usage; {hits} answered with cached tokens")
    if failures:
        sys.exit(1)
    if hits < count // 2:
        sys.exit("every second request should find its prompt's blocks in the cache")
    imports = metric(decode.url, "tachyon:kv_transfer_imports_total")
    if imports != count:
        sys.exit(f"the decode server imported {imports} of {count} prompts")
    wait_until(lambda: kv_usage(prefill) == 0 and kv_usage(decode) == 0, 20, "KV left in use")
    print("every prompt imported; every KV block free on both servers")
finally:
    cluster.close()
