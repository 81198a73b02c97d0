"""The launch plan's relayout copy on a GPU (runtime/relayout.py): a tiled transpose kernel instead
of PyTorch's element-by-element permuted copy. Checked here: its values and layout against
`permute().contiguous()` on Triton's interpreter, over ranks, dtypes, partial tiles and batch dims;
that its sm_90 compile (with the strides of 1 specialized, as the JIT does) reads along the source's
contiguous dim and writes along the destination's, through shared memory; that a CPU tensor takes
PyTorch's copy."""
import re

import pytest
import torch

from uniorch.backends.triton_launch import TritonLauncher
from uniorch.runtime import loader
from uniorch.runtime.relayout import _key, kernel_source, relaid

CASES = [((70, 130), [1, 0]), ((3, 5, 70, 33), [0, 1, 3, 2]), ((2, 9, 7, 5), [0, 2, 3, 1]),
         ((4, 66, 3), [1, 2, 0]), ((1, 65, 1, 64), [0, 2, 3, 1])]


def _interpreted(src):
    n, j, dtype, _ = _key(src)
    ks = kernel_source(n, j, dtype)
    return TritonLauncher(ks, loader.load(ks, interpret=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape, order", CASES)
def test_the_copy_equals_pytorchs(shape, order, dtype):
    t = torch.randn(shape).to(dtype)
    src = t.permute(order)
    out = torch.empty(src.shape, dtype=dtype)
    _interpreted(src)([src], [out])
    assert torch.equal(out, src.contiguous())


def test_a_cpu_tensor_takes_pytorchs_copy_in_the_asked_layout():
    t = torch.randn(6, 5)
    got = relaid(t, [1, 0])
    assert torch.equal(got, t) and got.stride() == (1, 6)


def test_the_sm90_kernel_reads_and_writes_whole_lines():
    from uniorch.backends import driver, get_backend
    from uniorch.backends.specialization import specialize

    # a weight [N, K] read N-major: source strides (1, N), destination (K, 1), sizes divisible by 16
    ks = specialize(kernel_source(2, 0, torch.float32), ["*D", "1", "i32D", "*D", "i32D", "1", "i32D", "i32D"])
    ttgir = driver.compile_kernel(ks, get_backend("cuda:sm_90"), use_cache=False).asm["ttgir"]
    layouts = dict(re.findall(r"^#(blocked\d*) = #ttg\.blocked<\{sizePerThread = \[(\d+, \d+)\]", ttgir, re.M))
    load = re.search(r"tt\.load .*#(blocked\d*)>", ttgir).group(1)
    store = re.search(r"tt\.store .*#(blocked\d*)>", ttgir).group(1)
    assert layouts[load] == "4, 1" and layouts[store] == "1, 4", (layouts, load, store)  # 16-byte vectors each side
    assert "ttg.convert_layout" in ttgir
