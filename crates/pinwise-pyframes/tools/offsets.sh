#!/usr/bin/env bash
# Prints, for each CPython install given (a prefix such as ~/.pyenv/versions/3.12.1), the
# offsets src/layout.rs uses, compiled from that install's headers. Usage:
#   tools/offsets.sh PREFIX... > tools/offsets.txt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for prefix in "$@"; do
  inc=$(ls -d "$prefix"/include/python3.*)
  gcc -I"$inc" -I"$inc/internal" "$here/offsets.c" -o "$tmp/offsets"
  minor=$("$tmp/offsets" | sed -n 's/^version \(3\.[0-9]*\).*/\1/p')
  echo "== $minor"
  "$tmp/offsets"
done
