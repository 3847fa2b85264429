"""server.pd_options: prefill and decode servers (CPU) with the options a plain server takes,
each against a plain server of the same options: online FP8 weights (--quantization fp8, also
with an FP8 KV cache) and asynchronous scheduling (--async-scheduling on). 60 greedy requests
(completions and chat, streamed and not, 1 to 120 words, 1 to 24 tokens out) through the router
equal the plain server's text, and the decode server imported every prompt.
    pd_options.py TACHYON TOKENIZERS_DIR"""
import random
import sys
from pd_cluster import DEVICE, Cluster, answers, expect_same_answers, greedy_request, metric

if DEVICE != "cpu":
    sys.exit(0)  # these options with --role are verified on the CPU (scripts/gpu-test.sh runs the others on cuda)
tachyon, tokenizers = sys.argv[1], sys.argv[2]
cluster = Cluster(tachyon, tokenizers)
count = 60
try:
    rng = random.Random(17)
    words = "the quick brown fox jumps over a lazy dog while seven tiny robots count prime numbers".split()
    requests = [greedy_request(i, " ".join(rng.choice(words) for _ in range(1 + rng.randrange(120))),
                               1 + rng.randrange(24)) for i in range(count)]
    for name, options in (("fp8", ["--quantization", "fp8"]),
                          ("fp8-kv", ["--quantization", "fp8", "--kv-cache-dtype", "fp8"]),
                          ("async", ["--async-scheduling", "on"])):
        prefill = cluster.serve(name + "-prefill", "--role", "prefill", *options)
        decode = cluster.serve(name + "-decode", "--role", "decode", "--block-size", "8", *options)
        plain = cluster.serve(name + "-plain", *options)
        router = cluster.router([prefill], [decode], name="router-" + name)
        expect_same_answers(f"{name}: prefill -> decode", answers(router.url, requests), answers(plain.url, requests))
        imports = metric(decode.url, "tachyon:kv_transfer_imports_total")
        print(f"{name}: {imports:.0f} prompts imported")
        if imports != count:
            sys.exit(f"{name}: every request should decode from pulled KV")
    print("pd_options: all checks passed")
finally:
    cluster.close()
