"""A factory that fails in the user's own code (python-errors.test checks these line numbers)."""
import torch


def load_checkpoint(path):
    raise FileNotFoundError(f"no checkpoint at {path}")  # line 6


def make():
    state = load_checkpoint("missing.pt")  # line 10
    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)
