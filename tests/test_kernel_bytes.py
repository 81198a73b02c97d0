"""Bytes a kernel moves (`explain`'s bytes_read / bytes_written, uniorch/runtime/kernel_bytes.py):
each stored tensor counts once per kernel, however many views of it the kernel reads (slices of
it next to it, reshapes of it); different tensors count apart. Checked against the tensors'
own sizes, on models whose kernels read such views."""
import random

import numpy as np
import pytest
import torch

import uniorch
from uniorch.runtime.kernel_bytes import _covered

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


@pytest.mark.parametrize("seed", range(20))
def test_union_of_boxes_matches_a_mask(seed):
    rng = random.Random(seed)
    rank = rng.randint(1, 4)
    shape = [rng.randint(1, 6) for _ in range(rank)]
    boxes = []
    for _ in range(rng.randint(1, 5)):
        box = []
        for n in shape:
            lo = rng.randint(0, n - 1)
            box.append((lo, rng.randint(lo + 1, n)))
        boxes.append(box)
    mask = np.zeros(shape, dtype=bool)
    for box in boxes:
        mask[tuple(slice(lo, hi) for lo, hi in box)] = True
    assert _covered(boxes) == int(mask.sum())


def _one_kernel(fn, *args):
    cm = uniorch.compile(fn, target="interpret")
    out = cm(*args)
    torch.testing.assert_close(out, fn(*args))
    rep = cm.explain(*args)
    assert len(rep.kernels) == 1, str(rep)
    return rep.kernels[0], out


def test_a_tensor_read_whole_and_by_halves_counts_once():
    """rotate_half next to x itself: x's two halves and x are three arguments, one buffer."""
    x = torch.randn(3, 5, 8)
    k, out = _one_kernel(lambda x: x * torch.cat((-x[..., 4:], x[..., :4]), -1), x)
    assert k.bytes_read == _nbytes(x)
    assert k.bytes_written == _nbytes(out)


def test_overlapping_slices_count_their_union():
    x = torch.randn(4, 10)
    k, _ = _one_kernel(lambda x: x[:, :6] * x[:, 3:9], x)
    assert k.bytes_read == 4 * 9 * 4  # columns 0..8: column 9 is never read


def test_different_tensors_count_apart():
    x, y = torch.randn(4, 10), torch.randn(4, 10)
    k, _ = _one_kernel(lambda x, y: x[:, :5] + y[:, 5:], x, y)
    assert k.bytes_read == 2 * 4 * 5 * 4
