"""The float32 settings the benchmark measures under: float32 means float32 on every side (eager,
torch.compile and uniorch), since TF32 would need a looser tolerance and would flatter the fp32
columns. PyTorch's defaults differ: cuDNN convolutions take TF32 (and so do uniorch's, following
it); cuBLAS matmuls do not."""
from __future__ import annotations

import contextlib

import torch


def set_exact_fp32() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


@contextlib.contextmanager
def exact_fp32():
    """`set_exact_fp32` for the block, the previous settings restored after it."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              torch.get_float32_matmul_precision())
    set_exact_fp32()
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before[:2]
        torch.set_float32_matmul_precision(before[2])
