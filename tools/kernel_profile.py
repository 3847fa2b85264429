#!/usr/bin/env python3
"""Per-kernel device times of one decode step (or one prefill), from two Nsight Compute runs.

scripts/gpu-profile.sh runs `tachyon bench latency` under ncu twice, with N and N + 1 output
tokens (eager, one iteration, no warm-up). The second run launches exactly one more decode step,
so its kernels past the first run's count are that step, in launch order. This prints them with
their device times (ncu serializes kernels: each time is the kernel alone, with no overlap), the
step's total, and the kernels grouped by name.

  tools/kernel_profile.py SHORT.csv LONG.csv [--json OUT.json] [--top N]

The CSVs are ncu's `--csv --log-file` output with the metric gpu__time_duration.sum.
"""
import argparse
import csv
import json
import re
import signal
import sys
from collections import OrderedDict


def load(path):
    """[(kernel name, grid, block, ns)] in launch order; ncu's own log lines are skipped."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = []
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        scale = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(unit)
        if scale is None:
            raise ValueError(f"{path}: unknown time unit {unit!r}")
        rows.append((r["Kernel Name"], r.get("Grid Size", ""), r.get("Block Size", ""), value * scale))
    return rows


def short_name(name):
    """The kernel's name without namespaces, argument list or return type."""
    name = name.replace("(anonymous namespace)", "").replace("<unnamed>", "")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the argument list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = re.sub(r"^(void|float|int) ", "", name[:cut])
    return re.sub(r"(?:\w*::)+", "", name)  # namespaces, in the template arguments too


def one_step(short_rows, long_rows):
    if len(long_rows) <= len(short_rows):
        raise ValueError(f"the longer run launched {len(long_rows)} kernels, the shorter {len(short_rows)}: "
                         "give the second run one more output token (a prefill: one more iteration)")
    head = [r[0] for r in long_rows[: len(short_rows)]]
    if head != [r[0] for r in short_rows]:
        raise ValueError("the two runs launched different kernels before the extra step")
    return long_rows[len(short_rows):]


def summarize(step):
    kernels = [{"kernel": short_name(k), "grid": g, "block": b, "us": round(ns / 1e3, 3)} for k, g, b, ns in step]
    grouped = OrderedDict()
    for k in kernels:
        entry = grouped.setdefault(k["kernel"], {"kernel": k["kernel"], "launches": 0, "us": 0.0})
        entry["launches"] += 1
        entry["us"] = round(entry["us"] + k["us"], 3)
    by_name = sorted(grouped.values(), key=lambda e: -e["us"])
    return {"kernels": kernels, "total_us": round(sum(k["us"] for k in kernels), 3), "by_name": by_name}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("short_csv")
    parser.add_argument("long_csv")
    parser.add_argument("--json", help="also write the summary here")
    parser.add_argument("--top", type=int, default=0, help="print only the N costliest kernel names")
    parser.add_argument("--what", default="one decode step",
                        help="what the longer run's extra kernels are (the summary's first words)")
    args = parser.parse_args(argv)
    summary = summarize(one_step(load(args.short_csv), load(args.long_csv)))
    print(f"{args.what}: {len(summary['kernels'])} kernels, {summary['total_us']:.1f} us of device time (serialized)")
    if args.top == 0:
        for k in summary["kernels"]:
            print(f"{k['us']:9.2f} us  {k['kernel']:<60} grid {k['grid']} block {k['block']}")
        print()
    print(f"{'us':>9}  {'share':>6}  {'launches':>8}  kernel")
    shown = summary["by_name"][: args.top] if args.top else summary["by_name"]
    for e in shown:
        print(f"{e['us']:9.2f}  {100 * e['us'] / summary['total_us']:5.1f}%  {e['launches']:8d}  {e['kernel']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly
    try:
        main(sys.argv[1:])
    except (OSError, ValueError) as e:
        print(f"kernel_profile: {e}", file=sys.stderr)
        sys.exit(1)
