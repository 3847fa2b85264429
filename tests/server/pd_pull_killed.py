"""server.pd_pull_killed: the prefill server is killed (SIGKILL) in the middle of a KV pull. Its KV
port sends the frame's head and half the body, then stalls (TACHYON_KV_TRANSFER_FAULT=stall); once
it has exported the lease the test kills it. The decode server must compute the prompt itself
(one pull_failed recompute) and the client gets one server's answer (or a clean error, never a
200 with other text); afterwards every KV block is free on the decode server, and the router
marks the prefill server down.
    pd_pull_killed.py TACHYON TOKENIZERS_DIR"""
import os
import sys

from pd_cluster import Cluster, kill_prefill_during, kv_usage, metric, wait_until

cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    os.environ["TACHYON_KV_TRANSFER_FAULT"] = "stall"
    prefill = cluster.serve("prefill", "--role", "prefill")
    del os.environ["TACHYON_KV_TRANSFER_FAULT"]
    decode = cluster.serve("decode", "--role", "decode")
    plain = cluster.serve("plain")
    router = cluster.router([prefill], [decode])
    recomputes = ("tachyon:kv_transfer_recomputes_total", 'reason="pull_failed"')
    for stream in (False, True):
        body = {"model": "tiny", "prompt": f"a pull cut short by a dying server, streamed {stream}",
                "max_tokens": 12, "temperature": 0, "stream": stream}
        before = metric(decode.url, *recomputes)
        exported = metric(prefill.url, "tachyon:kv_leases_total", 'outcome="exported"')
        kill_prefill_during(router, prefill, plain, body,
                            lambda: metric(prefill.url, "tachyon:kv_leases_total", 'outcome="exported"') == exported + 1,
                            "the decode server's pull of the lease")
        if metric(decode.url, *recomputes) != before + 1:
            sys.exit("the decode server should count one pull_failed recompute")
        wait_until(lambda: kv_usage(decode) == 0, 20, f"decode KV left in use: {kv_usage(decode)}")
        healthy = lambda: metric(router.url, "tachyon:router_upstream_healthy", f'server="{prefill.url}"')
        wait_until(lambda: healthy() == 0, 20, "the router never marked the killed prefill server down")
        os.environ["TACHYON_KV_TRANSFER_FAULT"] = "stall"
        prefill = cluster.serve("prefill", "--role", "prefill", port=prefill.port)
        del os.environ["TACHYON_KV_TRANSFER_FAULT"]
        wait_until(lambda: healthy() == 1, 20, "the router never marked the restarted prefill server up")
    print("every KV block free on the decode server; the router marked the prefill server down, then up")
finally:
    cluster.close()
