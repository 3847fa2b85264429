"""server.pd_choice: `tachyon router --policy prefix` sends a request whose prompt shares a prefix
with an earlier one to the prefill server that holds that prefix in its cache (learnt from the
hashes it publishes), where round-robin or load alone would spread them over both servers, for
completions and Anthropic messages alike. The
prefix-cache counters of the two servers show where each prompt ran; the answers equal one
server's. Then a router whose scrapes come a minute apart (one at its start): it learns a prefix
from its own routing alone, so a second prompt sharing a new prefix, sent right after the first,
goes where the first ran. Without the router noting what it routed, it goes to the other
(less loaded) server, or either, and the test fails.
    pd_choice.py TACHYON TOKENIZERS_DIR"""
import sys
import urllib.error
import urllib.request

from pd_cluster import Cluster, get, kv_usage, metric, post, wait_until

HITS, QUERIES = "tachyon:prefix_cache_hits_total", "tachyon:prefix_cache_queries_total"

cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    a = cluster.serve("prefill_a", "--role", "prefill")
    b = cluster.serve("prefill_b", "--role", "prefill")
    decode = cluster.serve("decode", "--role", "decode")
    router = cluster.router([a, b], [decode], "--policy", "prefix", "--tokenizer", cluster.model)
    shared = " ".join(["a long shared system prompt about seven tiny robots counting prime numbers"] * 20)

    def body(i):
        return {"model": "tiny", "prompt": f"{shared} question {i}: why?", "max_tokens": 8, "temperature": 0}

    shared_blocks = post(decode.url, "/tokenize", {"prompt": shared})[1]["count"] // 16
    status, first, _ = post(router.url, "/v1/completions", body(0))
    holder, other = (a, b) if metric(a.url, QUERIES) > 0 else (b, a)
    print(f"the first prompt ran on {holder.name}")
    published = lambda: metric(router.url, "tachyon:router_upstream_prefix_blocks", f'server="{holder.url}"')
    wait_until(lambda: published() >= shared_blocks, 20, "the router never learnt the holder's prefix blocks")
    hits_before, other_before = metric(holder.url, HITS), metric(other.url, QUERIES)
    for i in range(1, 9):
        status, text, _ = post(router.url, "/v1/completions", body(i))
        _, want, _ = post(decode.url, "/v1/completions", body(i))
        if status != 200 or text != want:
            sys.exit(f"request {i}: {status} {text!r}, one server says {want!r}")
    hits = metric(holder.url, HITS) - hits_before
    strays = metric(other.url, QUERIES) - other_before
    print(f"8 prompts with the shared prefix: {hits:.0f} prefix-cache hit tokens on {holder.name}, "
          f"{strays:.0f} prompt tokens looked up on {other.name}")
    if strays != 0 or hits < 8 * 16 * shared_blocks:
        sys.exit("the prefix policy should send every shared-prefix prompt to the server holding the prefix")
    wait_until(lambda: all(kv_usage(s) == 0 for s in (a, b, decode)), 20, "KV left in use")
    print("answers equal one server's; every KV block free")

    # Anthropic bodies route by their prefix too (the router renders them as the servers do): a
    # long system prompt shared by five questions. Routed by load, the two idle servers share them.
    system = " ".join(["you are a careful assistant who explains how tiny robots sort their prime numbers"] * 20)

    def message(i):
        return {"model": "tiny", "max_tokens": 4, "temperature": 0, "system": system,
                "messages": [{"role": "user", "content": f"question {i}: why?"}]}

    queries_before = {s.name: metric(s.url, QUERIES) for s in (a, b)}
    status, _, _ = post(router.url, "/v1/messages", message(0))
    holder, other = (a, b) if metric(a.url, QUERIES) > queries_before["prefill_a"] else (b, a)
    hits_before, other_before = metric(holder.url, HITS), metric(other.url, QUERIES)
    for i in range(1, 5):
        status, answer, _ = post(router.url, "/v1/messages", message(i))
        if status != 200:
            sys.exit(f"message {i}: {status} {answer}")
    hits = metric(holder.url, HITS) - hits_before
    strays = metric(other.url, QUERIES) - other_before
    print(f"4 messages with a shared system prompt: {hits:.0f} prefix-cache hit tokens on {holder.name}, "
          f"{strays:.0f} prompt tokens looked up on {other.name}")
    if strays != 0 or hits < 4 * 16 * 10:
        sys.exit("the prefix policy should send every message sharing the system prompt to the server holding it")
    wait_until(lambda: all(kv_usage(s) == 0 for s in (a, b, decode)), 20, "KV left in use")

    # Bodies the servers refuse must not take the router down on the way: one nested 100,000 deep
    # (the prefix policy rendered its messages recursively and overflowed the stack) and one whose
    # "stream" is not a boolean (a 500 before).
    deep = 100000
    for what, raw in [("nested 100,000 deep", '{"model":"tiny","messages":' + "[" * deep + "]" * deep + "}"),
                      ("a string for stream", '{"model":"tiny","prompt":"hi","stream":"yes"}')]:
        request = urllib.request.Request(router.url + "/v1/chat/completions", raw.encode(),
                                         {"Content-Type": "application/json"})
        try:
            status = urllib.request.urlopen(request, timeout=60).status
        except urllib.error.HTTPError as e:
            status = e.code
        except (urllib.error.URLError, ConnectionError):
            status = -1
        print(f"a body {what}: {status}")
        if status != 400 or get(router.url + "/health")[0] != 200:
            sys.exit(f"the router should answer a body {what} with 400 and stay up")

    slow = cluster.router([a, b], [decode], "--policy", "prefix", "--tokenizer", cluster.model,
                          health_interval_ms=60000, name="router_slow_scrapes")
    preambles = ["twelve small owls sort colourful pebbles", "a quiet librarian counts silver keys",
                 "nine sailors paint the northern lighthouse", "three gardeners measure falling leaves"]
    for round_, preamble in enumerate(preambles):  # each round a new prefix, its two prompts back to back
        prefix = " ".join([preamble] * 25)
        ran = []
        for i in range(2):
            queries = [metric(s.url, QUERIES) for s in (a, b)]
            status, text, _ = post(slow.url, "/v1/completions", {"model": "tiny", "prompt": f"{prefix} question {i}",
                                                                "max_tokens": 4, "temperature": 0})
            if status != 200:
                sys.exit(f"round {round_} request {i}: {status}")
            moved = [metric(s.url, QUERIES) - q for s, q in zip((a, b), queries)]
            ran.append((a, b)[0 if moved[0] > 0 else 1].name)
        print(f"round {round_}: a new prefix ran on {ran[0]}, its second prompt at once on {ran[1]}")
        if ran[0] != ran[1]:
            sys.exit("the router did not send the second prompt to the server it had just sent the prefix to")
finally:
    cluster.close()
