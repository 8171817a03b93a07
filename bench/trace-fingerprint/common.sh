# Sourced by bench/trace-fingerprint/run.sh and async.sh: root, PINWISE, a scratch folder
# $out (removed at exit) and $libdir, which holds the libcuda the cost program links: the
# one in LIBCUDA_DIR, else pinwise's CPU stand-in (a TEST FIXTURE) under the names libcuda
# has. Then `cc_cost NAME`: builds bench/gpu/redundant/NAME.c into $out/NAME against it.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
PINWISE=${PINWISE:-$root/target/release/pinwise}
out=$(mktemp -d /tmp/pinwise-fp-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
source "$root/bench/lib/libcuda_dir.sh"
libcuda_dir "$root" "$out"
cc_cost() { # NAME
	${CC:-cc} -O2 -o "$out/$1" "$root/bench/gpu/redundant/$1.c" -L"$libdir" -lcuda \
		-Wl,-rpath,"$libdir"
}
