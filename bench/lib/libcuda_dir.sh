# Sourced by bench scripts that build a program against libcuda off the GPU machine too.
# `libcuda_dir ROOT OUT` sets $libdir: LIBCUDA_DIR when set (the real driver's directory),
# else OUT/lib holding pinwise's CPU stand-in (a TEST FIXTURE) under the names libcuda has.
libcuda_dir() { # ROOT OUT
	if [[ -n "${LIBCUDA_DIR:-}" ]]; then
		libdir=$LIBCUDA_DIR
		return
	fi
	local standin
	standin=$(ls "$1"/target/release/libpinwise_standin_cuda.so 2>/dev/null ||
		ls "$1"/target/debug/libpinwise_standin_cuda.so)
	libdir=$2/lib
	mkdir -p "$libdir"
	ln -sf "$standin" "$libdir/libcuda.so.1"
	ln -sf "$standin" "$libdir/libcuda.so"
}
