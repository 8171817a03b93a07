#!/usr/bin/env bash
# First look on the GPU machine (issue 10): the JAX exit crash with core dumps, and the
# PyTorch churn case's statistics, with main's release build.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p target/release && cp -a .device-carry/. target/release/
[[ -f .device-carry/debug/libpinwise_preload.so ]] && cp .device-carry/debug/libpinwise_preload.so target/release/
uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
export PYTHONUNBUFFERED=1
timeout 420 bash bench/gpu/frameworks/crash_probe.sh ${REPEATS:-5} python3 bench/gpu/frameworks/jax_transfers.py 2>&1 | tee "$OUT/crash.txt"
D=$OUT/mixed; mkdir -p $D
for m in plain adaptive use; do
  if [[ $m == plain ]]; then timeout 120 python3 bench/gpu/frameworks/torch_mixed.py > $D/plain.out 2> $D/plain.err
  else timeout 120 target/release/pinwise run --force --mode $m --profile $D/p.json --stats-json $D/$m.stats.json -- python3 bench/gpu/frameworks/torch_mixed.py > $D/$m.out 2> $D/$m.err; fi
  echo "mixed $m exit $? $(grep time_ms $D/$m.err)"; [[ $m == plain ]] && cp $D/p.json /dev/null 2>/dev/null
  [[ $m == adaptive ]] && timeout 120 target/release/pinwise run --mode profile --profile $D/p.json -- python3 bench/gpu/frameworks/torch_mixed.py > /dev/null 2>&1
done
python3 - $D <<'PY'
import json,sys
for m in ("adaptive","use"):
    try: t=json.load(open(f"{sys.argv[1]}/{m}.stats.json"))["totals"]; print(m, {k:v for k,v in t.items() if not isinstance(v,(dict,list))})
    except Exception as e: print(m, e)
PY
cmp $D/plain.out $D/adaptive.out && cmp $D/plain.out $D/use.out && echo "mixed outputs identical"
tar czf $OUT/crash.tgz -C $OUT crash mixed 2>/dev/null; rm -rf $OUT/crash $OUT/mixed
