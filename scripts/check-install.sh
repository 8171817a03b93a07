#!/usr/bin/env bash
# CI check of the install path: scripts/install.sh --debug into a temporary root (reusing
# the debug build scripts/test.sh just made), then the installed `pinwise` must find its
# preload library in ROOT/lib/pinwise and run a program through it, and the man page and
# completion must be there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(mktemp -d)
trap 'rm -rf "$ROOT"' EXIT
bash scripts/install.sh --debug --root "$ROOT"
fail() { echo "[check-install] FAILED: $*" >&2; exit 1; }
[[ -x $ROOT/bin/pinwise ]] || fail "no $ROOT/bin/pinwise"
[[ -f $ROOT/share/man/man1/pinwise-run.1 ]] || fail "no man page pinwise-run.1"
grep -q pinwise "$ROOT/share/bash-completion/completions/pinwise" || fail "no bash completion"
# The preload library is found in ROOT/lib/pinwise (not beside the binary, not by env).
env -u PINWISE_PRELOAD_LIB "$ROOT/bin/pinwise" doctor --no-bpf --json >"$ROOT/doctor.json" || true
python3 - "$ROOT" <<'PY' || fail "doctor does not find the installed preload library"
import json, sys
root = sys.argv[1]
d = json.load(open(root + "/doctor.json"))
item = next(i for i in d["items"] if i["name"] == "preload library")
assert item["state"] == "ok" and item["detail"].startswith(root + "/lib/pinwise/"), item
PY
# And `pinwise run` injects it: the program sees it in LD_PRELOAD, and the library, loaded,
# writes the statistics pinwise summarizes (python3 runs its exit handlers; dash does not).
out=$(env -u PINWISE_PRELOAD_LIB "$ROOT/bin/pinwise" run -- \
  python3 -c 'import os; print(os.environ["LD_PRELOAD"])' 2>"$ROOT/run.err")
[[ $out == *"$ROOT/lib/pinwise/libpinwise_preload.so"* ]] || fail "LD_PRELOAD was: $out"
grep -q "pinned requests" "$ROOT/run.err" || fail "no statistics from the library: $(cat "$ROOT/run.err")"
echo "[check-install] ok: cargo install into a temporary root finds and injects the preload library"
