#!/usr/bin/env python3
"""Checks that two `tachyon eval` reports hold the same completion for every sample (a run with
speculative decoding or tensor parallelism against the plain run), and that the strict and
flexible scores over them agree; prints the speculative acceptance read from the second run's
/metrics dump when given. Exit 1 on any difference.
  tools/compare_eval_samples.py [--prefix] PLAIN_EVAL_JSON OTHER_EVAL_JSON [OTHER_METRICS_TXT]
--prefix: the other run is shorter and is compared with the plain run's first samples (the canary
task's first K problems are the same whatever its size, tools/make_canary_task.py).
"""
import json
import re
import sys


def main():
    args = sys.argv[1:]
    prefix = args[:1] == ["--prefix"]
    if prefix:
        args = args[1:]
    plain, other = (json.load(open(p)) for p in args[:2])
    a, b = plain["samples"], other["samples"]
    if prefix:
        a = a[:len(b)]
    if len(a) != len(b) or not b:
        print(f"sample counts differ: the plain run {len(plain['samples'])}, the other {len(b)}")
        return 1
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x["completion"] != y["completion"]]
    scores_differ = False
    for key in ("strict_correct", "flexible_correct"):
        mine, theirs = sum(s[key] for s in b), sum(s[key] for s in a)
        print(f"{key}: {mine}/{len(b)}, the plain run {theirs}/{len(a)}")
        scores_differ = scores_differ or mine != theirs
    print(f"completions identical: {len(b) - len(differ)}/{len(b)}")
    for i in differ[:3]:
        print(f"  sample {i}: {a[i]['completion']!r} vs {b[i]['completion']!r}")
    if len(args) > 2:
        text = open(args[2]).read()

        def total(name):
            m = re.search(r"^tachyon:" + name + r"\{[^}]*\} ([0-9.e+]+)$", text, re.M)
            return float(m.group(1)) if m else 0.0

        drafted, accepted, drafts = (total(n) for n in ("spec_decode_num_draft_tokens_total",
                                                       "spec_decode_num_accepted_tokens_total",
                                                       "spec_decode_num_drafts_total"))
        rate = accepted / drafted if drafted else 0.0
        length = 1 + accepted / drafts if drafts else 1.0
        print(f"speculative: {accepted:.0f} of {drafted:.0f} draft tokens accepted ({100 * rate:.1f}%), "
              f"mean acceptance length {length:.2f} over {drafts:.0f} drafts")
    return 1 if differ or scores_differ else 0


if __name__ == "__main__":
    sys.exit(main())
