"""server.pd_least_loaded: `tachyon router --policy least-loaded` sends requests to the decode
server with the fewer sequences. Decode server A is kept busy by three long streams sent to it
directly (the router sees them only through A's /metrics); every request through the router then
decodes on B, which round-robin would not do (it would send half to A). Answers equal one
server's; every KV block is free afterwards.
    pd_least_loaded.py TACHYON TOKENIZERS_DIR [POLICY]   (POLICY: to show another one fails)"""
import sys

from pd_cluster import Cluster, kv_usage, hang_up, metric, post, raw_request, wait_until

policy = sys.argv[3] if len(sys.argv) > 3 else "least-loaded"
IMPORTS = "tachyon:kv_transfer_imports_total"
cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    prefill = cluster.serve("prefill", "--role", "prefill")
    a = cluster.serve("decode_a", "--role", "decode")
    b = cluster.serve("decode_b", "--role", "decode")
    router = cluster.router([prefill], [a, b], "--policy", policy)
    busy = [raw_request(a.port, "/v1/completions", {"model": "tiny", "prompt": f"busy {i}", "max_tokens": 2400,
                                                     "ignore_eos": True, "temperature": 0, "stream": True})
            for i in range(3)]
    wait_until(lambda: metric(a.url, "tachyon:num_requests_running") == 3, 30, "decode server A never ran all three")
    if policy != "round-robin":  # round-robin reads no load
        load_a = lambda: metric(router.url, "tachyon:router_upstream_load", f'server="{a.url}"')
        wait_until(lambda: load_a() == 3, 30, "the router never saw decode server A's three sequences")
    for i in range(8):
        body = {"model": "tiny", "prompt": f"question {i}: which server?", "max_tokens": 8, "temperature": 0,
                "stream": i % 2 == 1}
        got, want = post(router.url, "/v1/completions", body), post(b.url, "/v1/completions", body)
        if got[:2] != want[:2]:
            sys.exit(f"request {i}: {got[:2]}, one server gives {want[:2]}")
    on_a, on_b = metric(a.url, IMPORTS), metric(b.url, IMPORTS)
    still_busy = metric(a.url, "tachyon:num_requests_running")
    print(f"policy {policy}: 8 requests through the router, {on_a:.0f} decoded on the busy server A, "
          f"{on_b:.0f} on B (A still runs {still_busy:.0f})")
    if still_busy != 3:
        sys.exit("decode server A's long streams ended before the test did; the test proves nothing")
    if on_a != 0 or on_b != 8:
        sys.exit("least-loaded should send every request to the idle decode server")
    for s in busy:
        hang_up(s)
    wait_until(lambda: all(kv_usage(s) == 0 for s in (prefill, a, b)), 20, "KV left in use")
    print("answers equal one server's; every KV block free")
finally:
    cluster.close()
