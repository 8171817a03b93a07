#!/usr/bin/env bash
# Interrupted `pinwise run`s on the GPU machine (issue 12): a PyTorch copy loop
# (torch_loop.py) under `pinwise run -o <history>.bin` is ended after 8 s by
#   sigint-group  SIGINT to the whole process group (as Ctrl-C does)
#   sigterm       SIGTERM to `pinwise run` alone (passed on to the program)
#   sighup        SIGHUP to `pinwise run` alone
#   sigkill       SIGKILL to `pinwise run` (the program gets SIGTERM: PR_SET_PDEATHSIG)
#   program-term  SIGTERM to the program itself
# and for each: the exit status of `pinwise run`, the last "copies N" the program printed, and
# whether `pinwise report` reads the history (and how many HtoD transfers it holds: at least
# N expected). Needs target/release/pinwise and target/release/libpinwise_preload.so carried
# from the build machine (as bench/gpu/preload/run.sh), python3 with PyTorch. About 1 minute.
# Writes $OUT/safety/ (each case's stdout, stderr, history, report) and prints a table.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
dir="$OUT/safety"
mkdir -p "$dir"
PW=$ROOT/target/release/pinwise
printf '%-13s %-8s %-12s %-10s %s\n' case status last-count report htod-transfers
for case in sigint-group sigterm sighup sigkill program-term; do
  hist="$dir/$case.bin"
  rm -f "$hist"
  setsid "$PW" run -o "$hist" -- python3 bench/gpu/safety/torch_loop.py \
    >"$dir/$case.out" 2>"$dir/$case.err" &
  pid=$!
  sleep 8
  prog=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null | awk '{print $1}')
  case $case in
    sigint-group) kill -INT -- "-$pid" ;;
    sigterm) kill -TERM "$pid" ;;
    sighup) kill -HUP "$pid" ;;
    sigkill) kill -KILL "$pid" ;;
    program-term) kill -TERM "$prog" ;;
  esac
  wait "$pid"
  status=$?
  # After SIGKILL the program ends on its own (SIGTERM from the kernel): wait for it.
  for _ in $(seq 1 100); do [ -n "$prog" ] && kill -0 "$prog" 2>/dev/null || break; sleep 0.1; done
  last=$(grep -o 'copies [0-9]*' "$dir/$case.out" | tail -1 | awk '{print $2}')
  if timeout 120 "$PW" report --json --quiet --no-symbols "$hist" >"$dir/$case.report.json" 2>"$dir/$case.report.err"; then
    rep=ok
    htod=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print([d for d in r['directions'] if d.get('direction') in ('HtoD','htod')][0].get('transfers','?'))" "$dir/$case.report.json" 2>/dev/null || echo '?')
  else
    rep=FAILED
    htod=-
  fi
  printf '%-13s %-8s %-12s %-10s %s\n' "$case" "$status" "${last:-none}" "$rep" "$htod"
done
