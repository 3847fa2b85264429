"""server.pd_tensor_parallel: prefill and decode servers of tensor-parallel CPU ranks, for a tiny
DeepSeek-V3 (latent attention: every rank caches whole latent rows, so the KV moves as one rank's
rows; with --dcp 2 each rank caches its tokens' rows, joined and split by token; with --dp 2 each
replica caches its own sequences, and the decode server spreads the imported prompts over both
replicas, checked in its placement record) and a tiny Qwen3
(dense attention: each rank caches its K/V heads, so the rows are joined from and split into the
ranks' heads), both with Llama-3's tokenizer (whose vocabulary divides by --tp 2). For each
model, 60 greedy requests (completions and chat, streamed and not, 1 to 120 words, 1 to 24
tokens out) through a router per route:
- a prefill and a decode server of the same layout (--tp 2; DeepSeek also --tp 2 --dcp 2 with
  interleave 2, --dp 2, --tp 2 with expert parallelism and two-batch overlap, --tp 2 --pcp 2; Qwen3
  also --pcp 2) equal a plain server of that layout, also with the decode server verifying n-gram
  drafts (--tp 2 for Qwen3, --dcp 2 for DeepSeek; some accepted);
- a prefill server of each of those layouts with a one-rank decode server, and a one-rank
  prefill server with a decode server of each, equal the plain server of the decode server's
  layout, but for at most 3 answers that part after their first half: the prompt's KV was
  computed by ranks whose sums are ordered otherwise than the plain server's, so a late near-tie
  may go the other way (a decode server writing only rank 0's cache agrees on about 2 of 60);
and each decode server imported every prompt. MODEL (deepseek or dense) runs that model's routes
alone (ctest runs the two as server.pd_tensor_parallel_latent and _dense, side by side).
    pd_tensor_parallel.py TACHYON TOKENIZERS_DIR [MODEL]"""
import os
import random
import re
import signal
import subprocess
import sys
from pd_cluster import DEVICE, Cluster, answers, expect_same_answers, greedy_request, metric

if DEVICE != "cpu":
    sys.exit(0)  # --role with --tp runs on CPU thread ranks only (refused on cuda)
tachyon, tokenizers = sys.argv[1], sys.argv[2]
only = sys.argv[3] if len(sys.argv) > 3 else None
if only not in (None, "deepseek", "dense"):
    sys.exit(f"unknown model {only!r}: deepseek or dense")
