"""Prints a history's stack-capture figures: captures, skipped, wall us per capture.

    python3 source_stats.py HISTORY.json
"""
import json
import sys


def find(o):
    if isinstance(o, dict):
        for k, v in o.items():
            if k == "source_stats":
                return v
            r = find(v)
            if r is not None:
                return r
    return None


s = find(json.load(open(sys.argv[1])))
s = dict(s) if isinstance(s, dict) else {k: v for k, v in s}
n = s.get("preload.stack_captures", 0)
ns = s.get("preload.stack_capture_ns", 0)
print(
    f"captures={n} skipped={s.get('preload.stack_captures_skipped', 0)} "
    f"total_ms={ns / 1e6:.1f} us_per_capture={ns / max(1, n) / 1e3:.1f}"
)
