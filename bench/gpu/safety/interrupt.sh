#!/usr/bin/env bash
# Interrupted `pinwise run`s on the GPU machine (issue 12): a PyTorch copy loop
# (torch_loop.py) under `pinwise run -o <history>` is ended after 8 s by
#   sigint-group       SIGINT to the whole process group (as Ctrl-C does)
#   sigterm            SIGTERM to `pinwise run` alone (passed on to the program)
#   sighup             SIGHUP to `pinwise run` alone
#   sigkill            SIGKILL to `pinwise run` (the program gets SIGTERM: PR_SET_PDEATHSIG)
#   program-term       SIGTERM to the program itself
#   program-kill       SIGKILL to the program itself: nothing runs in it; `pinwise run`
#                      completes the history the library appended every second
#   program-kill-json  the same with `-o <history>.json` (appends went to <history>.json.partial)
#   group-kill         SIGKILL to the whole group (`pinwise run` too): the appended file alone
#   group-kill-json    the same, JSON (<history>.json.partial is what is left)
# and for each: the exit status of `pinwise run`, the last "copies N" the program printed,
# whether `pinwise report` reads the history (for group-kill: the file as the library left it,
# salvaged), how many HtoD transfers it holds, and the check: at least N for the cases the
# library flushes on; for the SIGKILL cases at least the count the program printed 1.1 s or
# more before the kill (the history is appended every second: what is older must be there).
# Needs target/release/pinwise and target/release/libpinwise_preload.so carried from the
# build machine (as bench/gpu/preload/run.sh), python3 with PyTorch. About 2 minutes.
# Writes $OUT/safety/ (each case's stdout, stderr, history, report) and prints a table.
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-out}
dir="$OUT/safety"
mkdir -p "$dir"
PW=$ROOT/target/release/pinwise
mono_ns() { python3 -c 'import time; print(time.monotonic_ns())'; }
printf '%-18s %-7s %-11s %-10s %-7s %-15s %s\n' case status last-count due-count report htod-transfers check
for case in sigint-group sigterm sighup sigkill program-term program-kill program-kill-json group-kill group-kill-json; do
  ext=bin
  case $case in *-json) ext=json ;; esac
  hist="$dir/$case.$ext"
  rm -f "$hist" "$hist.partial"
  # A background job of a non-interactive shell starts with SIGINT ignored (and would pass
  # that on): the default action is restored before pinwise run starts.
  setsid python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    "$PW" run -o "$hist" -- python3 bench/gpu/safety/torch_loop.py \
    >"$dir/$case.out" 2>"$dir/$case.err" &
  pid=$!
  sleep 8
  prog=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null | awk '{print $1}')
  killed_at=$(mono_ns)
  case $case in
    sigint-group) kill -INT -- "-$pid" ;;
    sigterm) kill -TERM "$pid" ;;
    sighup) kill -HUP "$pid" ;;
    sigkill) kill -KILL "$pid" ;;
    program-term) kill -TERM "$prog" ;;
    program-kill*) kill -KILL "$prog" ;;
    group-kill*) kill -KILL -- "-$pid" ;;
  esac
  wait "$pid"
  status=$?
  # After SIGKILL the program ends on its own (SIGTERM from the kernel): wait for it.
  for _ in $(seq 1 100); do [ -n "$prog" ] && kill -0 "$prog" 2>/dev/null || break; sleep 0.1; done
  last=$(grep -o 'copies [0-9]*' "$dir/$case.out" | tail -1 | awk '{print $2}')
  read_file=$hist
  case $case in
    program-kill* | group-kill*)
      # Copies printed at least 1.1 s before the kill must all be in the history.
      due=$(awk -v k="$killed_at" '$1 == "copies" && NF >= 3 && $3 <= k - 1100000000 { n = $2 } END { print n + 0 }' "$dir/$case.out")
      [ "$case" = group-kill-json ] && read_file="$hist.partial"
      ;;
    *) due=${last:-0} ;;
  esac
  if timeout 120 "$PW" report --json --quiet --no-symbols "$read_file" >"$dir/$case.report.json" 2>"$dir/$case.report.err"; then
    rep=ok
    htod=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print([d for d in r['directions'] if d.get('direction') in ('HtoD','htod')][0].get('transfers','?'))" "$dir/$case.report.json" 2>/dev/null || echo '?')
  else
    rep=FAILED
    htod=-
  fi
  check=FAIL
  case $htod in ''|*[!0-9]*) ;; *) [ "$htod" -ge "$due" ] && check=ok ;; esac
  printf '%-18s %-7s %-11s %-10s %-7s %-15s %s\n' "$case" "$status" "${last:-none}" "$due" "$rep" "$htod" "$check"
done
