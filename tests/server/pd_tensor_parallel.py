"""server.pd_tensor_parallel: prefill and decode servers of tensor-parallel CPU ranks. A tiny
DeepSeek-V3 (latent attention: every rank caches whole latent rows, so the KV moves as one rank's
rows; Llama-3's tokenizer, whose vocabulary divides by --tp 2) served by a --tp 2 prefill server
and, through two routers, a --tp 2 decode server and a one-rank decode server: 60 greedy requests
(completions and chat, streamed and not, 1 to 120 words, 1 to 24 tokens out) equal a plain
one-rank server's text, and each decode server imported every prompt. A dense model's ranks split
their K/V heads: --role with --tp on it is refused at start-up in one line.
    pd_tensor_parallel.py TACHYON TOKENIZERS_DIR"""
import os
import random
import subprocess
import sys
from pd_cluster import DEVICE, Cluster, answers, expect_same_answers, greedy_request, metric

if DEVICE != "cpu":
    sys.exit(0)  # --role with --tp runs on CPU thread ranks only (refused on cuda)
tachyon, tokenizers = sys.argv[1], sys.argv[2]
cluster = Cluster(tachyon, tokenizers)
count = 60
try:
    def make(arch, preset, name):
        out = os.path.join(cluster.work, name)
        subprocess.run([tachyon, "make-model", "--arch", arch, "--preset", preset, "--seed", "3", "--tokenizer",
                        os.path.join(tokenizers, "llama3"), "--out", out], check=True, stdout=subprocess.DEVNULL)
        return out

    dense = make("qwen3", "tiny", "dense")
    run = subprocess.run([tachyon, "serve", dense, "--device", "cpu", "--port", "0", "--tp", "2", "--role", "prefill"],
                         capture_output=True, text=True, timeout=60)
    lines = (run.stdout + run.stderr).strip().splitlines()
    if run.returncode == 0 or not any("this runner cannot move its KV cache" in line for line in lines):
        sys.exit(f"--role prefill --tp 2 on a dense model: expected a refusal, got {run.returncode}: {lines}")
    print("refused: " + next(line for line in lines if "cannot move its KV cache" in line))
    cluster.model = make("deepseek_v3", "tiny-deepseek", "deepseek")
    prefill = cluster.serve("prefill", "--role", "prefill", "--tp", "2")
    decoders = {"tp2": cluster.serve("decode-tp2", "--role", "decode", "--tp", "2", "--block-size", "8"),
                "tp1": cluster.serve("decode-tp1", "--role", "decode", "--block-size", "8")}
    plain = cluster.serve("plain")
    rng = random.Random(13)
    words = "the quick brown fox jumps over a lazy dog while seven tiny robots count prime numbers".split()

    def request(i):
        return greedy_request(i, " ".join(rng.choice(words) for _ in range(1 + rng.randrange(120))),
                              1 + rng.randrange(24))

    requests = [request(i) for i in range(count)]
    want = answers(plain.url, requests)
    for name, decode in decoders.items():
        router = cluster.router([prefill], [decode], name="router-" + name)
        expect_same_answers(f"prefill tp2 -> decode {name}", answers(router.url, requests), want)
        imports = metric(decode.url, "tachyon:kv_transfer_imports_total")
        print(f"decode {name}: {imports:.0f} prompts imported")
        if imports != count:
            sys.exit(f"decode {name}: every request should decode from pulled KV")
    print("pd_tensor_parallel: all checks passed")
finally:
    cluster.close()
