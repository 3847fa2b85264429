"""server.pd_faults: failures of prefill/decode disaggregation, each ending with a clean error or
the right answer for the client and every KV block free on the servers that live:
  1. the decode server is killed mid-stream: the client's stream ends with an error event and
     [DONE]; the prefill server holds no lease;
  2. a KV pull times out (the prefill server's KV port stalls): the decode server computes the
     prompt itself (counted as a pull_failed recompute) and the answer is one server's;
  3. a server restarts (the decode server, then the prefill server, on their ports): the router
     marks it down, then up again, and later answers are one server's.
    pd_faults.py TACHYON TOKENIZERS_DIR"""
import http.client
import json
import os
import sys

from pd_cluster import Cluster, kv_usage, metric, post, wait_until

cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    prefill = cluster.serve("prefill", "--role", "prefill")
    os.environ["TACHYON_KV_TRANSFER_FAULT"] = "stall"
    stalling = cluster.serve("stalling", "--role", "prefill")
    del os.environ["TACHYON_KV_TRANSFER_FAULT"]
    decode = cluster.serve("decode", "--role", "decode")
    plain = cluster.serve("plain")
    router = cluster.router([prefill], [decode])
    stalling_router = cluster.router([stalling], [decode])
    healthy = lambda server: metric(router.url, "tachyon:router_upstream_healthy", f'server="{server.url}"')

    def check_answers(count, what):
        for i in range(count):
            body = {"model": "tiny", "prompt": f"request {i} about {what}", "max_tokens": 12, "temperature": 0,
                    "stream": i % 2 == 1}
            got, want = post(router.url, "/v1/completions", body), post(plain.url, "/v1/completions", body)
            if got[:2] != want[:2]:
                sys.exit(f"{what}: request {i} got {got[:2]}, one server gives {want[:2]}")

    def all_free(*servers):
        wait_until(lambda: all(kv_usage(s) == 0 for s in servers), 20,
                   "KV left in use: " + ", ".join(f"{s.name} {kv_usage(s)}" for s in servers))

    # 1. The decode server dies mid-stream.
    conn = http.client.HTTPConnection("127.0.0.1", router.port, timeout=60)
    body = {"model": "tiny", "prompt": "count to a thousand", "max_tokens": 2000, "ignore_eos": True,
            "temperature": 0, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    events = []
    while True:
        line = response.readline().decode()
        if not line:
            break
        if line.startswith("data: "):
            events.append(line[6:].strip())
            if len(events) == 5:
                decode.kill()
    print(f"decode server killed mid-stream: {len(events)} events, the last two {events[-2][:60]!r}, {events[-1]!r}")
    if events[-1] != "[DONE]" or "error" not in json.loads(events[-2]):
        sys.exit("the stream should end with an error event and [DONE]")
    if metric(prefill.url, "tachyon:kv_leases_outstanding") != 0:
        sys.exit("the prefill server still holds a lease")
    if metric(router.url, "tachyon:router_requests_total", 'outcome="upstream_failed"') != 1:
        sys.exit("the router should count one upstream failure")
    all_free(prefill)

    # 3a. ... and restarts on its port: down, then up, then right answers.
    wait_until(lambda: healthy(decode) == 0, 20, "the router never marked the dead decode server down")
    decode = cluster.serve("decode", "--role", "decode", port=decode.port)
    wait_until(lambda: healthy(decode) == 1, 20, "the router never marked the restarted decode server up")
    check_answers(6, "a restarted decode server")
    all_free(prefill, decode)
    print("decode server restarted: marked down, then up; answers equal one server's")

    # 2. A KV pull times out: the decode server computes the prompt.
    recomputes = ("tachyon:kv_transfer_recomputes_total", 'reason="pull_failed"')
    before = metric(decode.url, *recomputes)
    body = {"model": "tiny", "prompt": "a transfer that stalls", "max_tokens": 12, "temperature": 0}
    got, want = post(stalling_router.url, "/v1/completions", body), post(plain.url, "/v1/completions", body)
    print(f"stalled transfer: {got[:2]}; recomputed {metric(decode.url, *recomputes) - before:.0f}")
    if got[:2] != want[:2] or metric(decode.url, *recomputes) != before + 1:
        sys.exit("a stalled transfer should be recomputed on the decode server, with one server's answer")
    all_free(stalling, decode)

    # 3b. The prefill server restarts (a new epoch): down, up, right answers, its KV pulled.
    prefill.kill()
    wait_until(lambda: healthy(prefill) == 0, 20, "the router never marked the dead prefill server down")
    prefill = cluster.serve("prefill", "--role", "prefill", port=prefill.port)
    wait_until(lambda: healthy(prefill) == 1, 20, "the router never marked the restarted prefill server up")
    imports = metric(decode.url, "tachyon:kv_transfer_imports_total")
    check_answers(6, "a restarted prefill server")
    if metric(decode.url, "tachyon:kv_transfer_imports_total") != imports + 6:
        sys.exit("the decode server should pull every prompt's KV from the restarted prefill server")
    all_free(prefill, decode)
    print("prefill server restarted: marked down, then up; answers equal one server's, KV pulled")
finally:
    cluster.close()
