import os

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _fresh_seed():
    """Inputs are fresh per test run: seeded from the OS, printed on failure via the test id."""
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    yield
