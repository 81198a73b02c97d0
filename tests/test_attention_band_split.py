"""A causal flash kernel's key loop in two (codegen/attention.py `_split_at_band`): the key tiles
wholly below the diagonal first, their causal mask proved true there and left out, then the tiles
the diagonal crosses with it. The kernels are the sm_90 ones, run on Triton's interpreter, judged
against eager on fresh inputs; what the split leaves out is counted in the PTX Triton 3.6 writes
for sm_90 (the GPU machine's)."""
import re

import pytest
import torch
import torch.nn.functional as F
import triton

import uniorch
from uniorch.backends.triton_launch import TritonLauncher
from uniorch.codegen import generate
from uniorch.runtime import loader

NEW_INTERPRETER = tuple(int(x) for x in triton.__version__.split(".")[:2]) >= (3, 7)


class Sdpa(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class WrittenOut(torch.nn.Module):
    """The mask built in the forward from its sizes (a graph-built mask is provably causal)."""

    def forward(self, q, k, v):
        t = q.shape[-2]
        s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool, device=q.device).tril(), float("-inf"))
        return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v


def _gpu_kernels_on_the_interpreter(model, args):
    cm = uniorch.compile(model, target="interpret")
    cm(*args)
    kernels = [k for e in cm._cache.values() for r in e.program.regions for k in r.plan.kernels.values()
               if k.source.name.endswith("attention")]
    assert len(kernels) == 1
    sources = []
    for k in kernels:
        gpu = generate(k.func_op, "cuda:sm_90")
        sources.append(gpu.source)
        k.source, k.fn = gpu, TritonLauncher(gpu, loader.load(gpu, interpret=True))
    return cm, sources


@pytest.mark.skipif(not NEW_INTERPRETER, reason="Triton's interpreter before 3.7 needs integer loop bounds")
@pytest.mark.parametrize("model, t", [(Sdpa(), 160), (WrittenOut(), 256)], ids=["sdpa-160", "written-out-256"])
def test_split_loops_compute_what_eager_does(model, t):
    # float16: Triton's interpreter computes bfloat16 dots wrongly (a bf16 kernel, split or not,
    # gives values of 1e8 there), the split is the same code for both
    torch.manual_seed(t)
    args = tuple(torch.randn(1, 2, t, 64, dtype=torch.float16) for _ in range(3))
    cm, sources = _gpu_kernels_on_the_interpreter(model, args)
    (src,) = sources
    assert "for start_n in range(0, off_band, BLOCK_N):" in src and "for start_n in range(off_band, " in src
    assert src.count("decided on this tile: no causal mask") == 1
    args = tuple(torch.randn(1, 2, t, 64, dtype=torch.float16) for _ in range(3))
    got, want = cm(*args), model(*args)
    ref = model(*(a.double() for a in args))
    # no further from float64 than eager's own float16 result
    assert (got.double() - ref).abs().max() <= 2 * (want.double() - ref).abs().max() + 1e-3


def test_float32_attention_keeps_one_loop():
    """float32 dots hold most registers: the split made a head-dim-128 kernel spill on sm_90."""
    args = tuple(torch.randn(1, 2, 256, 64) for _ in range(3))
    art = uniorch.compile_aot(Sdpa(), args, target="cuda:sm_90")
    assert "off_band" not in art.kernels[0].source.source


def test_the_band_loop_leaves_the_mask_out_of_its_ptx():
    """In the PTX for sm_90 the loop over tiles below the diagonal has the score's selects and
    compares gone: a handful of each where the diagonal's loop has one per score."""
    args = tuple(torch.randn(1, 2, 512, 64, dtype=torch.bfloat16) for _ in range(3))
    art = uniorch.compile_aot(Sdpa(), args, target="cuda:sm_90")
    ptx = (art.kernels[0].specialized or art.kernels[0].compiled).asm["ptx"]
    blocks = re.split(r"\n\$L__BB\d+_\d+:", ptx)
    loops = [b for b in blocks if "wgmma.mma_async" in b or "mma.sync" in b]
    assert len(loops) == 2, len(loops)
    selects = [len(re.findall(r"\bselp\.", b)) for b in loops]
    assert selects[0] * 4 < selects[1], selects
