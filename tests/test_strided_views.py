"""`as_strided` that only reshapes is a view (uniorch/capture/strided_views.py): GroupNorm's
per-channel scale and shift no longer gather from index tables in a kernel of their own. Other
strides keep the gather. Numerics against eager on fresh inputs."""
import pytest
import torch
from torch import nn

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


class ConvGroupNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(4, 8)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return nn.functional.silu(self.norm(self.conv(x)))


def test_group_norm_reads_no_index_tables():
    torch.manual_seed(0)
    model = ConvGroupNorm().eval()
    x = torch.randn(2, 3, 16, 16)
    cm = uniorch.compile(model, target="interpret")
    torch.testing.assert_close(cm(x * 2 + 1), model(x * 2 + 1), rtol=1e-4, atol=1e-5)
    rep = cm.explain(x)
    # the convolution, the statistics, the normalise with SiLU: no kernel gathering scale and shift
    assert [k.kind for k in rep.kernels] == ["contraction", "reduction", "pointwise"], str(rep)
    assert all("as_strided" not in op for k in rep.kernels for op, _ in k.ops), str(rep)


@pytest.mark.parametrize("size,stride,offset", [
    ((3, 4), (1, 3), None),        # a transpose of the storage
    ((4, 3), (2, 1), 1),           # overlapping rows from an offset
    ((2, 6), (6, 1), None),        # a reshape: a view now
])
def test_as_strided_follows_eager(size, stride, offset):
    def f(x):
        return torch.as_strided(x * 2, size, stride, offset) + 1

    x = torch.randn(12)
    cm = uniorch.compile(f, target="interpret")
    torch.testing.assert_close(cm(x), f(x))
