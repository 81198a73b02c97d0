"""bf16 LayerNorm → Linear → residual → LayerNorm: every kernel boundary carries bf16 values."""
import torch
from torch import nn
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.ln = nn.LayerNorm(32); s.l = nn.Linear(32, 32); s.ln2 = nn.LayerNorm(32)
    def forward(s, x):
        h = s.l(s.ln(x))
        return s.ln2(h + x)
def make():
    torch.manual_seed(0)
    return M().eval().to(torch.bfloat16), (torch.randn(2, 9, 32, dtype=torch.bfloat16),)
