# Sourced by the GPU scripts, from the repository root: puts the release binaries that
# bench/gpu/pack.sh carried (.device-carry/) into target/release/, sets PW to the pinwise
# binary to use ($PINWISE, else target/release/pinwise) and stops the script (status 2)
# when there is none.
if [[ -d .device-carry ]]; then mkdir -p target/release && cp -a .device-carry/. target/release/; fi
PW=${PINWISE:-$PWD/target/release/pinwise}
[[ -x $PW ]] || { echo "no $PW (bench/gpu/pack.sh makes it)" >&2; exit 2; }
