#!/usr/bin/env bash
# Builds the Python wheel (python/pyproject.toml, with maturin): the `pinwise` binary in the
# wheel's scripts, the preload library as <prefix>/lib/pinwise/libpinwise_preload.so and the
# manual pages as <prefix>/share/man/man1 (the wheel's data, staged into python/wheel-data/ first),
# and the Python API (python/src/pinwise).
#
#   bash scripts/build-wheel.sh                       # release build, wheel in target/wheels
#   bash scripts/build-wheel.sh --debug --out DIR     # unoptimized, reusing target/debug (CI)
#
# maturin comes from PyPI (`pip install maturin`, in a venv): $MATURIN, else `maturin` on
# PATH. The builds happen in this checkout's target directory (or $CARGO_TARGET_DIR), so
# what is built there already is reused. The wheel is tagged for the glibc this machine's
# build needs (maturin checks it against the manylinux policies).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=release
OUT=target/wheels
while (($#)); do
  case "$1" in
    --debug) PROFILE=debug; shift ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build-wheel.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
MATURIN="${MATURIN:-maturin}"
command -v "$MATURIN" >/dev/null || {
  echo "build-wheel.sh: maturin not found: pip install maturin (in a venv), or set MATURIN" >&2
  exit 1
}
TARGET="${CARGO_TARGET_DIR:-target}"
cargo_profile=release; [[ $PROFILE == debug ]] && cargo_profile=dev

# Each package on its own, as scripts/install.sh builds them (features are unified over the
# packages built together, so this finds scripts/check-install.sh's build fresh).
for package in pinwise-preload pinwise-cli; do
  cargo build --locked --target-dir "$TARGET" --profile "$cargo_profile" -p "$package"
done
rm -rf python/wheel-data
DATA=python/wheel-data/data
install -D -m 0755 "$TARGET/$PROFILE/libpinwise_preload.so" "$DATA/lib/pinwise/libpinwise_preload.so"
# Debug information is most of an unoptimized library's size: the wheel carries none.
if command -v strip >/dev/null; then strip --strip-debug "$DATA/lib/pinwise/libpinwise_preload.so"; fi
mkdir -p "$DATA/share/man/man1"
"$TARGET/$PROFILE/pinwise" man --out-dir "$DATA/share/man/man1" >/dev/null

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TARGET=$(cd "$TARGET" && pwd)
# A release wheel's binary is stripped (a relink); a debug one is packed as built, so that
# maturin's cargo call finds everything fresh.
strip=(); [[ $PROFILE == release ]] && strip=(--strip)
# maturin reads python/pyproject.toml (which names crates/pinwise-cli) from its directory.
(cd python && CARGO_TARGET_DIR="$TARGET" "$MATURIN" build --locked --profile "$cargo_profile" \
  "${strip[@]}" --out "$OUT")
echo "[build-wheel] $(ls "$OUT"/pinwise-*.whl)"
