"""Peak page-locked bytes a program held by itself, from a `pinwise trace` JSON history:
the most bytes of PINNED_ALLOC and REGISTERED allocations alive at once (an allocation
lives from alloc_ts_ns to end_ts_ns, or to the end). Prints the peak in bytes.
  python3 peak_pinned.py TRACE.json"""
import json, sys

h = json.load(open(sys.argv[1]))
edges = []
for a in h["allocations"]:
    if a["kind"] in ("PINNED_ALLOC", "REGISTERED"):
        edges.append((a["alloc_ts_ns"], a["size"]))
        if a.get("end_ts_ns") is not None:
            edges.append((a["end_ts_ns"], -a["size"]))
peak = cur = 0
for _, d in sorted(edges, key=lambda e: (e[0], e[1])):
    cur += d
    peak = max(peak, cur)
print(peak)
