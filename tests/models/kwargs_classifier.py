"""A classifier called with keyword arguments: a float temperature and an optional tensor mask kwarg,
a bool flag; returns a namedtuple-like tuple."""
import torch
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    def __init__(self, dim=12, classes=5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, 24), nn.Mish(), nn.Linear(24, classes))

    def forward(self, x, *, class_mask=None, temperature: float = 1.0, return_probs: bool = False):
        logits = self.body(x) / temperature
        if class_mask is not None:
            logits = logits.masked_fill(~class_mask, -1e4)
        if return_probs:
            return logits, F.softmax(logits, dim=-1)
        return logits


def make():
    torch.manual_seed(32)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[:, 3] = False
    kwargs = {"class_mask": mask, "temperature": 0.7, "return_probs": True}
    return Classifier().eval(), (torch.randn(4, 12),), kwargs
