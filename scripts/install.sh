#!/usr/bin/env bash
# Installs pinwise from this checkout: the `pinwise` binary (cargo install) into ROOT/bin,
# the preload library `pinwise run` injects into ROOT/lib/pinwise/, the manual pages into
# ROOT/share/man/man1 and the bash completion into ROOT/share/bash-completion/completions.
#
#   bash scripts/install.sh                  # ROOT = ~/.cargo (the binary lands in ~/.cargo/bin)
#   bash scripts/install.sh --root /usr/local
#   bash scripts/install.sh --debug --root /tmp/pw   # unoptimized, reusing target/debug (CI)
#
# The build happens in this checkout's target directory (or $CARGO_TARGET_DIR), so a
# release build already there is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="${CARGO_HOME:-$HOME/.cargo}"
PROFILE=release
while (($#)); do
  case "$1" in
    --root) ROOT="$2"; shift 2 ;;
    --debug) PROFILE=debug; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
TARGET="${CARGO_TARGET_DIR:-target}"
flags=(--locked --target-dir "$TARGET")
[[ $PROFILE == debug ]] && install_flags=(--debug) || install_flags=()
build_flags=(); [[ $PROFILE == release ]] && build_flags=(--release)

cargo install "${flags[@]}" "${install_flags[@]}" --force --path crates/pinwise-cli --root "$ROOT"
cargo build "${flags[@]}" "${build_flags[@]}" -p pinwise-preload
install -D -m 0755 "$TARGET/$PROFILE/libpinwise_preload.so" "$ROOT/lib/pinwise/libpinwise_preload.so"
mkdir -p "$ROOT/share/man/man1" "$ROOT/share/bash-completion/completions"
"$ROOT/bin/pinwise" man --out-dir "$ROOT/share/man/man1" >/dev/null
"$ROOT/bin/pinwise" completions bash >"$ROOT/share/bash-completion/completions/pinwise"
echo "[install] $ROOT/bin/pinwise, $ROOT/lib/pinwise/libpinwise_preload.so, man pages, bash completion"
