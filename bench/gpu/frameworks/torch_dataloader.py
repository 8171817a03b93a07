"""PyTorch training loop fed by DataLoader(pin_memory=True, num_workers=4) over a synthetic
dataset (no download): images 3x64x64 uint8 made from the index, a small conv net trained
with SGD for 60 batches of 64. stdout: exact checksum of the labels and inputs seen (integer)
and the final loss rounded to 3 digits (deterministic: fixed seed, deterministic kernels);
stderr: `time_ms train=.. images_per_s=.. iter_med=..` (iter_med: the median batch, from one
batch's arrival to the next's, times the number of batches; the wait for the first batch, the
workers' start, is left out)."""
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __len__(self):
        return 64 * 60

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8, generator=g)
        return x, i % 10


def main():
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(8),
        torch.nn.Flatten(), torch.nn.Linear(16 * 64, 10)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    dl = DataLoader(Synthetic(), batch_size=64, num_workers=4, pin_memory=True, shuffle=False)
    seen = 0
    t0 = time.monotonic()
    n = 0
    arrivals = []
    for x, y in dl:
        arrivals.append(time.monotonic())
        seen += int(x.to(torch.int64).sum()) + int(y.sum())
        x = x.to(dev, non_blocking=True).float() / 255.0
        y = y.to(dev, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += x.shape[0]
    torch.cuda.synchronize()
    dt = time.monotonic() - t0
    print(f"seen {seen}")
    print(f"loss {loss.item():.3f}")
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:] + [t0 + dt])]
    iter_med = statistics.median(gaps) * len(gaps) * 1e3
    print(f"time_ms train={dt * 1e3:.1f} images_per_s={n / dt:.0f} iter_med={iter_med:.1f}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
