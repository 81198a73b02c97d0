"""Max-pool indices follow ATen's NaN rule (the window's last NaN), which torch-mlir's lowering
lost (it returned -1): passes/pool_indices.py."""
import io

import pytest
import torch

import uniorch

F = torch.nn.functional

CASES = {
    "max_pool2d": (lambda x: F.max_pool2d(x, 2, return_indices=True), (1, 2, 6, 6)),
    "max_pool2d_pad_stride": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True), (2, 2, 7, 7)),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True), (1, 2, 5, 7)),
    "max_pool1d": (lambda x: F.max_pool1d(x, 3, return_indices=True), (1, 2, 9)),
    "max_pool3d": (lambda x: F.max_pool3d(x, 2, return_indices=True), (1, 2, 4, 4, 4)),
}


@pytest.mark.parametrize("name", CASES)
def test_max_pool_indices_with_nans_match_eager(name):
    fn, shape = CASES[name]
    cm = uniorch.compile(fn, target="interpret", fallback="error")
    for _ in range(2):  # fresh values and fresh NaN positions (several per window on purpose)
        x = torch.randn(shape)
        x.view(-1)[torch.randint(0, x.numel(), (x.numel() // 4,))] = float("nan")
        got, ref = cm(x), fn(x)
        torch.testing.assert_close(got[0], ref[0], equal_nan=True)
        assert torch.equal(got[1], ref[1])
    assert not cm.explain(x).fallbacks


def test_rewrite_shows_in_the_preprocessed_ir(tmp_path):
    from uniorch.tools.opt import main

    path = tmp_path / "m.py"
    path.write_text("import torch\n"
                    "def factory():\n"
                    "    f = lambda x: torch.nn.functional.max_pool2d(x, 2, return_indices=True)\n"
                    "    return f, (torch.randn(1, 1, 4, 4),)\n")
    out = io.StringIO()
    assert main([f"{path}:factory", "-p", "uniorch-preprocess"], stdout=out) == 0
    assert "arith.cmpf uno" in out.getvalue()  # the NaN test the index body gained
