#!/usr/bin/env python3
"""The table of bench/gpu/frameworks/floor.sh: per program and variant, the median (min-max)
over runs of the in-program per-copy median (floor_shim's `median_ns`; pinwise's
`hook_ns_net_median`), and whether every run printed the same stdout.

    python3 floor_table.py RUNS.tsv RAW_DIR

RUNS.tsv rows: program, variant, round, exit status (or `skipped`), wall s, stdout md5,
result file (in RAW_DIR: a floor_shim FLOOR_OUT file, or a `pinwise run` statistics file).
"""
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
from stats_keys import lookup  # noqa: E402


def floor_line(path):
    """The fields of the FLOOR_OUT line with the most copies (a forked child or a helper
    process may have written one too), or None."""
    best = None
    try:
        with open(path) as f:
            for line in f:
                if not line.startswith("floor "):
                    continue
                kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
                if best is None or int(kv.get("copies", 0)) > int(best.get("copies", 0)):
                    best = kv
    except OSError:
        return None
    return best


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v >= 0 else None


def pinwise_stats(path):
    import json
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return None
    copies = [num(lookup(s, k)) for k in ("transfers_htod", "transfers_dtoh")]
    return {
        "median": num(lookup(s, "hook_ns_net_median")),
        "copies": sum(copies) if None not in copies else None,
        "samples": num(lookup(s, "hook_samples")),
        "read": num(lookup(s, "clock_read_ns")),
        "describe": num(lookup(s, "hook_stages.describe_ns")),
        "decide": num(lookup(s, "hook_stages.decide_ns")),
        "record": num(lookup(s, "hook_stages.record_ns")),
    }


def cell(xs, fmt="{:.0f}"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    m = statistics.median(xs)
    return f"{fmt.format(m)} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def med(xs, fmt="{:.0f}"):
    xs = [x for x in xs if x is not None]
    return fmt.format(statistics.median(xs)) if xs else "-"


def main(tsv, raw):
    v = defaultdict(lambda: defaultdict(list))
    runs, fails, skipped = defaultdict(int), defaultdict(int), defaultdict(int)
    outputs = defaultdict(set)
    progs, variants = [], []
    for line in open(tsv):
        prog, var, _r, rc, _wall, md5, res = line.rstrip("\n").split("\t")
        if prog not in progs:
            progs.append(prog)
        if var not in variants:
            variants.append(var)
        key = (prog, var)
        if rc == "skipped":
            skipped[key] += 1
            continue
        runs[key] += 1
        if rc != "0":
            fails[key] += 1
            continue
        outputs[prog].add(md5)
        d = v[key]
        if var == "pinwise":
            s = pinwise_stats(os.path.join(raw, res))
            if s is None:
                d["missing"].append(1)
                continue
            for k, x in s.items():
                d[k].append(x)
        else:
            kv = floor_line(os.path.join(raw, res))
            if kv is None:
                d["missing"].append(1)
                continue
            d["median"].append(num(kv.get("median_ns")))
            d["p10"].append(num(kv.get("p10")))
            d["p90"].append(num(kv.get("p90")))
            d["copies"].append(num(kv.get("copies")))
            d["read"].append(num(kv.get("read_ns")))
            d["pages"].append(num(kv.get("pages")))
            via = "dlsym {} procaddr {}+{}+{} passed {}".format(
                kv.get("dlsym_wraps"), kv.get("procaddr_wraps"), kv.get("procaddr_rule"),
                kv.get("procaddr_ours"), kv.get("procaddr_passed"))
            d["via"].append(via)
    order = ["floor0", "floor1", "floor2", "pinwise"]
    variants.sort(key=lambda x: order.index(x) if x in order else len(order))
    print("Per-copy bookkeeping, ns: the median (min-max) over runs of each run's in-program median "
          "(floor_shim: `median_ns`, every copy timed; pinwise: `hook_ns_net_median`, sampled). "
          "Both include about one counter read (`read`). p10/p90: medians over runs of each run's "
          "10th/90th percentile. copies: floor_shim's timed copies; pinwise's recorded host-device "
          "copies (its timed samples in brackets). "
          "Δ floor0: this row's median minus floor0's.")
    print()
    print("| program | variant | runs | exit≠0 | skipped | per-copy median ns | Δ floor0 | p10 | p90 "
          "| copies | read ns | stdout |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in progs:
        same = "same" if len(outputs[p]) == 1 else ("-" if not outputs[p] else f"DIFFERENT ({len(outputs[p])})")
        base = [x for x in v[(p, "floor0")]["median"] if x is not None]
        for var in variants:
            d = v[(p, var)]
            ms = [x for x in d["median"] if x is not None]
            delta = f"{statistics.median(ms) - statistics.median(base):+.0f}" if ms and base and var != "floor0" else "-"
            miss = f" ({len(d['missing'])} without figures)" if d["missing"] else ""
            print(f"| {p} | {var} | {runs[(p, var)]}{miss} | {fails[(p, var)]} | {skipped[(p, var)]} "
                  f"| {cell(d['median'])} | {delta} | {med(d['p10'])} | {med(d['p90'])} "
                  f"| {med(d['copies'])}{' (' + med(d['samples']) + ')' if d['samples'] else ''} "
                  f"| {med(d['read'], '{:.1f}')} | {same} |")
    print()
    print("In pages: (floor2 - floor1) / FLOOR_PAGES is what one more cold page cost the hook in "
          "that program; (pinwise - floor1) divided by it, how many such pages pinwise's figure "
          "is above the floor. Given only where floor2 - floor1 exceeds both 10 ns and the two rows' ranges "
          "(max-min over runs) added together.")
    print()
    for p in progs:
        f1 = [x for x in v[(p, "floor1")]["median"] if x is not None]
        f2 = [x for x in v[(p, "floor2")]["median"] if x is not None]
        pw = [x for x in v[(p, "pinwise")]["median"] if x is not None]
        pages = [x for x in v[(p, "floor2")]["pages"] if x]
        if not (f1 and f2 and pages):
            print(f"- {p}: -")
            continue
        diff = statistics.median(f2) - statistics.median(f1)
        spread = (max(f1) - min(f1)) + (max(f2) - min(f2))
        if diff <= max(spread, 10):
            print(f"- {p}: floor2 - floor1 = {diff:.0f} ns, not above the runs' spread ({spread:.0f} ns) and 10 ns: "
                  "no price per page to count pinwise's gap in")
            continue
        per = diff / statistics.median(pages)
        line = f"- {p}: {per:.0f} ns per extra page"
        if pw and per > 0:
            gap = statistics.median(pw) - statistics.median(f1)
            line += f"; pinwise - floor1 = {gap:.0f} ns = {gap / per:.1f} pages"
        print(line)
    print()
    print("pinwise's stages (median over runs of each run's stage median, ns):")
    print()
    print("| program | describe | decide | record |")
    print("|---|---|---|---|")
    for p in progs:
        d = v[(p, "pinwise")]
        print(f"| {p} | {med(d['describe'])} | {med(d['decide'])} | {med(d['record'])} |")
    print()
    print("How floor_shim reached the copies (each program's first shim run: dlsym wraps; "
          "cuGetProcAddress answers wrapped by identity + by rule + already ours; answers passed unwrapped):")
    print()
    for p in progs:
        via = [x for var in ("floor0", "floor1", "floor2") for x in v[(p, var)]["via"]]
        print(f"- {p}: {via[0] if via else '-'}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: floor_table.py RUNS.tsv RAW_DIR")
    main(sys.argv[1], sys.argv[2])
