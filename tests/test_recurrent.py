"""nn.LSTM capture: outputs and final (h, c) states match eager, in shape and value, whichever torch
release supplies the LSTM decomposition (uniorch/capture/recurrent.py)."""
import copy

import pytest
import torch
import torch._decomp.decompositions as torch_decomps
from torch import nn

import uniorch

# (constructor keywords, input shape, whether (h0, c0) are passed); batch 1 is the one size torch
# 2.11's squeeze(1) happened to get right, so it stays in to show the fix leaves it alone.
CASES = {
    "plain": (dict(), (3, 5, 6), False),
    "proj": (dict(proj_size=4), (3, 5, 6), False),
    "bidirectional_proj": (dict(bidirectional=True, proj_size=4), (3, 5, 6), False),
    "batch1_proj": (dict(proj_size=4), (1, 5, 6), False),
    "given_state": (dict(proj_size=4), (2, 4, 6), True),
    "seq_first": (dict(batch_first=False), (4, 3, 6), False),
}


def _make(kwargs, shape, with_state):
    kwargs = {"batch_first": True, **kwargs}
    model = nn.LSTM(6, 12, num_layers=2, **kwargs).eval()
    batch = shape[0] if kwargs["batch_first"] else shape[1]
    layers = 2 * (2 if kwargs.get("bidirectional") else 1)
    h_size = kwargs.get("proj_size") or 12

    def inputs():
        x = torch.randn(shape)
        return (x, (torch.randn(layers, batch, h_size), torch.randn(layers, batch, 12))) if with_state else (x,)

    return model, inputs


def _check_against_eager(model, inputs):
    cg = uniorch.capture(model, inputs())
    reference = copy.deepcopy(model)
    for _ in range(2):  # values the capture never saw
        args = inputs()
        with torch.no_grad():
            expected = reference(*args)
            got = cg(*args)
        out, (h_n, c_n) = got
        assert h_n.shape == expected[1][0].shape and c_n.shape == expected[1][1].shape
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_lstm_capture_matches_eager(case):
    _check_against_eager(*_make(*CASES[case]))


def _one_layer_lstm_as_in_torch_2_11(real, calls):
    """torch 2.11's per-layer decomposition: the final states squeezed at dim 1 instead of dim 0,
    which leaves the [1, batch, size] state unchanged unless batch is 1. Built on the installed
    release's function, so the same pattern reaches capture on any torch."""

    def one_layer_lstm(inp, hidden, params, has_biases, reverse=False):
        calls.append(reverse)
        out, (hy, cy) = real(inp, hidden, params, has_biases, reverse)
        # hy/cy are [batch, size] where dim 0 was squeezed and already 2.11's shape where it was not
        if hy.dim() == hidden[0].dim():
            hy, cy = hy.unsqueeze(0), cy.unsqueeze(0)
        return out, (hy.squeeze(1), cy.squeeze(1))

    return one_layer_lstm


@pytest.mark.parametrize("case", ["plain", "bidirectional_proj", "batch1_proj", "given_state"])
def test_lstm_states_keep_their_shape_under_torch_2_11_decomposition(case, monkeypatch):
    calls = []
    real = torch_decomps.one_layer_lstm
    monkeypatch.setattr(torch_decomps, "one_layer_lstm", _one_layer_lstm_as_in_torch_2_11(real, calls))
    _check_against_eager(*_make(*CASES[case]))
    assert calls, "capture no longer goes through torch's one_layer_lstm: this test checks nothing"
