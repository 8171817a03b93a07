# Sourced by gap.sh and gap_ab.sh: `build_gap_copies OUT [LIBDIR]` builds OUT/gap_copies
# from gap_copies.c against the libcuda in LIBDIR (default: the system's libcuda, found by
# ldconfig and linked as OUT/lib/libcuda.so). Run from the repository root.
build_gap_copies() {
  local out=$1 libdir=${2:-}
  mkdir -p "$out/lib"
  if [[ -n $libdir ]]; then
    libdir=$(realpath "$libdir")
  else
    local libcuda
    libcuda=$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')
    ln -sf "$libcuda" "$out/lib/libcuda.so"
    libdir="$out/lib"
  fi
  gcc -O2 -I fixtures/include -o "$out/gap_copies" bench/gpu/preload/gap_copies.c \
    -L"$libdir" -lcuda -Wl,-rpath,"$libdir"
}
