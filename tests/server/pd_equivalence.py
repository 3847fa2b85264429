"""server.pd_equivalence: 500 greedy requests of mixed lengths (completions and chat, streamed and
not, prompts of 1 to 200 words, 1 to 32 tokens out), 16 at a time (and as many to the plain server), through a prefill server, a
decode server and the router equal a plain server's answers, text for text; afterwards every KV
block is free on both servers and the decode server imported every prompt it was sent.
On the GPU (TACHYON_PD_DEVICE=cuda) every import must have been copied by reference (CUDA IPC),
as with TACHYON_PD_KV_TRANSPORT=ucx (UCX reads of the prefill server's host cache; rows otherwise),
and requests go one at a time, with one block size: the GPU's kernels sum in an order that
depends on the batch's size and the plan (cuBLASLt and the GEMV are chosen per batch bucket), so
only the same batches on the same plan give the same text; the CPU's do not depend on either.
    pd_equivalence.py TACHYON TOKENIZERS_DIR [COUNT]"""
import random
import sys
from concurrent.futures import ThreadPoolExecutor

from pd_cluster import DEVICE, KV_TRANSPORT, Cluster, kv_usage, metric, post, wait_until

count = int(sys.argv[3]) if len(sys.argv) > 3 else 500
cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    prefill = cluster.serve("prefill", "--role", "prefill")
    on_gpu = DEVICE == "cuda"
    # Rows, not blocks, move: the decode server pages its cache otherwise (on the CPU).
    decode = cluster.serve("decode", "--role", "decode", *([] if on_gpu else ["--block-size", "8"]))
    plain = cluster.serve("plain")
    router = cluster.router([prefill], [decode])
    rng = random.Random(11)
    words = "the quick brown fox jumps over a lazy dog while seven tiny robots count prime numbers".split()

    def request(i):
        prompt = " ".join(rng.choice(words) for _ in range(1 + rng.randrange(200)))
        body = {"model": "tiny", "max_tokens": 1 + rng.randrange(32), "temperature": 0, "stream": i % 2 == 1}
        if i % 3 == 0:
            return "/v1/chat/completions", dict(body, messages=[{"role": "user", "content": prompt}])
        return "/v1/completions", dict(body, prompt=prompt)

    requests = [request(i) for i in range(count)]
    if on_gpu:
        got = [post(router.url, *r)[:2] for r in requests]
        want = [post(plain.url, *r)[:2] for r in requests]
    else:
        with ThreadPoolExecutor(32) as pool:  # the router's and the plain server's at once: 16 each
            got = pool.map(lambda r: post(router.url, *r)[:2], requests)
            want = pool.map(lambda r: post(plain.url, *r)[:2], requests)
            got, want = list(got), list(want)
    mismatches = [i for i in range(count) if got[i] != want[i]]
    for i in mismatches[:5]:
        print(f"request {i}: router {got[i]!r} != plain {want[i]!r}")
    print(f"{count} requests through the router: {count - len(mismatches)} identical to the plain server")
    if mismatches:
        sys.exit(1)
    wait_until(lambda: kv_usage(prefill) == 0 and kv_usage(decode) == 0, 20, "KV left in use")
    imports = metric(decode.url, "tachyon:kv_transfer_imports_total")
    print(f"every KV block free on both servers; the decode server imported {imports:.0f} prompts")
    if imports != count:
        sys.exit("every request should decode from pulled KV")
    sent = metric(prefill.url, "tachyon:kv_transfer_bytes_total")
    received = metric(decode.url, "tachyon:kv_transfer_bytes_total")
    ok = metric(router.url, "tachyon:router_requests_total", 'outcome="ok"')
    peak = metric(prefill.url, "tachyon:kv_transfer_pulls_peak")
    print(f"KV bytes sent {sent:.0f}, received {received:.0f}; router outcomes ok {ok:.0f}; at most {peak:.0f} pulls at once")
    if sent != received or sent <= 0 or ok != count:
        sys.exit("the KV bytes sent and received should agree, and every request count as ok")
    by_reference = metric(decode.url, "tachyon:kv_reference_imports_total")
    unconfirmed = metric(decode.url, "tachyon:kv_reference_unconfirmed_total")
    confirmed = metric(prefill.url, "tachyon:kv_reference_copies_confirmed_total")
    print(f"imports copied by reference: {by_reference:.0f} ({confirmed:.0f} confirmed by the prefill server, "
          f"{unconfirmed:.0f} unconfirmed)")
    if by_reference != (count if on_gpu or KV_TRANSPORT == "ucx" else 0) or confirmed != by_reference or unconfirmed != 0:
        sys.exit("on one GPU or through UCX every import is copied by reference and confirmed; otherwise none is")
finally:
    cluster.close()
