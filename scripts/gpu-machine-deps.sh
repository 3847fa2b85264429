#!/usr/bin/env bash
# The GPU machine (Ubuntu 24.04) has no package registry and lacks three of our -dev packages.
# On the dev machine, `scripts/gpu-machine-deps.sh fetch` downloads Debian's .debs into .deps/
# (ignored by git, carried to the GPU machine); there, `scripts/gpu-machine-deps.sh install`
# unpacks them. The runtime libraries they need (libpcre2-8 10.42, libxxhash 0.8) are already
# on that machine; utf8proc's runtime travels with them.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2 libxxhash-dev)

case "${1:-}" in
  fetch)
    mkdir -p .deps
    (cd .deps && apt-get download "${PACKAGES[@]}")
    ls .deps
    ;;
  install)
    for deb in .deps/*.deb; do dpkg -x "$deb" /; done
    ldconfig
    ;;
  *)
    echo "usage: $0 fetch|install" >&2
    exit 2
    ;;
esac
