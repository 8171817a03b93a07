"""Where a history's tracked host allocations come from and when (issue 10: what the malloc
hooks record in a program): per allocation site (module+offset, with the Python frame if any),
the count, sizes, kinds and the span of their allocation times relative to the first event;
and the count per second of the run.
    python3 alloc_timeline.py HISTORY.json [TOP]"""
import collections
import json
import sys

h = json.load(open(sys.argv[1]))
top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
allocs = h["allocations"]
mods = {i: m.get("path", m.get("key")) for i, m in enumerate(h.get("modules", []))}
t0 = min((a["alloc_ts_ns"] for a in allocs if a.get("alloc_ts_ns")), default=0)
by = collections.defaultdict(list)
for a in allocs:
    tag = a.get("tag") or {}
    site = f'{tag.get("module")}+{tag.get("offset", 0):#x}'
    py = a.get("python") or tag.get("python") or a.get("user_frame")
    if py:
        site += f" [{json.dumps(py)[:80]}]"
    by[site].append(a)
print(f"{len(allocs)} allocation records; kinds {collections.Counter(a['kind'] for a in allocs)}")
print(f"{'count':>6} {'median size':>12} {'transfers':>9} {'first s':>8} {'last s':>8}  site")
for site, xs in sorted(by.items(), key=lambda kv: -len(kv[1]))[:top]:
    ts = sorted((a.get("alloc_ts_ns") or t0) - t0 for a in xs)
    sizes = sorted(a["size"] for a in xs)
    tr = sum(a.get("transfer_count", 0) for a in xs)
    print(f"{len(xs):>6} {sizes[len(sizes) // 2]:>12} {tr:>9} {ts[0] / 1e9:>8.3f} {ts[-1] / 1e9:>8.3f}  {site}")
per_s = collections.Counter(int(((a.get("alloc_ts_ns") or t0) - t0) / 1e9) for a in allocs)
print("per second of the run:", dict(sorted(per_s.items())))
