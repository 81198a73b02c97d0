"""tools/vision_table.py: torchvision and timm models through uniorch.compile, a table row each.
Neither library is a dependency: the real-model row runs where torchvision is installed."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from uniorch.tools import vision_table


def test_a_model_spec_it_cannot_build_is_a_failed_row_naming_it(capsys):
    assert vision_table.main(["--models", "keras:resnet@32"]) == 1
    out = capsys.readouterr().out
    assert "| keras:resnet@32 | failed: ValueError: 'keras:resnet@32': models are tv:" in out


def test_a_zero_filled_head_is_drawn_at_random():
    """torchvision's ViT zero-fills its head: logits all zero would match any wrong compile."""
    head = torch.nn.Linear(8, 10)
    torch.nn.init.zeros_(head.weight)
    hidden = torch.nn.Linear(4, 8)
    before = hidden.weight.clone()
    vision_table.draw_zero_heads(torch.nn.Sequential(hidden, torch.nn.ReLU(), head), 10)
    assert head.weight.abs().sum() > 0 and torch.equal(hidden.weight, before)


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="torchvision is not installed")
def test_a_torchvision_model_row_matches_eager():
    line = vision_table.row("tv:squeezenet1_1@64", vs_inductor=False)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == "tv:squeezenet1_1" and not cells[1].startswith("failed"), line
    assert float(cells[4]) < 1e-4, line


def test_the_written_table_says_how_it_was_made(tmp_path, capsys):
    out = tmp_path / "t.md"
    vision_table.main(["--models", "keras:resnet@32", "--out", str(out)])
    text = out.read_text()
    assert text.startswith("# Vision models as torchvision and timm build them")
    assert f"torch {torch.__version__}" in text and "| keras:resnet@32 | failed:" in text
