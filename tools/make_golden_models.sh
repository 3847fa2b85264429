#!/usr/bin/env bash
# Writes every model of a goldens manifest (default tests/data/goldens/manifest.json; also
# moe_, deepseek_, dsa_, glm_manifest.json ...) with `tachyon make-model` into OUT_DIR/<name>
# (default out/golden-models), for tools/make_goldens.py on the GPU machine.
#   tools/make_golden_models.sh [OUT_DIR] [MANIFEST]   (MANIFEST default: tests/data/goldens/manifest.json)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-out/golden-models}
MANIFEST=${2:-tests/data/goldens/manifest.json}
TACHYON=${TACHYON:-build/bin/tachyon}
python3 - "$OUT_DIR" "$TACHYON" "$MANIFEST" <<'PY'
import json, subprocess, sys
out_dir, tachyon, manifest_path = sys.argv[1], sys.argv[2], sys.argv[3]
manifest = json.load(open(manifest_path))
for v in manifest["variants"]:
    cmd = [tachyon, "make-model", "--arch", v["arch"], "--preset", v["preset"], "--seed", str(v["seed"]),
           "--dtype", v["dtype"], "--shard-size", str(v["shard_size"]), "--out", f"{out_dir}/{v['name']}"]
    if v.get("quantization"):  # fp8_manifest.json: an FP8 checkpoint in that format
        cmd += ["--quantization-format", v["quantization"]]
    subprocess.run(cmd, check=True)
PY
