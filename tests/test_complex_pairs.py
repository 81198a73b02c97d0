"""Complex tensors as real pairs (capture/complex_pairs.py): graphs with complex inputs, outputs
and intermediates compile with nothing left to eager, and match eager on fresh inputs."""
import pytest
import torch

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _z(*shape, dtype=torch.complex64):
    return torch.randn(*shape, dtype=dtype)


CASES = {
    "cfloat": (lambda x: x.cfloat(), lambda: (torch.randn(3, 4),)),
    "cdouble": (lambda x: x.cdouble() * 2, lambda: (torch.randn(3, 4),)),
    "chalf": (lambda x: x.chalf(), lambda: (torch.randn(5),)),
    "complex_polar": (lambda a, b: torch.complex(a, b) + torch.polar(a.abs(), b),
                      lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    "view_as_complex": (lambda a: torch.view_as_complex(a) * 1j, lambda: (torch.randn(3, 4, 2),)),
    "arith": (lambda z, w: (z * w - z / w + z.conj(), (z * w).abs(), z.angle(), z.real, z.imag),
              lambda: (_z(6), _z(6))),
    "shapes_and_sum": (lambda z: (z.t().reshape(2, 6).sum(-1), z.transpose(0, 1)[1:, -1], torch.cat([z, z.exp()], 0)),
                       lambda: (_z(4, 3),)),
    "matmul": (lambda z, w: z @ w, lambda: (_z(3, 5), _z(5, 2))),
    "complex128": (lambda z: torch.view_as_real(z * z), lambda: (_z(2, 3, dtype=torch.complex128),)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_complex_graphs_compile_as_pairs(case):
    fn, make = CASES[case]
    args = make()
    rep = uniorch.explain(fn, *args, target="interpret")
    assert not rep.fallbacks, rep
    out, ref = uniorch.compile(fn, target="interpret")(*args), fn(*args)
    torch.testing.assert_close(out, ref)


def test_complex_bundle_round_trip(tmp_path):
    def fn(z, x):
        return z * x + 1, (z.abs() * x).sum()

    z, x = _z(4, 3), torch.randn(4, 3)
    uniorch.compile_aot(fn, (z, x), target="interpret").save(str(tmp_path / "cx"))
    loaded = uniorch.load(str(tmp_path / "cx"))
    z2, x2 = _z(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(loaded(z2, x2), fn(z2, x2))


def test_an_op_without_a_rule_leaves_the_graph_as_captured():
    def fn(z):
        return torch.sqrt(z) + 1  # no pair rule for complex sqrt: eager, and said so

    z = _z(5)
    rep = uniorch.explain(fn, z, target="interpret")
    assert rep.fallbacks
    torch.testing.assert_close(uniorch.compile(fn, target="interpret")(z), fn(z))


def _complex_rotary(x, freqs):
    """Meta's Llama rotary (Llama 4 in transformers): pairs of features as complex numbers times
    unit phases e^(i t f) of the position t, a complex tensor built from the length."""
    t = torch.arange(x.shape[1], dtype=torch.float32)
    cis = torch.polar(torch.ones(x.shape[1], freqs.shape[0]), torch.outer(t, freqs))
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(z * cis).flatten(-2)


def test_complex_values_at_a_symbolic_length_compile_once():
    # the pairing retraced with example tensors of the sizes as numbers, which failed at symbolic
    # ones: every new length compiled again (Llama 4's decode steps)
    cm = uniorch.compile(_complex_rotary, target="interpret")
    freqs = 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8)
    for t in (5, 9, 13, 6):
        x = torch.randn(2, t, 8)
        torch.testing.assert_close(cm(x, freqs), _complex_rotary(x, freqs))
    assert cm.cache_size == 2 and "compiled with symbolic sizes" in cm.recompiles[-1], cm.recompiles
    assert not cm.explain(x, freqs).fallbacks


def test_log_mel_style_stft_magnitude_transposed_into_a_matmul():
    # to_pairs could not view the transposed magnitude ("Cannot view a tensor with shape [2, 101, 33]
    # and strides (3333, 1, 101)"): the error reached the user; now the call compiles
    window, fb = torch.hann_window(64), torch.rand(33, 16)

    def fn(wav):
        return torch.stft(wav, 64, 16, window=window, return_complex=True).abs().transpose(-1, -2) @ fb

    x = torch.randn(2, 1600)
    got, want = uniorch.compile(fn)(x), fn(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
