#!/usr/bin/env bash
# What `pinwise trace --fingerprint` adds to each host-to-device copy, sampled and full
# (issue 17): bench/gpu/redundant/fp_cost.c (copies of 4 KiB, 1 MiB and 64 MiB from pinned
# and pageable memory; one byte changes before each copy) run under `pinwise trace` without
# fingerprints, with `--fingerprint sampled --fingerprint-check 0` (8 lines read in BPF) and
# with `--fingerprint full` (every byte hashed in BPF, in the copying thread), ROUNDS rounds
# interleaved. Needs root. By default it links pinwise's CPU stand-in for libcuda (a TEST
# FIXTURE: the copy is a memcpy; the probe and hash cost is this machine's, nothing
# GPU-related is measured); with LIBCUDA_DIR=dir (a directory holding libcuda.so) it links
# that instead (the GPU machine; bench/gpu/redundant/run.sh does the same with the preload).
#
#   bash bench/trace-fingerprint/run.sh        # prints a markdown table
#   PINWISE=target/debug/pinwise ROUNDS=5 SCALE=0.5 bash bench/trace-fingerprint/run.sh
set -euo pipefail
ROUNDS=${ROUNDS:-3}
SCALE=${SCALE:-1}
source "$(dirname "$0")/common.sh"
cc_cost fp_cost
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true

variants=(nofp sampled full)
: >"$out/cost.tsv" # variant round name median_ns min_ns copies
for round in $(seq 1 "$ROUNDS"); do
	for v in "${variants[@]}"; do
		case $v in
		nofp) flags=() ;;
		sampled) flags=(--fingerprint sampled --fingerprint-check 0) ;;
		full) flags=(--fingerprint full) ;;
		esac
		"$PINWISE" trace "${flags[@]}" --force -o "$out/h.bin" -- "$out/fp_cost" "$SCALE" \
			>"$out/run.out" 2>"$out/run.err" || {
			echo "trace $v failed:" >&2
			cat "$out/run.err" >&2
			exit 1
		}
		awk -v v="$v" -v r="$round" -F'\t' 'NF == 5 { print v "\t" r "\t" $0 }' "$out/run.out" >>"$out/cost.tsv"
	done
done

echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), kernel $(uname -r), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "pinwise: $PINWISE, libcuda: ${LIBCUDA_DIR:-the CPU stand-in (TEST FIXTURE)}, ROUNDS=$ROUNDS SCALE=$SCALE"
echo
table() { # FIELD TITLE
	echo "$2"
	echo
	echo "| copy | no --fingerprint | sampled | full | sampled - none | full - none |"
	echo "|---|---|---|---|---|---|"
	awk -F'\t' -v f="$1" '
	{ key = $3; v = $1; n[v, key]++; val[v, key, n[v, key]] = $f; keys[key] = 1 }
	function med(v, k,   m, i, j, t, a) {
		m = n[v, k]; if (!m) return -1
		for (i = 1; i <= m; i++) a[i] = val[v, k, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((m + 1) / 2)]
	}
	END {
		split("pinned-4096 pinned-1048576 pinned-67108864 pageable-4096 pageable-1048576 pageable-67108864", order, " ")
		for (o = 1; o <= 6; o++) {
			k = order[o]; if (!(k in keys)) continue
			a = med("nofp", k); s = med("sampled", k); f = med("full", k)
			printf "| %s | %d | %d | %d | %+d | %+d |\n", k, a, s, f, s - a, f - a
		}
	}' "$out/cost.tsv"
	echo
}
table 7 "CPU ns of the copying thread per host-to-device copy under \`pinwise trace\` (CLOCK_THREAD_CPUTIME_ID: the uprobe and BPF included, waiting for a CPU not; median over rounds of each run's median)"
table 4 "Wall ns per host-to-device copy (median over rounds of each run's median)"
