"""server.pd_options: prefill and decode servers with the options a plain server takes, each
against a plain server of the same options: online FP8 weights (--quantization fp8, also with an
FP8 KV cache on the CPU) and asynchronous scheduling (--async-scheduling on). 60 greedy requests
(completions and chat, streamed and not, 1 to 120 words, 1 to 24 tokens out) through the router
equal the plain server's text, and the decode server imported every prompt. On the CPU, and with
every server on the GPU (TACHYON_PD_DEVICE=cuda, scripts/gpu-test.sh: one request at a time, the
KV bf16 and copied by reference; an FP8 KV cache with --role is refused there in one line).
    pd_options.py TACHYON TOKENIZERS_DIR"""
import random
import sys
from pd_cluster import DEVICE, Cluster, answers, expect_refused, expect_same_answers, greedy_request, metric

tachyon, tokenizers = sys.argv[1], sys.argv[2]
cluster = Cluster(tachyon, tokenizers)
count = 60
at_once = 1 if DEVICE == "cuda" else 16  # the GPU's sums depend on the batch (pd_equivalence.py)
variants = [("fp8", ["--quantization", "fp8"]), ("fp8-kv", ["--quantization", "fp8", "--kv-cache-dtype", "fp8"]),
            ("async", ["--async-scheduling", "on"])]
try:
    if DEVICE == "cuda":
        expect_refused(tachyon, cluster.model, ["--device", "cuda", "--role", "decode", "--kv-cache-dtype", "fp8"])
        variants = [v for v in variants if v[0] != "fp8-kv"]
    rng = random.Random(17)
    words = "the quick brown fox jumps over a lazy dog while seven tiny robots count prime numbers".split()
    requests = [greedy_request(i, " ".join(rng.choice(words) for _ in range(1 + rng.randrange(120))),
                               1 + rng.randrange(24)) for i in range(count)]
    for name, options in variants:
        prefill = cluster.serve(name + "-prefill", "--role", "prefill", *options)
        block_size = [] if DEVICE == "cuda" else ["--block-size", "8"]  # the GPU cache is sized for 16
        decode = cluster.serve(name + "-decode", "--role", "decode", *block_size, *options)
        plain = cluster.serve(name + "-plain", *options)
        router = cluster.router([prefill], [decode], name="router-" + name)
        expect_same_answers(f"{name}: prefill -> decode", answers(router.url, requests, at_once),
                            answers(plain.url, requests, at_once))
        imports = metric(decode.url, "tachyon:kv_transfer_imports_total")
        print(f"{name}: {imports:.0f} prompts imported")
        if imports != count:
            sys.exit(f"{name}: every request should decode from pulled KV")
    print("pd_options: all checks passed")
finally:
    cluster.close()
