"""fp16/bf16 norms, variances and softmax compute in fp32 and round once, as ATen's kernels do
(uniorch/capture/opmath.py): sums of squares of values ~300 overflowed fp16 before."""
import pytest
import torch

import uniorch

F = torch.nn.functional


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name,fn", [
    ("rms_norm", lambda x: F.rms_norm(x, [x.shape[-1]])),
    ("vector_norm", lambda x: torch.linalg.vector_norm(x, dim=-1)),
    ("var", lambda x: torch.var(x / 3, -1)),  # the result fits fp16; its sum of squares does not
    ("softmax", lambda x: torch.softmax(x / 100, -1)),
    ("group_norm", lambda x: F.group_norm(x.view(4, 8, 16), 2)),
])
def test_large_16bit_values_match_eager(dtype, name, fn):
    x = (torch.randn(4, 128) * 300).to(dtype)  # squares far beyond fp16's 65504
    cm = uniorch.compile(fn, target="interpret", fallback="error")
    got, ref = cm(x), fn(x)
    assert got.dtype == ref.dtype and torch.isfinite(ref).all()
    torch.testing.assert_close(got, ref, rtol=2e-2 if dtype == torch.bfloat16 else 2e-3, atol=1e-2)
