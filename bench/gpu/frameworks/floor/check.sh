#!/usr/bin/env bash
# Checks floor_shim.so off the GPU machine, against pinwise's CPU stand-ins for libcuda and
# libcudart (TEST FIXTURES: any time printed here is not a GPU figure), and a fake driver
# (fake_driver.c) whose cuGetProcAddress answers as the real one does (not through its
# dynamic symbol table). For each test program, without the shim and at levels 0, 1, 2:
# the same stdout and exit status 0, and the shim's exit line with every copy intercepted
# (its `copies` = the program's own count) through the paths the program uses (direct
# exports, dlsym, cuGetProcAddress by identity, by rule, and an answer of a newer CUDA
# version passed unwrapped). Then floor.sh itself on two of the programs (REPEATS=2,
# pinwise from target/debug unless PINWISE is set). Exits non-zero on the first failure.
#   bash bench/gpu/frameworks/floor/check.sh
# Needs gcc, python3 and the stand-ins built (cargo build -p pinwise-standin-cuda
# -p pinwise-standin-cudart, or the workspace).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
ROOT=$PWD
F=$ROOT/bench/gpu/frameworks/floor
W=$(mktemp -d /tmp/floor_check.XXXXXX)
trap 'rm -rf "$W"' EXIT
source "$ROOT/bench/lib/libcuda_dir.sh"
LIBCUDA_DIR='' libcuda_dir "$ROOT" "$W"
cudart=$(ls "$ROOT"/target/release/libpinwise_standin_cudart.so 2>/dev/null ||
  ls "$ROOT"/target/debug/libpinwise_standin_cudart.so)
ln -sf "$cudart" "$libdir/libcudart.so.13"
ln -sf "$cudart" "$libdir/libcudart.so"
export LD_LIBRARY_PATH=$libdir
gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$W/floor_shim.so" "$F/floor_shim.c" -ldl -lpthread
gcc -O2 -Wall -Wextra -Werror -o "$W/floor_check_c" "$F/floor_check.c" -L"$libdir" -lcuda -lcudart \
  -Wl,-rpath,"$libdir" -lpthread -ldl
gcc -O2 -Wall -Wextra -Werror -shared -fPIC -Wl,-Bsymbolic-functions -o "$W/fake_driver.so" "$F/fake_driver.c"
gcc -O2 -Wall -Wextra -Werror -o "$W/procaddr_check" "$F/procaddr_check.c" -ldl
gcc -O2 -Wall -Wextra -Werror -o "$W/cold_touch" "$F/cold_touch.c"

fail() { echo "FAIL: $*" >&2; exit 1; }
# field LINE KEY: the value of KEY=... in LINE
field() { tr ' ' '\n' <<< "$1" | sed -n "s/^$2=//p" | head -1; }

