# Sourced by the A/B bench scripts: `parse_builds "$@"` reads NAME=LIB.so[,VAR=VALUE...]
# arguments into the arrays `names`, `libs` (absolute paths) and `envs` (the comma-separated
# environment of that build's runs, or empty). Returns 1 when there is none.
parse_builds() {
  names=(); libs=(); envs=()
  local a spec
  for a in "$@"; do
    names+=("${a%%=*}")
    spec=${a#*=}
    libs+=("$(realpath "${spec%%,*}")")
    if [[ $spec == *,* ]]; then envs+=("${spec#*,}"); else envs+=(""); fi
  done
  ((${#names[@]}))
}

# `stats_keys FILE [FIELD...] -- KEY...`: see stats_keys.py.
stats_keys() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/stats_keys.py" "$@"
}
