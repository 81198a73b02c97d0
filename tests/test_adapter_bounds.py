"""Kernels on the `cpu` target never read memory outside their tensors, masked lanes included.

Ascend's adapter lowers a load whose addresses it cannot analyse (division and remainder in them:
a flat index decomposed into a tensor's dims, a concatenation's pieces, a pooling window, a
convolution's taps) as loads of every lane of the block, masked or not, keeping the valid lanes
afterwards: element by element, or one row at a time as a strided window of the block's width.
On `cpu` those masked-off lanes read this process's memory past the tensor; a ResNet block's
BatchNorm backward at 2x64x28x28 crashed the process that way. The cpu lowering clamps each
element load into its tensor and shortens each window to the part inside it
(backends/cpu/lowering.py). Checked with inputs placed just before a page the process may not
read, in a subprocess, so a fault fails the test instead of killing pytest.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch
import torch.nn.functional as F


def _bn_backward_like(x, y, m):
    s = ((x - m) * y).sum((0, 2, 3), keepdim=True)
    return y - (x - m) * s * 1e-3, s


def _cases():
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    w = r(48, 40, 3, 3)
    return {
        "batchnorm_backward": (_bn_backward_like, [r(2, 64, 28, 28), r(2, 64, 28, 28), r(1, 64, 1, 1)]),
        "cat": (lambda a, b: torch.cat([a, b], 1) * 2, [r(3, 37), r(3, 29)]),
        "conv": (lambda x: F.relu(F.conv2d(x, w, padding=1)), [r(2, 40, 27, 27)]),
        "max_pool": (lambda x: F.max_pool2d(x, 3, 2, 1), [r(2, 33, 29, 29)]),
        "index_add": (lambda x, i, v: x.index_add(0, i, v),
                      [r(100, 37), torch.randint(0, 100, (77,), generator=g), r(77, 37)]),
        "softmax_middle_dim": (lambda x: torch.softmax(x, 1), [r(5, 333, 7)]),
    }


CHILD = textwrap.dedent("""
    import ctypes, mmap, sys, torch
    sys.path.insert(0, sys.argv[1])
    import warnings
    from test_adapter_bounds import _cases
    import uniorch
    from uniorch.backends.cpu import CpuFallbackWarning

    warnings.simplefilter("error", CpuFallbackWarning)  # a kernel that left the cpu lowering: reported below

    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    keep = []

    def fenced(t):  # t's bytes end (64-byte aligned) just before a page the process may not read
        n, page = t.numel() * t.element_size(), mmap.PAGESIZE
        size = -(-n // page) * page + 2 * page
        m = mmap.mmap(-1, size)
        keep.append(m)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert libc.mprotect(base + size - page, page, 0) == 0
        start = (base + size - page - n) & ~63
        out = torch.frombuffer((ctypes.c_char * n).from_address(start), dtype=t.dtype)
        return out.view(t.shape).copy_(t)

    for name, (fn, args) in _cases().items():
        print("case", name, flush=True)  # the last one printed is the one that crashed
        args = [fenced(a) for a in args]
        cm = uniorch.compile(fn, "cpu")
        got = cm(*args)
        # the warning raised inside a compile makes that kernel's ops eager: the report says so
        rep = cm.explain()
        assert not rep.fallbacks and not any(k.note for k in rep.kernels), str(rep)
        ref = fn(*args)
        for g, r in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-3)
    print("in bounds")
""")


def test_masked_lanes_read_inside_their_tensors_on_the_cpu_target():
    here = os.path.dirname(__file__)
    run = subprocess.run([sys.executable, "-c", CHILD, here], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and "in bounds" in run.stdout, (run.returncode, run.stdout[-300:], run.stderr[-3000:])


def test_a_view_with_gaps_is_read_whole():
    """The clamp bounds a load by the size the launcher gives each tensor: the elements its view
    spans, not how many it holds. With the count, k of a fused k/v projection (a view with gaps)
    read its second batch clamped short: attention_sdpa's training gradients on `cpu` were off by
    more than their size (docs/perf/training.md, 2026-11-27), and this copy was wrong."""
    import uniorch

    def heads(x):  # a flat index decomposed into dims: the element-by-element load
        return x.unflatten(-1, (2, 8)).permute(0, 2, 1, 3).repeat_interleave(2, dim=1) * 2.0

    for seed in (0, 1):
        big = torch.randn(2, 8, 48, generator=torch.Generator().manual_seed(seed))
        x = big[..., 16:32]  # 256 elements spanning 736
        cm = uniorch.compile(heads, target="cpu")
        torch.testing.assert_close(cm(x), heads(x), rtol=0, atol=0)
