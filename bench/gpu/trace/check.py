#!/usr/bin/env python3
"""Checks what `pinwise trace` recorded against what a traced program says it did, and
builds the results table of bench/gpu/trace/run.sh. Standard library only.

  check.py workload EXPECTED.json SUMMARY.json EXE      (workload.c, shared or static cudart)
  check.py torch EXPECTED.json DUMP.json                (torch_workload.py)
  check.py table OUT_DIR                                (results.md from everything in OUT_DIR)

`workload` and `torch` print PASS/FAIL lines and exit 1 on any FAIL.
"""
import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def last_json_line(path):
    """The last line of a file that parses as JSON (a program's own report)."""
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if l.strip().startswith("{")]
    if not lines:
        raise SystemExit(f"{path}: no JSON line")
    return json.loads(lines[-1])


class Checker:
    def __init__(self, name):
        self.name = name
        self.failures = 0

    def expect(self, what, got, want):
        ok = got == want
        self.failures += 0 if ok else 1
        print(f"{'PASS' if ok else 'FAIL'} {self.name}: {what}: got {got}, want {want}")

    def done(self):
        print(f"{'PASS' if self.failures == 0 else 'FAIL'} {self.name}: "
              f"{self.failures} failed checks")
        return 0 if self.failures == 0 else 1


def check_workload(expected_path, summary_path, exe):
    exp = last_json_line(expected_path)
    s = load(summary_path)
    c = Checker(f"workload {os.path.basename(exe)}")
    for d in ("HtoD", "DtoH"):
        got = s["by_direction"][d]
        c.expect(f"{d} transfers, bytes", (got["transfers"], got["bytes"]),
                 (exp[d]["transfers"], exp[d]["bytes"]))
    # Device-to-device copies move no host memory: cuMemcpyDtoD is not probed (on purpose:
    # frameworks make many), so a DtoD copy is seen only when the runtime issues it as a
    # unified cuMemcpy. Reported, not checked.
    got = s["by_direction"]["DtoD"]
    print(f"INFO {c.name}: DtoD seen {got['transfers']} ({got['bytes']} bytes); the program "
          f"made {exp['DtoD']['transfers']} ({exp['DtoD']['bytes']} bytes)")
    c.expect("ring buffer drops", s["tracer"]["ringbuf_drops"], 0)
    exe_real = os.path.realpath(exe)
    sites = set()
    for want in exp["allocations"]:
        kind, size = want["kind"], want["size"]
        allocs = [a for a in s["allocations"]
                  if a["kind"] == kind and size <= a["size"] < size + 65536]
        c.expect(f"{kind} {size}: allocations", len(allocs), want["count"])
        c.expect(f"{kind} {size}: transfers each", sorted({a["transfer_count"] for a in allocs}),
                 [want["transfers"]])
        c.expect(f"{kind} {size}: HtoD bytes each",
                 sorted({a["by_direction"]["HtoD"]["bytes"] for a in allocs}),
                 [want["HtoD_bytes"]])
        c.expect(f"{kind} {size}: DtoH bytes each",
                 sorted({a["by_direction"]["DtoH"]["bytes"] for a in allocs}),
                 [want["DtoH_bytes"]])
        in_exe = sorted({os.path.realpath(a["module_path"] or "?") == exe_real for a in allocs})
        c.expect(f"{kind} {size}: call site in the program", in_exe, [True])
        c.expect(f"{kind} {size}: call numbers",
                 sorted(a["call_no"] for a in allocs), list(range(1, want["count"] + 1)))
        sites |= {(a["module"], a["offset"]) for a in allocs}
        where = {str(a.get("site")) for a in allocs}
        print(f"     {kind} {size}: sites {sorted(where)}")
    c.expect("one call site per allocation kind", len(sites), len(exp["allocations"]))
    return c.done()


