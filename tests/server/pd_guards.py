"""server.pd_guards: a prefill server caps the KV it holds for decode servers to pull
(--kv-lease-max-share): prefills whose leases nobody pulls fill it up to the cap, the next gets
503 with Retry-After (the router passes that on), and the leases expire after --kv-lease-timeout,
when every block is free again and prefills are taken again.
    pd_guards.py TACHYON TOKENIZERS_DIR"""
import sys

from pd_cluster import Cluster, kv_usage, metric, post, wait_until

cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    # 512 blocks of 16 tokens; 5% = 25 blocks; each prompt below takes 7.
    prefill = cluster.serve("prefill", "--role", "prefill", "--kv-lease-max-share", "0.05", "--kv-lease-timeout", "2")
    decode = cluster.serve("decode", "--role", "decode")
    router = cluster.router([prefill], [decode])
    prompt = " ".join(["the quick brown fox jumps over a lazy dog"] * 11)
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0}
    statuses = []
    for _ in range(5):
        status, _, headers = post(prefill.url, "/v1/completions", body)  # a lease nobody pulls
        statuses.append((status, headers.get("Retry-After")))
    print("prefills straight to the prefill server:", statuses)
    if [s for s, _ in statuses] != [200, 200, 200, 503, 503] or statuses[3][1] != "1":
        sys.exit("want three leases, then 503 with Retry-After: 1")
    status, _, headers = post(router.url, "/v1/completions", body)
    print("through the router while the prefill server is at its cap:", status, headers.get("Retry-After"))
    if status != 503 or headers.get("Retry-After") != "1":
        sys.exit("the router should pass the cap on as 503 with Retry-After")
    # The prefill server answers with a lease's name as soon as the prompt is queued; the lease is
    # granted once the prompt has run.
    wait_until(lambda: metric(prefill.url, "tachyon:kv_leases_outstanding") == 3, 20, "the three prompts never ran")
    counted = (metric(router.url, "tachyon:router_requests_total", 'outcome="unavailable"'),
               metric(router.url, "tachyon:router_retries_total", 'role="prefill"'),
               metric(prefill.url, "tachyon:kv_leases_total", 'outcome="refused"'),
               metric(prefill.url, "tachyon:kv_leases_outstanding"))
    print("router unavailable, prefill retries; prefill leases refused, outstanding:", counted)
    if counted != (1, 1, 3, 3):
        sys.exit("the metrics should count the refusals and the three outstanding leases")
    if kv_usage(prefill) == 0:
        sys.exit("the unpulled leases should hold blocks")
    # The leases expire: every block comes back, and prefills are taken again.
    wait_until(lambda: kv_usage(prefill) == 0, 20, "the expired leases never freed their blocks")
    if metric(prefill.url, "tachyon:kv_leases_total", 'outcome="expired"') != 3:
        sys.exit("the three leases should be counted as expired")
    status, text, _ = post(router.url, "/v1/completions", body)
    _, want, _ = post(decode.url, "/v1/completions", body)  # the decode server computing it alone
    print("after the leases expired:", status, repr(text))
    if status != 200 or text != want:
        sys.exit("after expiry the router should answer as one server")
    wait_until(lambda: kv_usage(prefill) == 0 and kv_usage(decode) == 0, 20, "KV left in use")
    print("every KV block free on both servers")
finally:
    cluster.close()
