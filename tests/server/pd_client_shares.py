"""server.pd_client_shares: behind `tachyon router`, each client keeps its own share. The router
sends its client's address (X-Tachyon-Client) to the prefill and decode servers, which count a
request against that client's quota and fair share instead of the router's: with one sequence per
client allowed, a second client is served while the first one's stream runs, and the first
client's second request gets 429. A server without a role ignores the header (no client can claim
another's share by sending it).
    pd_client_shares.py TACHYON TOKENIZERS_DIR"""
import sys

from pd_cluster import Cluster, hang_up, kv_usage, metric, raw_request, status_of, wait_until

LONG = {"model": "tiny", "prompt": "a long story", "max_tokens": 3000, "ignore_eos": True, "stream": True}
SHORT = {"model": "tiny", "prompt": "hi", "max_tokens": 2, "temperature": 0}
cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    prefill = cluster.serve("prefill", "--role", "prefill", "--max-sequences-per-client", "1")
    decode = cluster.serve("decode", "--role", "decode", "--max-sequences-per-client", "1")
    plain = cluster.serve("plain", "--max-sequences-per-client", "1")
    router = cluster.router([prefill], [decode])

    hog = raw_request(router.port, "/v1/completions", LONG, source="127.0.0.1")
    wait_until(lambda: metric(decode.url, "tachyon:num_requests_running") == 1, 30, "the long stream never decoded")
    other = status_of(raw_request(router.port, "/v1/completions", SHORT, source="127.0.0.2"))
    same = status_of(raw_request(router.port, "/v1/completions", SHORT, source="127.0.0.1"))
    print(f"through the router while 127.0.0.1 streams: 127.0.0.2 gets {other}, 127.0.0.1 again gets {same}")
    if other != 200:
        sys.exit("another client was refused: the servers counted it as the router's")
    if same != 429:
        sys.exit("the streaming client's second request was served past its share")
    hang_up(hog)

    hog = raw_request(plain.port, "/v1/completions", LONG, source="127.0.0.1")
    wait_until(lambda: metric(plain.url, "tachyon:num_requests_running") == 1, 30, "the plain server never decoded")
    forged = status_of(raw_request(plain.port, "/v1/completions", SHORT, source="127.0.0.1",
                                   headers=[("X-Tachyon-Client", "10.9.9.9")]))
    print(f"a server without a role, the header claiming another address: {forged}")
    if forged != 429:
        sys.exit("a server without a role took the client header")
    hang_up(hog)
    wait_until(lambda: all(kv_usage(s) == 0 for s in (prefill, decode, plain)), 20, "KV left in use")
    print("each client its own share behind the router; the header is ignored without a role")
finally:
    cluster.close()
