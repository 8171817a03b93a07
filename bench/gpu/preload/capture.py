"""PyTorch CUDA graphs under pinwise-preload: a check for the GPU machine.

A pageable CPU tensor is copied to the GPU (non_blocking) many times outside any capture,
so that `pinwise run` may register it in place (promotion); then a CUDA graph is captured
with `torch.cuda.graph` whose body copies that same tensor to a device tensor and does a
small computation on it. The graph is replayed several times, the CPU tensor changed
between replays: every replay must read it as it is then.

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
    g = torch.empty(N, dtype=torch.uint8, device=dev)
    out = torch.zeros(1, dtype=torch.int64, device=dev)

    def body():
        g.copy_(x, non_blocking=True)
        out.copy_(torch.sum(g.add(1), dtype=torch.int64).mul(3))

    # Hot outside any capture: many non_blocking copies of the same pageable tensor.
    acc = 0
    for r in range(WARM_COPIES):
        g.copy_(x, non_blocking=True)
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
        x.add_(r + 1)  # the CPU tensor changes between replays (no replay is running)
        want = expected(x)
        graph.replay()
        torch.cuda.synchronize()
        got = int(out.item())
        ok = got == want
        bad += not ok
        print(f"replay {r} {got} {'ok' if ok else 'WRONG'}")
        if not ok:
            print(f"replay {r}: expected {want}, got {got}", file=sys.stderr)
    torch.cuda.synchronize()
    t3 = time.monotonic()

    del graph
    del x
    torch.cuda.synchronize()
    print("graph ok" if bad == 0 else f"graph WRONG in {bad} of {REPLAYS} replays")

    ms = lambda a, b: (b - a) * 1e3
    print(
        f"time_ms warm={ms(t0, t1):.1f} capture={ms(t1, t2):.1f} replay={ms(t2, t3):.1f} "
        f"total={ms(t0, t3):.1f}",
        file=sys.stderr,
    )
    print(f"torch {torch.__version__} cuda {torch.version.cuda}", file=sys.stderr)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # any CUDA or PyTorch error: say it, fail
        print(f"capture.py failed: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
