"""PyTorch CUDA graphs under pinwise-preload: a check for the GPU machine.

A pageable CPU tensor and a pinned one (PyTorch's caching host allocator: cudaHostAlloc,
served by pinwise's pool) are copied to the GPU (non_blocking) many times outside any
capture, so that `pinwise run` may register the pageable one in place (promotion); then a
CUDA graph is captured with `torch.cuda.graph` whose body copies the pinned tensor to a
device tensor, computes on it and copies the result back into pinned memory. The graph is
replayed several times, the pinned tensor changed between replays: every replay must read
it as it is then. The pageable tensor is used again after the graph; last, on stderr only,
the script says whether a capture of a pageable copy works (plain CUDA may refuse it).

pinwise must not break the capture (no cuStreamSynchronize on the capturing stream, no
registration that invalidates it) and must keep a registration the graph reads until the
tensor is freed. Run plainly (`python3 capture.py`) and under pinwise
(`pinwise run --mode adaptive -- python3 bench/gpu/preload/capture.py`); both must print the
same stdout (exact integer checksums computed on the GPU). stderr:
`time_ms warm=.. capture=.. replay=.. total=..` and the versions. Exit status 1 on any error
or wrong result.
"""
import sys
import time

import torch

MiB = 1 << 20
N = 32 * MiB
WARM_COPIES = 24
REPLAYS = 5


def expected(x):
    """What the graph body computes, on the CPU (uint8 arithmetic wraps the same way)."""
    return int(torch.sum(x.add(1), dtype=torch.int64)) * 3


def main():
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)  # CUDA init, outside the timed phases
    torch.cuda.synchronize()
    t0 = time.monotonic()

    # Pageable (not pin_memory): the program's own buffer, as pinwise sees it.
    x = torch.arange(N, dtype=torch.int64).remainder_(251).to(torch.uint8)
    # Pinned (cudaHostAlloc through PyTorch's caching host allocator: pinwise's pool).
    xp = torch.empty(N, dtype=torch.uint8).pin_memory()
    xp.copy_(x)
    outh = torch.zeros(1, dtype=torch.int64).pin_memory()
    g = torch.empty(N, dtype=torch.uint8, device=dev)
    out = torch.zeros(1, dtype=torch.int64, device=dev)

    def body():
        g.copy_(xp, non_blocking=True)
        out.copy_(torch.sum(g.add(1), dtype=torch.int64).mul(3))
        outh.copy_(out, non_blocking=True)

    # Hot outside any capture: many non_blocking copies of the same pageable tensor (pinwise
    # may register it in place) and of the pinned one.
    acc = 0
    for r in range(WARM_COPIES):
        g.copy_(x if r % 2 == 0 else xp, non_blocking=True)
        acc += int(torch.sum(g, dtype=torch.int64).item()) + r
    print(f"warm-up {acc}")
    t1 = time.monotonic()

    # Warm-up iterations on a side stream, as torch.cuda.graph's documentation asks.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    torch.cuda.synchronize()
    t2 = time.monotonic()

    bad = 0
    for r in range(REPLAYS):
        xp.add_(r + 1)  # the pinned tensor changes between replays (no replay is running)
        want = expected(xp)
        graph.replay()
        torch.cuda.synchronize()
        got, goth = int(out.item()), int(outh.item())
        ok = got == want and goth == want
        bad += not ok
        print(f"replay {r} {got} {goth} {'ok' if ok else 'WRONG'}")
        if not ok:
            print(f"replay {r}: expected {want}, got {got} (device), {goth} (host)", file=sys.stderr)
    # The pageable tensor, still used outside the graph after the captures.
    g.copy_(x, non_blocking=True)
    print(f"after {int(torch.sum(g, dtype=torch.int64).item())}")
    torch.cuda.synchronize()
    t3 = time.monotonic()

    del graph
    torch.cuda.synchronize()
    print("graph ok" if bad == 0 else f"graph WRONG in {bad} of {REPLAYS} replays")

    ms = lambda a, b: (b - a) * 1e3
    print(
        f"time_ms warm={ms(t0, t1):.1f} capture={ms(t1, t2):.1f} replay={ms(t2, t3):.1f} "
        f"total={ms(t0, t3):.1f}",
        file=sys.stderr,
    )
    print(f"torch {torch.__version__} cuda {torch.version.cuda}", file=sys.stderr)

    # Last, and said on stderr only: whether capturing a copy from the pageable tensor works.
    # Plain CUDA may refuse it (pageable copies are staged by the host); under pinwise the
    # tensor may be registered, and then the capture can succeed. Either way nothing above
    # depends on it.
    try:
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            g.copy_(x, non_blocking=True)
        g2.replay()
        torch.cuda.synchronize()
        print("pageable capture: captured and replayed", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        print(f"pageable capture: refused ({type(e).__name__}: {e})".splitlines()[0], file=sys.stderr)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # any CUDA or PyTorch error: say it, fail
        print(f"capture.py failed: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