def check_torch(expected_path, dump_path):
    exp = last_json_line(expected_path)
    dump = load(dump_path)
    n = exp["bytes"]
    c = Checker("torch")
    counts = {}
    for a in dump["allocations"]:
        for e in a.get("events", []):
            if e.get("type") == "DEVICE_TRANSFER" and e.get("bytes") == n:
                key = (e["direction"], e.get("host_state"), a["kind"])
                counts[key] = counts.get(key, 0) + 1
    print(f"     transfers of {n} bytes by (direction, host state, allocation kind): {counts}")
    want_reps = exp["reps"]
    c.expect("HtoD from pinned memory", counts.get(("HtoD", "PINNED", "PINNED_ALLOC"), 0),
             want_reps)
    c.expect("HtoD from pageable memory", counts.get(("HtoD", "PAGEABLE", "PAGEABLE"), 0),
             want_reps)
    c.expect("DtoH to pinned memory", counts.get(("DtoH", "PINNED", "PINNED_ALLOC"), 0),
             want_reps)
    c.expect("DtoH to pageable memory", counts.get(("DtoH", "PAGEABLE", "PAGEABLE"), 0),
             want_reps)
    other = sum(v for k, v in counts.items() if k not in {
        ("HtoD", "PINNED", "PINNED_ALLOC"), ("HtoD", "PAGEABLE", "PAGEABLE"),
        ("DtoH", "PINNED", "PINNED_ALLOC"), ("DtoH", "PAGEABLE", "PAGEABLE")})
    c.expect(f"other transfers of {n} bytes", other, 0)
    return c.done()


def fmt_ns(x):
    return "-" if x is None else f"{x:,.0f}"