cluster = Cluster(tachyon, tokenizers)
count = 60
try:
    def make(arch, preset, name):
        out = os.path.join(cluster.work, name)
        subprocess.run([tachyon, "make-model", "--arch", arch, "--preset", preset, "--seed", "3", "--tokenizer",
                        os.path.join(tokenizers, "llama3"), "--out", out], check=True, stdout=subprocess.DEVNULL)
        return out

    # Each model's layouts, and the routes between them (prefill layout, decode layout); a decode
    # layout "X+ngram" is X verifying n-gram drafts, compared with the plain X server.
    dcp = ["--tp", "2", "--dcp", "2", "--dcp-kv-cache-interleave-size", "2"]
    ngram = ["--speculative-method", "ngram", "--num-speculative-tokens", "3", "--ngram-min", "1", "--ngram-max", "2"]
    models = (("deepseek_v3", "tiny-deepseek", "deepseek",
               {"tp2": ["--tp", "2"], "tp1": [], "dcp2": dcp, "dp2": ["--dp", "2"],
                "ep2": ["--tp", "2", "--enable-expert-parallel", "--enable-two-batch-overlap"],
                "pcp2": ["--tp", "2", "--pcp", "2"]},
               (("tp2", "tp2"), ("tp2", "tp1"), ("tp1", "tp2"), ("dcp2", "dcp2"), ("dcp2", "tp1"), ("tp1", "dcp2"),
                ("dcp2", "dcp2+ngram"), ("dp2", "dp2"), ("dp2", "tp1"), ("tp1", "dp2"), ("ep2", "ep2"),
                ("ep2", "tp1"), ("tp1", "ep2"), ("pcp2", "pcp2"), ("pcp2", "tp1"), ("tp1", "pcp2"))),
              ("qwen3", "tiny", "dense", {"tp2": ["--tp", "2"], "tp1": [], "pcp2": ["--pcp", "2"]},
               (("tp2", "tp2"), ("tp2", "tp1"), ("tp1", "tp2"), ("tp2", "tp2+ngram"), ("pcp2", "pcp2"),
                ("pcp2", "tp1"), ("tp1", "pcp2"))))
    for arch, preset, name, layouts, routes in models:
        if only is not None and name != only:
            continue
        cluster.model = make(arch, preset, name)
        prefills = {ranks: cluster.serve(f"{name}-prefill-{ranks}", "--role", "prefill", *args)
                    for ranks, args in layouts.items()}
        decoders = {ranks: cluster.serve(f"{name}-decode-{ranks}", "--role", "decode", "--block-size", "8", *args)
                    for ranks, args in layouts.items()}
        for ranks in {decode for _, decode in routes if decode.endswith("+ngram")}:
            decoders[ranks] = cluster.serve(f"{name}-decode-{ranks}", "--role", "decode", "--block-size", "8",
                                            *layouts[ranks.split("+")[0]], *ngram)
        plains = {ranks: cluster.serve(f"{name}-plain-{ranks}", *args) for ranks, args in layouts.items()}
        rng = random.Random(13)
        words = "the quick brown fox jumps over a lazy dog while seven tiny robots count prime numbers".split()

        def request(i):
            return greedy_request(i, " ".join(rng.choice(words) for _ in range(1 + rng.randrange(120))),
                                  1 + rng.randrange(24))

        requests = [request(i) for i in range(count)]
        want = {ranks: answers(plain.url, requests) for ranks, plain in plains.items()}
        for route in routes:
            prefill, decode = prefills[route[0]], decoders[route[1]]
            before = metric(decode.url, "tachyon:kv_transfer_imports_total")
            router = cluster.router([prefill], [decode], name=f"router-{name}-{route[0]}-{route[1]}")
            layout = route[1].split("+")[0]
            expect_same_answers(f"{name}: prefill {route[0]} -> decode {route[1]}", answers(router.url, requests),
                                want[layout], near_ties=0 if route[0] == layout else 3)
            imports = metric(decode.url, "tachyon:kv_transfer_imports_total") - before
            print(f"{name}: prefill {route[0]} -> decode {route[1]}: {imports:.0f} prompts imported")
            if imports != count:
                sys.exit(f"{name}: decode {route[1]}: every request should decode from pulled KV")
            if route[1].endswith("+ngram"):
                accepted = metric(decode.url, "tachyon:spec_decode_num_accepted_tokens_total")
                print(f"{name}: decode {route[1]}: {accepted:.0f} draft tokens accepted")
                if not accepted:
                    sys.exit(f"{name}: decode {route[1]} accepted no draft token")
        if "pcp2" in decoders:  # the same prompts sent to the decode server itself hit the imported
            # blocks in its prefix cache, and prefill the rest over both PCP groups: each group must
            # hold the imported rows
            expect_same_answers(f"{name}: decode pcp2 serving the imported prompts itself",
                                answers(decoders["pcp2"].url, requests), want["pcp2"], near_ties=3)
        if "dp2" in decoders:  # the imported prompts were spread over both replicas
            decoders["dp2"].kill(signal.SIGTERM)
            log = open(decoders["dp2"].log_path).read()
            placed = re.search(r"imported prompt tokens per replica: (\d+) (\d+)", log)
            print(f"{name}: decode dp2: imported prompt tokens per replica: {placed and placed.groups()}")
            if not placed or int(placed.group(1)) == 0 or int(placed.group(2)) == 0:
                sys.exit(f"{name}: decode dp2 should import prompts into both replicas:\n{log[-2000:]}")
    print("pd_tensor_parallel: all checks passed")
finally:
    cluster.close()
