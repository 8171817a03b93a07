"""Start-up only: import torch, make a CUDA context, one upload; the wall time of a short
PyTorch program. stdout: a checksum."""
import torch

x = torch.arange(1 << 20, dtype=torch.int32)
print(int(x.to("cuda").sum().item()))
