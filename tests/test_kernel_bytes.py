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


def test_a_gathered_table_counts_the_rows_read():
    """An embedding loads the rows its ids name: 10 rows of a 1000-row table, in the kernel's
    bytes and in the minimum alike (Inductor's count bounds a buffer by its loads the same way)."""
    table, ids = torch.randn(1000, 16), torch.randint(0, 1000, (2, 5))
    k, out = _one_kernel(lambda ids, table: torch.nn.functional.embedding(ids, table) * 2, ids, table)
    rows = 2 * 5 * 16 * 4
    assert k.bytes_read == _nbytes(ids) + rows
    rep = uniorch.explain(lambda ids, table: torch.nn.functional.embedding(ids, table) * 2, ids, table,
                          target="interpret")
    assert rep.bytes_minimum == _nbytes(ids) + rows + _nbytes(out)


def test_more_loads_than_rows_count_the_table():
    table, ids = torch.randn(10, 16), torch.randint(0, 10, (100,))
    k, out = _one_kernel(lambda ids, table: torch.nn.functional.embedding(ids, table) + 1, ids, table)
    assert k.bytes_read == _nbytes(ids, table)


def test_a_table_also_read_whole_counts_whole_in_the_minimum():
    """A tied LM head reads the embedding table whole: the minimum counts it once, in full."""
    table, ids = torch.randn(50, 16), torch.randint(0, 50, (2, 3))

    def tied(ids, table):
        return torch.nn.functional.embedding(ids, table).tanh() @ table.t()

    cm = uniorch.compile(tied, target="interpret")
    out = cm(ids, table)
    torch.testing.assert_close(out, tied(ids, table))
    rep = cm.explain(ids, table)
    assert rep.bytes_minimum == _nbytes(ids, table, out)
    assert sum(k.bytes_read for k in rep.kernels) >= _nbytes(table)
