#!/usr/bin/env bash
# Runs the GPU test binaries (BUILD_DIR/tests/gpu_*) one after another, each binary once with all
# its cases, and prints one summary from their gtest XML reports. ctest runs a process per case:
# each pays the CUDA context, the cuBLAS handles and the runner's start again, and the GPU suite
# no longer fitted one call on the GPU machine. One binary at a time, as ctest's RUN_SERIAL did:
# a runner sizes its KV cache from what the whole GPU has free, so two at once would starve.
#   scripts/gpu-test-binaries.sh BUILD_DIR OUT_DIR [REGEX]
# REGEX picks binaries by the name after gpu_ (default: all), e.g. 'cuda_fp8|gemv'.
# OUT_DIR receives <binary>.log and <binary>.xml. Exit status 0 when every picked binary ran
# to its end and no case failed.
set -uo pipefail
build=$1
out=$2
pick=${3:-.*}
mkdir -p "$out"
rc=0
for bin in "$build"/tests/gpu_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  [[ "${name#gpu_}" =~ ^($pick)$ ]] || continue
  start=$(date +%s)
  OMP_NUM_THREADS=$(nproc) timeout "${GPU_TEST_TIMEOUT:-900}" "$bin" --gtest_output="xml:$out/$name.xml" \
    > "$out/$name.log" 2>&1
  status=$?
  echo "$name: exit $status in $(( $(date +%s) - start )) s"
  [ $status = 0 ] || rc=1
done
python3 - "$out" <<'EOF' || rc=1
import glob, os, sys
import xml.etree.ElementTree as ET
out = sys.argv[1]
total = failed = skipped = 0
failures = []
for path in sorted(glob.glob(os.path.join(out, "*.xml"))):
    for case in ET.parse(path).getroot().iter("testcase"):
        total += 1
        name = f"{os.path.basename(path)[:-4]}: {case.get('classname')}.{case.get('name')}"
        if case.find("failure") is not None:
            failed += 1
            failures.append(name)
        elif case.find("skipped") is not None or case.get("result") == "skipped":
            skipped += 1
print(f"== GPU tests: {total - failed - skipped} passed, {skipped} skipped, {failed} failed of {total}")
for name in failures:
    print("   FAILED", name)
sys.exit(1 if failed else 0)
EOF
exit $rc