# check NAME EXPECTED_FIELDS CMD...: EXPECTED_FIELDS are KEY=VALUE (exact) or KEY>=VALUE.
check() {
  local name=$1 expect=$2; shift 2
  local plain level out line copies k want got
  plain=$("$@") || fail "$name exits $? without the shim"
  copies=$(field "$plain" copies)
  [[ -n $copies && $copies -gt 0 ]] || fail "$name printed no copy count: $plain"
  for level in 0 1 2; do
    rm -f "$W/line"
    out=$(LD_PRELOAD=$W/floor_shim.so FLOOR_LEVEL=$level FLOOR_OUT=$W/line "$@") ||
      fail "$name exits $? at level $level"
    [[ $out == "$plain" ]] || fail "$name: stdout at level $level '$out' != '$plain'"
    # the process's own line: the one with the most copies (the pyenv shim's helpers write none)
    line=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^copies=/) { split($i, a, "="); if (a[2] + 0 >= best) { best = a[2] + 0; l = $0 } } } END { print l }' "$W/line")
    [[ -n $line ]] || fail "$name: no floor line at level $level"
    [[ $(field "$line" level) == "$level" ]] || fail "$name: $line"
    [[ $(field "$line" copies) == "$copies" ]] || fail "$name level $level: shim saw $(field "$line" copies) copies of $copies: $line"
    awk -v m="$(field "$line" median_ns)" 'BEGIN { exit !(m > 0) }' || fail "$name: no median: $line"
    if ((level >= 1)); then
      [[ $(field "$line" counted) == "$copies" ]] || fail "$name level $level: counted != copies: $line"
    fi
    if ((level == 2)); then
      [[ $(field "$line" pages) == 8 ]] || fail "$name level 2: pages: $line"
    fi
    for k in $expect; do
      if [[ $k == *'>='* ]]; then
        want=${k#*>=}; got=$(field "$line" "${k%%>=*}")
        [[ -n $got && $got -ge $want ]] || fail "$name level $level: ${k%%>=*}=$got, want >= $want: $line"
      else
        want=${k#*=}; got=$(field "$line" "${k%%=*}")
        [[ $got == "$want" ]] || fail "$name level $level: ${k%%=*}=$got, want $want: $line"
      fi
    done
    echo "ok  $name level $level: $line"
  done
}

# C, linked with -lcuda and -lcudart: direct exports, cuGetProcAddress_v2 (the stand-in's
# answers are its exports, which are ours: procaddr_ours), dlsym(handle, "cuMemcpy"), and
# the runtime's own dlsym of cuGetProcAddress_v2; 2 threads; pinned, registered, pageable.
check floor_check_c "dlsym_wraps>=2 procaddr_ours>=3 procaddr_passed=0 ranges_added=4 range_overflow=0" \
  "$W/floor_check_c"
# The fake driver: by identity (HtoD), by rule (DtoH, DtoH per-thread), a CUDA 14.0 answer
# passed unwrapped (its copies are not the shim's), cuGetProcAddress_v2 itself by dlsym.
check procaddr_check "dlsym_wraps=1 procaddr_wraps=1 procaddr_rule=2 procaddr_passed=1" \
  "$W/procaddr_check" "$W/fake_driver.so"
# Python ctypes: dlsym by attribute, cuGetProcAddress_v2 answers called through CFUNCTYPE.
check floor_check.py "dlsym_wraps>=2 procaddr_ours=2 ranges_added=1" python3 "$F/floor_check.py"

# FLOOR_PARTS: only the parts asked for (the counter only with c).
for pc in t:0 c:800 r:0 tr:0; do
  parts=${pc%:*} want=${pc#*:}
  rm -f "$W/line"
  LD_PRELOAD=$W/floor_shim.so FLOOR_LEVEL=1 FLOOR_PARTS=$parts FLOOR_OUT=$W/line "$W/floor_check_c" > /dev/null ||
    fail "floor_check_c with FLOOR_PARTS=$parts exits $?"
  line=$(cat "$W/line")
  [[ $(field "$line" parts) == "$parts" && $(field "$line" counted) == "$want" && $(field "$line" copies) == 800 ]] ||
    fail "FLOOR_PARTS=$parts: $line"
done
echo "ok  FLOOR_PARTS t, c, r, tr: the line names the parts; the counter counts only with c"

# dlsym answers that are not the shim's do not change: RTLD_NEXT from the program's own
# interposer, a handle's symbol, a missing one (dlerror), a hooked name absent from the
# handle (pinwise-preload's test program); and a Python that loads extension modules.
gcc -O2 -o "$W/rtld_next" "$ROOT/crates/pinwise-preload/tests/programs/rtld_next.c" -ldl
py='import ctypes, decimal, hashlib, json, sqlite3, zlib; print(json.dumps([hashlib.sha1(b"x").hexdigest(), zlib.crc32(b"x"), str(decimal.Decimal(1) / 7), sqlite3.sqlite_version, ctypes.sizeof(ctypes.c_long)]))'
for prog in "$W/rtld_next" "python3 -c"; do
  if [[ $prog == python3* ]]; then plain=$(python3 -c "$py"); else plain=$("$prog"); fi
  for level in 0 2; do
    if [[ $prog == python3* ]]; then
      out=$(LD_PRELOAD=$W/floor_shim.so FLOOR_LEVEL=$level python3 -c "$py" 2> "$W/err")
    else
      out=$(LD_PRELOAD=$W/floor_shim.so FLOOR_LEVEL=$level "$prog" 2> "$W/err")
    fi
    [[ $out == "$plain" ]] || fail "$prog at level $level: '$out' != '$plain'"
    [[ ! -s $W/err ]] || fail "$prog at level $level wrote to stderr (no hook reached: no line): $(cat "$W/err")"
  done
  echo "ok  ${prog##*/}: same stdout under the shim, no floor line (no hook reached)"
done

"$W/cold_touch" > "$W/cold.md" || fail "cold_touch exits $?"
[[ $(grep -c '^| K ' "$W/cold.md") == 27 ]] || fail "cold_touch: not 27 rows: $(cat "$W/cold.md")"
echo "ok  cold_touch: 27 rows"

# floor.sh end to end on the stand-in (pinwise: target/debug unless PINWISE is set).
export PINWISE=${PINWISE:-$ROOT/target/debug/pinwise}
OUT=$W/out REPEATS=2 BUDGET_S=120 PROGS="$W/floor_check_c $F/floor_check.py" \
  VARIANTS="floor0 floor1 floor2 pinwise floor1.r" \
  bash "$ROOT/bench/gpu/frameworks/floor.sh" > "$W/floor.log" 2>&1 || fail "floor.sh exits $?: $(tail -20 "$W/floor.log")"
s=$W/out/floor/summary.md
for f in summary.md runs.tsv raw.tgz; do [[ -s $W/out/floor/$f ]] || fail "floor.sh wrote no $f"; done
[[ $(ls "$W/out/floor" | wc -l) == 3 ]] || fail "floor.sh: $(ls "$W/out/floor")"
# every variant (pinwise too) saw each program's copies: floor_check_c 800, floor_check.py 600
for pc in floor_check_c:800 floor_check:600; do
  n=${pc%:*} c=${pc#*:}
  for var in floor0 floor1 floor2 pinwise floor1.r; do
    grep -qE "^\| $n \| $var \| 2 \| 0 \| 0 \| [0-9]+ \([0-9]+-[0-9]+\) \|.*\| $c( \([0-9]+\))? \| [0-9.]+ \| same \|$" "$s" ||
      fail "floor.sh: no complete row with $c copies for $n $var: $(grep "| $n | $var |" "$s")"
  done
done
grep -q '^| K pages, a line each | 8 | 16 |' "$s" || fail "floor.sh: no cold_touch table"
echo "ok  floor.sh: every row complete with every copy seen (shim levels and pinwise), stdout the same in all 20 runs; files: summary.md runs.tsv raw.tgz"
echo
echo "floor.sh's summary (TEST FIXTURE: CPU stand-in, not GPU figures):"
cat "$s"
