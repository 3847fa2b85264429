#!/usr/bin/env bash
# The GPU machine (Ubuntu 24.04) has no package registry and lacks five of our -dev packages
# (pcre2, utf8proc, xxhash, cpp-httplib with the headers its pkg-config file asks for, and the
# Boost headers the HTTP server is built on).
# On the dev machine, `scripts/gpu-machine-deps.sh fetch` downloads Debian's .debs into .deps/
# (ignored by git, carried to the GPU machine); there, `scripts/gpu-machine-deps.sh install`
# unpacks them, never over a file that machine already has (its own libssl/zlib headers and
# symlinks win). The runtime libraries they need (libpcre2-8 10.42, libxxhash 0.8, libssl3,
# zlib, brotli) are already on that machine; utf8proc's and cpp-httplib's travel with them.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2 libxxhash-dev
          libcpp-httplib-dev libcpp-httplib0.11 libssl-dev zlib1g-dev libbrotli-dev libboost1.74-dev libboost-dev)

case "${1:-}" in
  fetch)
    mkdir -p .deps
    (cd .deps && apt-get download "${PACKAGES[@]}")
    ls .deps
    ;;
  install)
    staging=$(mktemp -d)
    for deb in .deps/*.deb; do
      # Boost's headers come whole or not at all: never mix Debian's into a Boost already there.
      case "$deb" in *libboost*) [ -e /usr/include/boost/version.hpp ] && continue ;; esac
      dpkg -x "$deb" "$staging"
    done
    (cd "$staging" && find . -type f -o -type l) | while read -r path; do
      target=/${path#./}
      if [ ! -e "$target" ] && [ ! -L "$target" ]; then
        mkdir -p "$(dirname "$target")"
        cp -P "$staging/$path" "$target"
      fi
    done
    rm -rf "$staging"
    ldconfig
    ;;
  *)
    echo "usage: $0 fetch|install" >&2
    exit 2
    ;;
esac
