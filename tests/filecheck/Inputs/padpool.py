"""Two poolings of one conv output, both padded: max (pad -inf) and average (pad 0)."""
import torch, torch.nn as nn, torch.nn.functional as F
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.c = nn.Conv2d(3, 4, 3)
    def forward(s, x):
        y = s.c(x)
        return F.max_pool2d(y, 3, 2, 1), F.avg_pool2d(y, 3, 1, 1)
def make():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(1, 3, 9, 9),)
