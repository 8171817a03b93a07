# Sourced by bench/gpu/redundant/run.sh and async.sh after `set -u`: the repository root
# (the working directory from then on), the release binaries (PINWISE and PRELOAD_LIB
# override them), PYTHON, CUDA, BUDGET_S (default 480), STEPS (default 30), the clock the
# budget counts from, and:
#   setup_dir DIR    creates DIR (the caller's $dir), exits 2 when a binary is missing,
#                    mounts tracefs for `pinwise trace`, writes DIR/machine.txt;
#   over_budget [MARGIN_S]   whether less than MARGIN_S (default 0) of the budget is left;
#   check OK MESSAGE         records PASS or FAIL (then the exit status is 1) in `checks`;
#   summary          prints the SUMMARY line.
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
PW=${PINWISE:-$ROOT/target/release/pinwise}
LIB=${PRELOAD_LIB:-$ROOT/target/release/libpinwise_preload.so}
SRC="$ROOT/bench/gpu/redundant"
PY=${PYTHON:-/opt/torch/.venv/bin/python}
[[ -x $PY ]] || PY=python3
CUDA=${CUDA:-/usr/local/cuda}
BUDGET_S=${BUDGET_S:-480}
STEPS=${STEPS:-30}
START=$(date +%s)
status=0
checks=()

setup_dir() { # DIR
  mkdir -p "$1"
  if [[ ! -x $PW || ! -f $LIB ]]; then
    echo "SUMMARY: missing $PW or $LIB (cargo build --release -p pinwise-cli -p pinwise-preload)"
    exit 2
  fi
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(hostname)"
    echo "kernel: $(uname -r)"
    nvidia-smi --query-gpu=name,pci.bus_id,driver_version --format=csv,noheader 2>&1 || true
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
    echo "pinwise: $("$PW" --version 2>&1)"
  } > "$1/machine.txt"
}
over_budget() { (( $(date +%s) - START > BUDGET_S - ${1:-0} )); }
check() { # OK? MESSAGE
  if [[ $1 == 1 ]]; then checks+=("PASS $2"); else checks+=("FAIL $2"); status=1; fi
}
summary() {
  echo "SUMMARY: $(printf '%s\n' "${checks[@]}" | grep -c '^PASS') passed, $(printf '%s\n' "${checks[@]}" | grep -c '^FAIL') failed"
}
