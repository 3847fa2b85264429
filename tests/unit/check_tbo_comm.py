#!/usr/bin/env python3
"""Two-batch overlap's comm rule, enforced: every communication of a TBO step goes through the
comm-phase helper (src/tachyon/runner/tbo_comm_phase.*), which declares the buffers each phase
reads and writes and the events that end their use, and records them for the happens-before
checker (runner/tbo_order.h). A collective called anywhere else in the TBO path is a phase written
by hand: its buffers are not in the trace, so the checker cannot see a race on them.

The TBO path is every src/tachyon/{runner,model}/tbo_* file. In them, a call of a communicator
method (all_reduce, all_gather, all_gatherv, all_to_all_v, reduce_scatter, broadcast, send, recv,
send_recv, barrier) through `.` or `->` is refused unless the receiver is the helper itself
(`phases` / `phases_`, a TboCommPhases) or the file is the helper. Run:
    tests/unit/check_tbo_comm.py src/tachyon      (ctest -R unit.tbo_comm)
Exit status 1 lists every direct call.
"""
import os
import re
import sys

HELPER = {"runner/tbo_comm_phase.cpp", "runner/tbo_comm_phase.h"}
HELPER_RECEIVERS = {"phases", "phases_"}
METHODS = "all_reduce|all_gatherv|all_gather|all_to_all_v|reduce_scatter|broadcast|send_recv|send|recv|barrier"
CALL = re.compile(r"([A-Za-z_][A-Za-z_0-9]*)\s*(?:\.|->)\s*(" + METHODS + r")\s*\(")


def strip_comments(line):
    return line.split("//", 1)[0]


def main(root):
    errors = []
    files = 0
    for module in ("runner", "model"):
        directory = os.path.join(root, module)
        for name in sorted(os.listdir(directory)):
            if not name.startswith("tbo_") or not name.endswith((".h", ".cpp")):
                continue
            files += 1
            relative = f"{module}/{name}"
            if relative in HELPER:
                continue
            with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    for match in CALL.finditer(strip_comments(line)):
                        if match.group(1) in HELPER_RECEIVERS:
                            continue
                        errors.append(f"{relative}:{number}: {match.group(1)}.{match.group(2)}(...) calls a "
                                      "communicator directly; route it through the comm-phase helper "
                                      "(runner/tbo_comm_phase.h)")
    if files == 0:
        errors.append(f"no TBO files under {root}/runner or {root}/model")
    for error in errors:
        print(error)
    print(f"check_tbo_comm: {len(errors)} direct communicator call(s) in {files} TBO files")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "src/tachyon"))
