"""server.pd_speculative: a decode server that verifies drafts over imported prompts. 120 greedy
requests (completions and chat, streamed and not, prompts of a phrase said several times so that
n-gram lookups hit, 4 to 32 tokens out), 16 at a time, through a prefill server, the router and a
decode server with n-gram drafts, then with a draft model (the served model itself: a random
other model of a 151K-token vocabulary would agree with it on almost no token, and self-drafts are
accepted only if the draft model built its own cache of the imported prompt), equal a plain
server's answers text for text; the decode server imported every prompt and accepted drafts. On
the CPU, and with every server on the GPU (TACHYON_PD_DEVICE=cuda, scripts/gpu-test.sh: one
request at a time, the prompts' KV copied by reference). n-gram and draft-model drafts on the
prefill role and MTP on a GPU decode server are refused in one line (MTP across the roles on the
CPU: pd_mtp.py).
    pd_speculative.py TACHYON TOKENIZERS_DIR"""
import random
import sys
from pd_cluster import DEVICE, Cluster, answers, expect_refused, expect_same_answers, greedy_request, metric

tachyon, tokenizers = sys.argv[1], sys.argv[2]
# On the GPU one request at a time: its kernels sum in a batch-dependent order (pd_equivalence.py),
# and the decode server keeps the default block size (the cache is sized for it: gpu_cache_args).
at_once = 1 if DEVICE == "cuda" else 16
block_size = [] if DEVICE == "cuda" else ["--block-size", "8"]
cluster = Cluster(tachyon, tokenizers)
count = 120
try:
    for args in (["--device", "cpu", "--role", "prefill", "--speculative-method", "ngram", "--num-speculative-tokens", "2"],
                 ["--device", "cpu", "--role", "prefill", "--speculative-method", "draft", "--num-speculative-tokens", "2"],
                 ["--device", "cuda", "--role", "decode", "--speculative-method", "mtp", "--num-speculative-tokens", "2"]):
        expect_refused(tachyon, cluster.model, args)
    prefill = cluster.serve("prefill", "--role", "prefill")
    plain = cluster.serve("plain")
    rng = random.Random(5)
    words = "the quick brown fox jumps over a lazy dog while seven tiny robots count prime numbers".split()

    def request(i):
        phrase = " ".join(rng.choice(words) for _ in range(2 + rng.randrange(5)))
        return greedy_request(i, " ".join([phrase] * (2 + rng.randrange(4))), 4 + rng.randrange(29))

    requests = [request(i) for i in range(count)]
    want = answers(plain.url, requests, at_once)
    drafters = {"ngram": ["--speculative-method", "ngram", "--num-speculative-tokens", "3", "--ngram-min", "1",
                          "--ngram-max", "2"],
                "draft": ["--speculative-method", "draft", "--num-speculative-tokens", "3",
                          "--draft-model", cluster.model]}
    for name, flags in drafters.items():
        decode = cluster.serve("decode-" + name, "--role", "decode", *block_size, *flags)
        router = cluster.router([prefill], [decode], name="router-" + name)
        # On the GPU a verify step of 1 + k rows rounds otherwise than one-row decodes: its
        # tokens equal the plain run's up to near ties (tests/gpu/test_cuda_speculative.cpp reads
        # the logit gaps; a PD answer carries no logprobs), so a few answers may part after their
        # start: on the H200, 3 of 120 with the draft model (every step a 4-row verify), at 43%,
        # 71% and 95% of the plain text; n-gram drafts 120 of 120.
        ties = {"near_ties": 6, "agree_share": 0.25} if DEVICE == "cuda" else {}
        expect_same_answers(name, answers(router.url, requests, at_once), want, **ties)
        imports = metric(decode.url, "tachyon:kv_transfer_imports_total")
        drafted = metric(decode.url, "tachyon:spec_decode_num_draft_tokens_total")
        accepted = metric(decode.url, "tachyon:spec_decode_num_accepted_tokens_total")
        print(f"{name}: {imports:.0f} prompts imported; {accepted:.0f} of {drafted:.0f} draft tokens accepted")
        if imports != count:
            sys.exit(f"{name}: every request should decode from pulled KV")
        if accepted <= 0:
            sys.exit(f"{name}: the decode server accepted no draft")
    print("pd_speculative: all checks passed")
finally:
    cluster.close()
