"""The percentile-bootstrap interval of a median, shared by the benchmark scripts
(bench/gpu/frameworks/paired.py, bench/gpu/attribution/malloc_ab.sh), so that every table
of paired differences or ratios is computed one way.

    import sys; sys.path.insert(0, "<repo>/bench/lib")
    from median_ci import median_interval
"""
import random
import statistics


def median_interval(xs, n=4000, rnd=None, level=0.95):
    """The `level` percentile-bootstrap interval (lo, hi) of the median of `xs`: the medians
    of `n` resamples with replacement drawn from `rnd` (a `random.Random`; default a fresh
    `random.Random(1)`, so that a call alone is reproducible), sorted, cut at the
    (1 - level) / 2 and (1 + level) / 2 quantiles. Passing one `rnd` to several calls draws
    their resamples from one stream."""
    if not xs:
        raise ValueError("median_interval: no values")
    rnd = random.Random(1) if rnd is None else rnd
    meds = sorted(statistics.median(rnd.choices(xs, k=len(xs))) for _ in range(n))
    k = round((1 - level) / 2 * n)
    return meds[k], meds[n - k - 1]
