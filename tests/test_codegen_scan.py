"""Scan kernels (uniorch/codegen/scan.py): aten.cumsum / cumprod lower to `tm_tensor.scan`, which
uniorch-fuse makes a "scan" kernel of its own. Run in Triton's interpreter against eager PyTorch on
fresh random inputs."""
import pytest
import torch

import uniorch
from kernel_util import capture, groups, outline, torch_dtype
from torch_mlir import ir

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

CASES = {
    "cumsum_last": (lambda x: torch.cumsum(x, -1), lambda: (torch.randn(4, 33),)),
    "cumsum_middle": (lambda x: torch.cumsum(x, 1), lambda: (torch.randn(3, 7, 5),)),
    "cumsum_first": (lambda x: torch.cumsum(x, 0), lambda: (torch.randn(9, 6),)),
    "cumprod": (lambda x: torch.cumprod(x, -1), lambda: (torch.rand(5, 20) + 0.5,)),
    "int32_cumsum": (lambda x: torch.cumsum(x, 0), lambda: (torch.randint(-5, 5, (17, 3), dtype=torch.int32),)),
    "int64_cumprod": (lambda x: torch.cumprod(x, 1), lambda: (torch.randint(-3, 3, (2, 9)),)),
    "bool_cumsum": (lambda x: torch.cumsum(x, 0), lambda: (torch.rand(10) > 0.5,)),
    "bf16_cumsum": (lambda x: torch.cumsum(x, -1), lambda: (torch.randn(3, 40).bfloat16(),)),
    "long_row_looped": (lambda x: torch.cumsum(x, -1), lambda: (torch.randn(2, 5000),)),
}


def _close(out, ref):
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if ref.dtype.is_floating_point:
        tol = {"rtol": 1e-2, "atol": 1e-2} if ref.dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-3}
        torch.testing.assert_close(out, ref, **tol)
    else:
        assert torch.equal(out, ref)


@pytest.mark.parametrize("case", sorted(CASES))
def test_scans_compile_to_scan_kernels(case):
    fn, make = CASES[case]
    rep = uniorch.explain(fn, *make(), target="interpret")
    assert not rep.fallbacks, rep
    assert [k.kind for k in rep.kernels].count("scan") == 1
    cm = uniorch.compile(fn, target="interpret")
    args = make()  # fresh values
    _close(cm(*args), fn(*args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_looped_scan_carries_the_prefix_across_chunks(dtype):
    """A forced small BLOCK_R: each chunk's scan continues from the previous chunks' total."""
    from uniorch.codegen.scan import generate_scan
    from uniorch.runtime import loader

    fn = lambda x: torch.cumsum(x, 1)  # noqa: E731
    make = (lambda: torch.randn(5, 70, 3).to(dtype)) if dtype.is_floating_point else \
        (lambda: torch.randint(-9, 9, (5, 70, 3)))
    module = capture(fn, (make(),))
    gs = groups(module)
    assert len(gs) == 1
    kernel, inputs, results = outline(module, gs[0], kind="scan")
    with kernel.context:
        ks = generate_scan(kernel, "interpret", {"block_p": 2, "block_r": 16, "looped": True, "num_warps": 1})
    assert "for start in range(0, 70, BLOCK_R)" in ks.source
    x = make()
    out = torch.empty(5, 70, 3, dtype=torch_dtype(results[0].type))
    loader.launch(ks, loader.load(ks, interpret=True), [x], [out])
    ref = fn(x)
    if dtype == torch.float16:
        torch.testing.assert_close(out, ref, rtol=2e-3, atol=2e-2)
    else:
        _close(out, ref)


def test_scan_fills_join_the_scan_kernel():
    module = capture(lambda x: torch.cumsum(x, 1), (torch.randn(4, 8),))
    (ops,) = groups(module).values()
    names = [o.name for o in ops]
    assert names.count("tm_tensor.scan") == 1 and names.count("linalg.generic") == 2
    anchor = next(o for o in ops if "uniorch.kind" in o.attributes)
    assert ir.StringAttr(anchor.attributes["uniorch.kind"]).value == "scan"