def table(out):
    """results.md: correctness verdicts, per-call overhead by probe kind, transfer-loop
    slowdown, event rate, tracer memory."""
    lines = []
    meta = {}
    if os.path.exists(os.path.join(out, "meta.json")):
        meta = load(os.path.join(out, "meta.json"))
    lines.append(f"# pinwise trace on {meta.get('device', '?')}")
    lines.append("")
    lines.append(f"Date: {meta.get('date', '?')}. Kernel: {meta.get('kernel', '?')}. "
                 f"Driver: {meta.get('driver', '?')}. Command: `{meta.get('command', '?')}`.")
    if meta.get("device") == "standin":
        lines.append("")
        lines.append("**CPU stand-in for libcuda (test fixture): these are not GPU figures.**")
    lines.append("")
    first = os.path.join(out, "workload_shared.summary.json")
    if os.path.exists(first):
        hooks = load(first)["tracer"].get("kernel_hooks") or {}
        lines.append(f"Kernel hooks into the nvidia module (fexit os_lock_user_pages): "
                     f"**{hooks.get('state', '?')}** {hooks.get('detail') or ''}")
        lines.append("")
    verdicts = os.path.join(out, "verdicts.txt")
    if os.path.exists(verdicts):
        lines.append("## Recorded counts against what the programs did")
        lines.append("")
        for l in open(verdicts).read().splitlines():
            if l.startswith(("PASS", "FAIL")) and "failed checks" in l:
                lines.append(f"- {l}")
        lines.append("")

    def runs(prefix):
        res = {}
        for name in sorted(os.listdir(out)):
            if name.startswith(prefix) and name.endswith(".out"):
                try:
                    r = last_json_line(os.path.join(out, name))
                except SystemExit:
                    continue
                res.setdefault(name[len(prefix):-len(".out")].rsplit(".", 1)[0], []).append(r)
        return res

    calls_plain, calls_traced = runs("calls.plain."), runs("calls.traced.")
    if calls_plain:
        lines.append("## Cost per traced call, by probe kind (median of runs)")
        lines.append("")
        lines.append("| kind | probe hits per iteration | plain ns | traced ns | added ns "
                     "| BPF program(s), kernel ns per run |")
        lines.append("|---|---|---|---|---|---|")
        hits = {"htod": 1, "htod_async": 1, "dtoh": 1, "unified": 1, "copy2d": 1,
                "host_alloc": 3, "register": 3, "dev_alloc": 3, "mmap": 3}
        progs = {"htod": ["copy_htod"], "htod_async": ["copy_htod_async"],
                 "dtoh": ["copy_dtoh"], "unified": ["copy_unified"], "copy2d": ["copy_2d"],
                 "host_alloc": ["host_alloc_entry", "host_alloc_return", "host_free"],
                 "register": ["host_register_entry", "host_register_return", "host_unregister"],
                 "dev_alloc": ["dev_alloc_entry", "dev_alloc_return", "dev_free"],
                 "mmap": ["on_mmap_enter", "on_mmap_exit", "on_munmap"]}
        for kind in calls_plain:
            p = statistics.median(r["ns_per_call"] for r in calls_plain[kind])
            t_runs = calls_traced.get(kind, [])
            t = statistics.median(r["ns_per_call"] for r in t_runs) if t_runs else None
            bpf = []
            sfile = os.path.join(out, f"calls.traced.{kind}.summary.json")
            if os.path.exists(sfile):
                costs = {c["program"]: c for c in load(sfile)["tracer"]["program_costs"]}
                for prog in progs.get(kind, []):
                    if prog in costs and costs[prog]["run_count"]:
                        c = costs[prog]
                        bpf.append(f"{prog} {c['run_time_ns'] / c['run_count']:.0f}")
            lines.append(f"| {kind} | {hits.get(kind, '?')} | {fmt_ns(p)} | {fmt_ns(t)} | "
                         f"{fmt_ns(None if t is None else t - p)} | {', '.join(bpf) or '-'} |")
        lines.append("")

    loop_plain, loop_traced = runs("loop.plain."), runs("loop.traced.")
    if loop_plain:
        lines.append("## Transfer-heavy loop: synchronous HtoD copies from pinned memory")
        lines.append("")
        lines.append("| copy size | plain ns/copy | traced ns/copy | slowdown | plain GB/s "
                     "| traced GB/s |")
        lines.append("|---|---|---|---|---|---|")
        for size in sorted(loop_plain, key=lambda s: int(s)):
            p = statistics.median(r["ns_per_copy"] for r in loop_plain[size])
            t_runs = loop_traced.get(size, [])
            if not t_runs:
                continue
            t = statistics.median(r["ns_per_copy"] for r in t_runs)
            pg = statistics.median(r["gb_per_s"] for r in loop_plain[size])
            tg = statistics.median(r["gb_per_s"] for r in t_runs)
            lines.append(f"| {int(size) // 1024} KiB | {fmt_ns(p)} | {fmt_ns(t)} | "
                         f"{(t / p - 1) * 100:+.1f} % | {pg:.2f} | {tg:.2f} |")
        lines.append("")

    rate_files = sorted(n for n in os.listdir(out) if n.startswith("rate.") and n.endswith(".out"))
    if rate_files:
        lines.append("## Sustained event rate (0-byte async copies, each one event)")
        lines.append("")
        lines.append("| threads | ring buffer | events/s offered | events recorded | dropped |")
        lines.append("|---|---|---|---|---|")
        for name in rate_files:
            r = last_json_line(os.path.join(out, name))
            s = load(os.path.join(out, name.replace(".out", ".summary.json")))
            recorded = s["by_direction"]["HtoD"]["transfers"]
            ring = name.split(".")[2]
            lines.append(f"| {r['threads']} | {ring} | {r['calls_per_s']:,.0f} | "
                         f"{recorded:,} of {r['calls']:,} | {s['tracer']['ringbuf_drops']:,} |")
        lines.append("")

    mem = []
    for name in sorted(os.listdir(out)):
        if name.endswith(".summary.json"):
            t = load(os.path.join(out, name))["tracer"]
            mem.append((name[:-len(".summary.json")], t["tracer_rss_bytes"],
                        t["tracer_peak_rss_bytes"], t["records"]))
    if mem:
        lines.append("## Tracer memory (RSS of the pinwise process at the end of each trace)")
        lines.append("")
        lines.append("| trace | events | RSS MiB | peak RSS MiB |")
        lines.append("|---|---|---|---|")
        for name, rss, peak, records in mem:
            lines.append(f"| {name} | {records:,} | {rss / 2**20:.1f} | {peak / 2**20:.1f} |")
        lines.append("")
    text = "\n".join(lines)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 0


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    mode = sys.argv[1]
    if mode == "workload" and len(sys.argv) == 5:
        return check_workload(*sys.argv[2:5])
    if mode == "torch" and len(sys.argv) == 4:
        return check_torch(*sys.argv[2:4])
    if mode == "table":
        return table(sys.argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
