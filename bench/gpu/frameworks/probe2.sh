#!/usr/bin/env bash
# Second look at the JAX exit crash: the smallest program, under `pinwise run` and by hand.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p target/release && cp -a .device-carry/. target/release/
cp .device-carry/debug/libpinwise_preload.so target/release/
echo "/tmp/cores/core.%e.%p" > /proc/sys/kernel/core_pattern; mkdir -p /tmp/cores; ulimit -c unlimited
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
PW=target/release/pinwise; D=$OUT/p2; mkdir -p $D
bt() { local core; core=$(ls /tmp/cores/core.* 2>/dev/null | head -n1); [[ -n $core && ! -f $D/$1.bt ]] || return 0
  timeout 100 cuda-gdb -batch -ex 'thread apply all bt 40' "$(readlink -f "$(command -v python3)")" "$core" > $D/$1.bt 2>&1
  grep -m1 -A30 'Program terminated' $D/$1.bt | head -34; rm -f /tmp/cores/*; }
for v in module pending func; do
  for i in 1 2 3 4 5; do
    for how in run run_o hand; do
      case $how in
        run) timeout 60 $PW run -- python3 bench/gpu/frameworks/jax_exit.py $v ;;
        run_o) timeout 60 $PW run --force -o $D/h.bin -- python3 bench/gpu/frameworks/jax_exit.py $v ;;
        hand) timeout 60 env LD_PRELOAD=$PWD/target/release/libpinwise_preload.so python3 bench/gpu/frameworks/jax_exit.py $v ;;
      esac > $D/$v.$how.$i.out 2> $D/$v.$how.$i.err
      rc=$?; echo "$v $how $i exit $rc $(tail -c 200 $D/$v.$how.$i.err | tr '\n' ' ')"
      (( rc != 0 )) && bt $v.$how
    done
  done
done
for i in 1 2 3; do timeout 90 $PW run -- python3 bench/gpu/frameworks/jax_transfers.py > $D/t.$i.out 2> $D/t.$i.err; rc=$?; echo "jax_transfers run $i exit $rc"; (( rc )) && bt transfers; done
tar czf $OUT/p2.tgz -C $OUT p2; rm -rf $D
