#!/usr/bin/env bash
# Writes every model of tests/data/goldens/manifest.json with `tachyon make-model` into
# OUT_DIR/<name> (default out/golden-models), for tools/make_goldens.py on the GPU machine.
#   tools/make_golden_models.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-out/golden-models}
TACHYON=${TACHYON:-build/bin/tachyon}
python3 - "$OUT_DIR" "$TACHYON" <<'PY'
import json, subprocess, sys
out_dir, tachyon = sys.argv[1], sys.argv[2]
manifest = json.load(open("tests/data/goldens/manifest.json"))
for v in manifest["variants"]:
    cmd = [tachyon, "make-model", "--arch", v["arch"], "--preset", v["preset"], "--seed", str(v["seed"]),
           "--dtype", v["dtype"], "--shard-size", str(v["shard_size"]), "--out", f"{out_dir}/{v['name']}"]
    subprocess.run(cmd, check=True)
PY
