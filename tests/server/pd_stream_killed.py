"""server.pd_stream_killed: the prefill server dies in the middle of a prompt's KV stream, before
its commit record. The prompt (about 150 tokens) runs in 32-token steps (--max-num-batched-tokens
32), so its stream has several chunks; the KV port sends the first chunk whole and half of the
second, then nothing (TACHYON_KV_TRANSFER_FAULT=stall hits a stream's second rows frame), so no
commit ever goes out. Once that cut frame is out (tachyon:kv_transfer_faults_sent_total) the test
kills the prefill server (SIGKILL). The decode server holds the first chunk's rows and writes
nothing into its cache before a commit: it must compute the prompt itself (one pull_failed
recompute; its log says the frame was cut after 1 whole chunk, so rows had arrived), the router's
client gets the plain server's text (a 200: neither an error nor other text), and every KV block
of the decode server is free again. Streamed and not. (pd_pull_killed.py kills the prefill
server in the commit frame of a one-chunk stream.)
    pd_stream_killed.py TACHYON TOKENIZERS_DIR"""
import os
import random
import sys

from pd_cluster import Cluster, kill_prefill_during, kv_usage, metric, wait_until

PREFILL_ARGS = ("--role", "prefill", "--max-num-batched-tokens", "32")


def serve_prefill(cluster, port=0):
    os.environ["TACHYON_KV_TRANSFER_FAULT"] = "stall"
    try:
        return cluster.serve("prefill", *PREFILL_ARGS, port=port)
    finally:
        del os.environ["TACHYON_KV_TRANSFER_FAULT"]


rng = random.Random(21)
words = "the quick brown fox jumps over a lazy dog while seven tiny robots count prime numbers".split()
cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    prefill = serve_prefill(cluster)
    decode = cluster.serve("decode", "--role", "decode")
    plain = cluster.serve("plain")
    router = cluster.router([prefill], [decode])
    recomputes = ("tachyon:kv_transfer_recomputes_total", 'reason="pull_failed"')
    for stream in (False, True):
        prompt = " ".join(rng.choice(words) for _ in range(150))
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0, "stream": stream}
        before = metric(decode.url, *recomputes)
        cut_lines = open(decode.log_path).read().count("cut short or timed out after 1 whole chunks")
        status, _ = kill_prefill_during(router, prefill, plain, body,
                                        lambda: metric(prefill.url, "tachyon:kv_transfer_faults_sent_total") == 1,
                                        "the KV port's cut frame (mid-stream)")
        if status != 200:  # the lease was granted before the kill: the decode server has the request
            sys.exit(f"the decode server computes the prompt: the client should get its answer, not {status}")
        if metric(decode.url, *recomputes) != before + 1:
            sys.exit("the decode server should count one pull_failed recompute")
        if open(decode.log_path).read().count("cut short or timed out after 1 whole chunks") != cut_lines + 1:
            sys.exit("the decode server's pull should have failed after one whole chunk (mid-stream):\n" +
                     open(decode.log_path).read()[-2000:])
        wait_until(lambda: kv_usage(decode) == 0, 20, f"decode KV left in use: {kv_usage(decode)}")
        healthy = lambda: metric(router.url, "tachyon:router_upstream_healthy", f'server="{prefill.url}"')
        wait_until(lambda: healthy() == 0, 20, "the router never marked the killed prefill server down")
        prefill = serve_prefill(cluster, port=prefill.port)
        wait_until(lambda: healthy() == 1, 20, "the router never marked the restarted prefill server up")
    print("server.pd_stream_killed: ok (every decode KV block free after each kill)")
finally:
    cluster.close()
