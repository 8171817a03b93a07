#!/usr/bin/env bash
# bench/gpu/preload/gap.sh: pinwise's bookkeeping per intercepted copy against the gap
# between copies (see gap_copies.c). Prints one line per run: kind gap_us repeat
# hook_ns_net_median clock_read_ns stage medians. Needs target/release/pinwise, gcc, libcuda.
#   OUT=dir REPEATS=3 bash bench/gpu/preload/gap.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$(mktemp -d)}
REPEATS=${REPEATS:-3}
source bench/gpu/preload/gap_build.sh
build_gap_copies "$OUT" || exit 2
for r in $(seq "$REPEATS"); do
  for kind in pinned pageable; do
    for gap in 0 20 200 2000; do
      n=$(( gap >= 2000 ? 500 : 2000 ))
      s="$OUT/gap-$kind-$gap-$r.json"
      target/release/pinwise run --force --stats-json "$s" -- "$OUT/gap_copies" $kind $gap $n > /dev/null 2> "$OUT/gap-$kind-$gap-$r.err"
      python3 - "$s" "$kind" "$gap" "$r" <<'PY'
import json, sys
sys.path.insert(0, "bench/gpu/lib")
from stats_keys import find
s = json.load(open(sys.argv[1]))
print("gap", sys.argv[2], sys.argv[3], sys.argv[4], "net", find(s, "hook_ns_net_median"), "clock", find(s, "clock_read_ns"), "stages", json.dumps(find(s, "hook_stages")))
PY
    done
  done
done | tee "$OUT/gap.txt"
