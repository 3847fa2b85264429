#!/usr/bin/env python3
"""Checks that two `tachyon eval` reports hold the same completion for every sample (a run with
speculative decoding against the plain run), and prints the speculative acceptance read from the
second run's /metrics dump. Exit 1 on any difference.
  tools/compare_eval_samples.py PLAIN_EVAL_JSON SPEC_EVAL_JSON [SPEC_METRICS_TXT]
"""
import json
import re
import sys


def main():
    plain, spec = (json.load(open(p)) for p in sys.argv[1:3])
    a, b = plain["samples"], spec["samples"]
    if len(a) != len(b):
        print(f"sample counts differ: {len(a)} vs {len(b)}")
        return 1
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x["completion"] != y["completion"]]
    print(f"completions identical: {len(a) - len(differ)}/{len(a)}; strict accuracy "
          f"{plain['strict']['correct']} vs {spec['strict']['correct']}")
    for i in differ[:3]:
        print(f"  sample {i}: {a[i]['completion']!r} vs {b[i]['completion']!r}")
    if len(sys.argv) > 3:
        text = open(sys.argv[3]).read()

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
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
