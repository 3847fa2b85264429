"""server.pd_abort: a client that hangs up on the router during a non-streamed request frees the
KV of both servers, at each stage: before the prefill server answers, while the KV moves (the
prefill server's KV port stalls), and while the decode server generates (a completion and an
Anthropic message). Each hang-up must abort
the request on the decode server (its abort count rises: the long answer never ran to its end)
and leave every KV block free on both servers, long before the leases' 60 s timeout.
    pd_abort.py TACHYON TOKENIZERS_DIR"""
import os
import sys

from pd_cluster import Cluster, hang_up, kv_usage, metric, raw_request, wait_until

ABORTED = ("tachyon:request_success_total", 'finished_reason="abort"')
CLIENT_GONE = ("tachyon:router_requests_total", 'outcome="client_gone"')

cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    prefill = cluster.serve("prefill", "--role", "prefill", "--kv-lease-timeout", "60")
    os.environ["TACHYON_KV_TRANSFER_FAULT"] = "stall"
    stalling = cluster.serve("stalling", "--role", "prefill", "--kv-lease-timeout", "60")
    del os.environ["TACHYON_KV_TRANSFER_FAULT"]
    decode = cluster.serve("decode", "--role", "decode")
    router = cluster.router([prefill], [decode])
    stalling_router = cluster.router([stalling], [decode])
    long_prompt = " ".join(["seven tiny robots count prime numbers while the quick brown fox jumps"] * 150)
    body = {"model": "tiny", "prompt": long_prompt, "max_tokens": 2000, "temperature": 0, "ignore_eos": True}

    def stage(name, router, wait_for_stage, path="/v1/completions", body=body):
        aborted = metric(decode.url, *ABORTED)
        gone = metric(router.url, *CLIENT_GONE)
        s = raw_request(router.port, path, body)
        wait_for_stage()
        hang_up(s)
        wait_until(lambda: metric(decode.url, *ABORTED) == aborted + 1, 30,
                   f"{name}: the decode server never aborted the request")
        wait_until(lambda: metric(router.url, *CLIENT_GONE) == gone + 1, 10,
                   f"{name}: the router did not count the client as gone")
        wait_until(lambda: kv_usage(prefill) == 0 and kv_usage(stalling) == 0 and kv_usage(decode) == 0, 20,
                   f"{name}: KV left in use (prefill {kv_usage(prefill)}, decode {kv_usage(decode)})")
        print(f"hung up {name}: decode request aborted, every KV block free on both servers")

    prefill_answers = lambda r: metric(r.url, "tachyon:router_upstream_latency_seconds_count", 'role="prefill"')
    # 1. Before the prefill server answers: at once (its prompt of ~2,000 tokens is still running).
    stage("before the prefill answer", router, lambda: None)
    # 2. While the KV moves: the router has the lease, the decode server's pull stalls (5 s).
    before = prefill_answers(stalling_router)
    stage("during the transfer", stalling_router,
          lambda: wait_until(lambda: prefill_answers(stalling_router) == before + 1, 30, "no prefill answer"))
    # 3. While the decode server generates its 2,000 tokens.
    decoding = lambda: wait_until(lambda: metric(decode.url, "tachyon:num_requests_running") == 1, 30, "no decode")
    stage("during decode", router, decoding)
    # 4. The same on the Anthropic route (its whole answer's head goes first on a decode server too).
    message = {"model": "tiny", "max_tokens": 2000, "temperature": 0, "stop_sequences": [],
               "messages": [{"role": "user", "content": long_prompt}]}
    stage("during a message's decode", router, decoding, "/v1/messages", message)
finally:
    cluster.close()
