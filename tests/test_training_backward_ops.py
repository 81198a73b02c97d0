"""Backward ops that training graphs bring and torch-mlir cannot lower by itself, through uniorch.

Each case trains one step compiled and eagerly from the same weights on fresh random inputs, and
checks every gradient against eager's and that the backward graph has no op left to PyTorch.
"""
import copy
import itertools

import pytest
import torch
from torch import nn

import uniorch
from uniorch.capture.conv_backward import _convolution_backward

aten = torch.ops.aten


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-6))


def _one_step(model, x, input_grad: bool = True):
    """(compiled model's report, worst relative gradient error over the parameters and the input)."""
    torch.manual_seed(0)
    model.train()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, "interpret")
    xc, xr = x.clone().requires_grad_(input_grad), x.clone().requires_grad_(input_grad)
    cm(xc).pow(2).mean().backward()
    ref(xr).pow(2).mean().backward()
    errs = [_rel(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters())]
    if input_grad:
        errs.append(_rel(xc.grad, xr.grad))
    return cm.explain(xc), max(errs)


@pytest.mark.parametrize("nd,groups,transposed,stride,padding,dilation", [
    c for c in itertools.product([1, 2, 3], [1, 2, 4], [False, True], [1, 2], [0, 1], [1, 2])
    if c[1] > 1 or c[2]])
def test_convolution_backward_rewrite_is_exact(nd, groups, transposed, stride, padding, dilation):
    """Against ATen's own convolution_backward in float64, every gradient."""
    gen = torch.Generator().manual_seed(nd * 100 + groups * 10 + stride)
    cin, cout, k = 4, 8, [3] * nd
    wshape = [cin, cout // groups] if transposed else [cout, cin // groups]
    w = torch.randn(*wshape, *k, dtype=torch.float64, generator=gen)
    x = torch.randn(2, cin, *[7] * nd, dtype=torch.float64, generator=gen)
    out_pad = [1 if transposed and stride == 2 else 0] * nd
    conf = ([stride] * nd, [padding] * nd, [dilation] * nd, transposed, out_pad, groups)
    y = aten.convolution(x, w, None, *conf)
    dy = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    want = aten.convolution_backward(dy, x, w, [cout], *conf, [True] * 3)
    got = _convolution_backward(dy, x, w, [cout], *conf, [True] * 3)
    for g, r in zip(got, want):
        assert g.shape == r.shape
        # ATen's layout (size-1 dims aside: any stride lays them out alike): ops after it may assume it
        assert [s for s, n in zip(g.stride(), g.shape) if n > 1] == [s for s, n in zip(r.stride(), r.shape) if n > 1]
        assert _rel(g, r) < 1e-12


@pytest.mark.parametrize("name,make,shape", [
    ("depthwise", lambda: nn.Conv2d(8, 8, 3, padding=1, groups=8), (2, 8, 8, 8)),
    ("grouped_strided", lambda: nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2), (2, 4, 8, 8)),
    ("transposed", lambda: nn.ConvTranspose2d(4, 8, 2, stride=2), (2, 4, 5, 5)),
    ("transposed_depthwise", lambda: nn.ConvTranspose2d(6, 6, 3, stride=2, padding=1, groups=6), (2, 6, 5, 5)),
    ("grouped_1d", lambda: nn.Conv1d(4, 8, 3, padding=1, groups=4), (2, 4, 9)),
    # wav2vec 2.0's and HuBERT's positional convolution: its weight-normed weight's gradient (a
    # transposed view) reached weight norm's eager backward, which read it as contiguous
    ("weight_norm_grouped_1d", lambda: nn.utils.parametrizations.weight_norm(
        nn.Conv1d(8, 8, 4, padding=2, groups=2), name="weight", dim=2), (2, 8, 9)),
])
def test_grouped_and_transposed_convolutions_train_in_kernels(name, make, shape):
    torch.manual_seed(3)
    model = nn.Sequential(make(), nn.ReLU())
    report, err = _one_step(model, torch.randn(*shape))
    assert err <= 1e-4, err
    assert report.backward is not None and report.backward.kernels
    assert not report.backward.fallbacks, [f.op for f in report.backward.fallbacks]


def test_depthwise_transposed_convolution_inference():
    """The forward rewrite (a zero second channel per group) on its own, against eager."""
    torch.manual_seed(4)
    conv = nn.ConvTranspose2d(6, 6, 3, stride=2, padding=1, output_padding=1, groups=6).eval()
    x = torch.randn(2, 6, 5, 5)
    cm = uniorch.compile(conv, "interpret")
    with torch.no_grad():
        assert _rel(cm(x), conv(x)) <= 1e-5
    assert not cm.explain(x).fallbacks


@pytest.mark.parametrize("channels", [8, 7])
def test_depthwise_3d_convolution_inference(channels):
    """torch-mlir leaves a 3-d depthwise convolution unlowered (the whole op ran in PyTorch): channel
    pairs become groups of two with a block-diagonal weight, an odd count a zero second output
    channel per group (capture/conv_backward.py `_convolution`)."""
    torch.manual_seed(5)
    conv = nn.Conv3d(channels, channels, (3, 3, 3), stride=(1, 2, 2), padding=1, groups=channels).eval()
    x = torch.randn(2, channels, 4, 7, 7)
    cm = uniorch.compile(conv, "interpret")
    with torch.no_grad():
        assert _rel(cm(x), conv(x)) <= 1e-5
        x = torch.randn(2, channels, 4, 7, 7)
        assert _rel(cm(x), conv(x)) <= 1e-5
    rep = cm.explain(x)
    assert not rep.fallbacks and any(k.kind == "contraction" for k in rep.kernels), str(rep)


@pytest.mark.parametrize("act", [nn.SiLU, nn.Mish])
def test_activation_backward_with_only_a_composite_kernel(act):
    """silu_backward / mish_backward: export keeps them whole and torch-mlir lowers neither."""
    torch.manual_seed(5)
    report, err = _one_step(nn.Sequential(nn.Linear(8, 16), act(), nn.Linear(16, 4)), torch.randn(5, 8))
    assert err <= 1e-4, err
    assert not report.backward.fallbacks, [f.op for f in report.backward.fallbacks]


@pytest.mark.parametrize("rnn", [nn.LSTM, nn.GRU])
def test_recurrent_modules_train_compiled(rnn):
    """Dynamo leaves nn.LSTM/GRU to eager unless allow_rnn is set; the training path sets it."""
    torch.manual_seed(6)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = rnn(4, 8, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    report, err = _one_step(Net(), torch.randn(2, 5, 4))
    assert err <= 1e-4, err
    assert report.kernels and report.backward.kernels
    assert not report.fallbacks and not report.backward.fallbacks


@pytest.mark.parametrize("rnn,bidirectional,layers", [(nn.LSTM, False, 1), (nn.LSTM, True, 2), (nn.GRU, True, 2)])
def test_recurrent_modules_train_on_inputs_without_grad(rnn, bidirectional, layers):
    """Data that needs no gradient: on the CPU, AOTAutograd then recorded ATen's LSTM as oneDNN's
    layer op, whose workspace the meta function calls empty and which the kernel returns only
    under grad mode; the backward crashed (SIGSEGV) reading what the compiled forward gave it.
    The training path now traces without oneDNN: the cell math, compiled."""
    torch.manual_seed(6)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = rnn(6, 5, num_layers=layers, bidirectional=bidirectional, batch_first=True)

        def forward(self, x):
            out, state = self.rnn(x)  # the last layer's final state, every direction
            last = (state[0] if isinstance(state, tuple) else state)[-(1 + bidirectional):]
            return out + last.transpose(0, 1).flatten(1).unsqueeze(1)

    report, err = _one_step(Net(), torch.randn(3, 4, 6), input_grad=False)
    assert err <= 1e-4, err
    assert report.kernels and report.backward.kernels
    # traced without oneDNN, whose layer op (run in PyTorch, once per layer and direction) it was
    assert not report.fallbacks and not report.backward.fallbacks


@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize("ins,outs", [((7, 5, 6), (3, 2, 4)), ((8, 8, 8), (4, 4, 2)), ((4, 6, 5), (6, 7, 3))])
def test_adaptive_pool_backward_rewrites_are_exact(nd, ins, outs):
    """Overlapping windows (sizes that do not divide) and upsampling ones, against ATen in float64."""
    from uniorch.capture.pool_backward import TABLE

    gen = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, *ins[:nd], dtype=torch.float64, generator=gen)
    avg, avg_bw = ((aten._adaptive_avg_pool2d, aten._adaptive_avg_pool2d_backward.default) if nd == 2
                   else (aten._adaptive_avg_pool3d, aten._adaptive_avg_pool3d_backward.default))
    mx, mx_bw = ((aten.adaptive_max_pool2d, aten.adaptive_max_pool2d_backward.default) if nd == 2
                 else (aten.adaptive_max_pool3d, aten.adaptive_max_pool3d_backward.default))
    g = torch.randn(avg(x, outs[:nd]).shape, dtype=torch.float64, generator=gen)
    assert _rel(TABLE[avg_bw](g, x), avg_bw(g, x)) < 1e-12
    _, idx = mx(x, outs[:nd])
    assert _rel(TABLE[mx_bw](g, x, idx), mx_bw(g, x, idx)) < 1e-12
    _, idx = mx(x[0], outs[:nd])  # unbatched
    assert _rel(TABLE[mx_bw](g[0], x[0], idx), mx_bw(g[0], x[0], idx)) < 1e-12


@pytest.mark.parametrize("pool", [nn.AdaptiveAvgPool2d((3, 2)), nn.AdaptiveMaxPool2d((3, 4))])
def test_adaptive_pools_train_in_kernels(pool):
    torch.manual_seed(8)
    report, err = _one_step(nn.Sequential(nn.Conv2d(3, 4, 3), pool, nn.Flatten(), nn.Linear(4 * pool.output_size[0]
                                                                                               * pool.output_size[1], 2)),
                            torch.randn(2, 3, 9, 7))
    assert err <= 1e-4, err
    assert not report.backward.fallbacks, [f.op + ": " + f.why for f in report.backward.fallbacks]


class _FractionalPool(nn.Module):
    def forward(self, h):  # fixed samples: eager and the compiled step pool the same windows
        return nn.functional.fractional_max_pool2d(h, 2, output_size=(3, 3), _random_samples=torch.full((2, 4, 2), 0.3))


@pytest.mark.parametrize("name,layer", [("replicate_conv", nn.Conv2d(4, 4, 3, padding=1, padding_mode="replicate")),
                                        ("fractional_max_pool", _FractionalPool())])
def test_replicate_padding_and_fractional_pooling_train_in_kernels(name, layer):
    """replication_pad2d_backward and fractional_max_pool2d_backward have no decomposition in
    PyTorch and no lowering in torch-mlir: each ran in PyTorch inside the backward's kernels
    (capture/pad_backward.py, capture/pool_backward.py)."""
    torch.manual_seed(9)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), layer, nn.Flatten(), nn.LazyLinear(2))
    x = torch.randn(2, 3, 9, 8)
    model(x)  # the lazy layer's shape
    report, err = _one_step(model, x)
    assert err <= 1e-4, err
    assert not report.backward.fallbacks, [f.op + ": " + f.why for f in report.backward.fallbacks]


@pytest.mark.parametrize("name", ["densenet_block", "cnn_pools", "mobilenet_block"])
def test_zoo_convolution_blocks_backward_all_in_kernels(name):
    """densenet_block's input gradient of a 3x3 convolution (a transposed convolution of a value
    computed in the same kernel) failed codegen; cnn_pools' adaptive pools and mobilenet_block's
    depthwise convolutions had no lowering."""
    from uniorch.testing import zoo

    model, args, kwargs = zoo.load(name)
    assert not kwargs and len(args) == 1
    (x,), _ = zoo.fresh_inputs(args, kwargs, seed=9)
    report, err = _one_step(model, x)
    assert err <= 1e-4, err
    assert not report.backward.fallbacks, [f.op + ": " + f.why for f in report.backward.fallbacks]


@pytest.mark.parametrize("mode,padding_idx,per_sample,include_last", [
    c for c in itertools.product([0, 1, 2], [-1, 3], [False, True], [False, True]) if not (c[2] and c[0] != 0)])
def test_embedding_bag_backward_rewrite_is_exact(mode, padding_idx, per_sample, include_last):
    """Against ATen in float64, from uniorch's own forward outputs (whose offset2bag is empty on
    ATen's sum fast path); an empty bag and repeated indices included."""
    from uniorch.capture.embedding_bag import embedding_bag as _embedding_bag
    from uniorch.capture.embedding_bag import embedding_bag_backward as _embedding_bag_backward

    gen = torch.Generator().manual_seed(10)
    w = torch.randn(10, 5, dtype=torch.float64, generator=gen)
    idx = torch.tensor([1, 3, 3, 7, 0, 9, 3, 2])
    offsets = torch.tensor([0, 2, 2, 5] + ([8] if include_last else []))
    psw = torch.randn(8, dtype=torch.float64, generator=gen) if per_sample else None
    conf = (False, mode, False, psw, include_last, padding_idx)
    out = aten._embedding_bag(w, idx, offsets, *conf)
    g = torch.randn(out[0].shape, dtype=torch.float64, generator=gen)
    want = aten._embedding_bag_backward(g, idx, offsets, *out[1:], 10, False, mode, False, psw, padding_idx)
    mine = _embedding_bag(w, idx, offsets, *conf)
    got = _embedding_bag_backward(g, idx, offsets, *mine[1:], 10, False, mode, False, psw, padding_idx)
    assert _rel(got, want) < 1e-12


@pytest.mark.parametrize("mode", ["mean", "max"])
def test_embedding_bag_trains_in_kernels(mode):
    torch.manual_seed(11)

    class Bags(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = nn.EmbeddingBag(20, 6, mode=mode, padding_idx=0)
            self.out = nn.Linear(6, 3)

        def forward(self, idx, offsets):
            return self.out(self.bag(idx, offsets))

    model = Bags().train()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, "interpret")
    idx, offsets = torch.randint(0, 20, (12,)), torch.tensor([0, 3, 3, 7])
    cm(idx, offsets).pow(2).mean().backward()
    ref(idx, offsets).pow(2).mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert _rel(p.grad, q.grad) <= 1e-4
    report = cm.explain(idx, offsets)
    assert report.backward.kernels and not report.backward.fallbacks, [f.op for f in report.backward.fallbacks]


def test_a_bundle_graph_stores_the_layer_op_its_program_calls_under_grad_mode():
    from uniorch.runtime.graph_json import dump_graph, load_graph
    from uniorch.runtime.partition import _OPAQUE_RESULTS

    op = aten.mkldnn_rnn_layer.default
    g = torch.fx.Graph()
    g.output(g.call_function(_OPAQUE_RESULTS[op], tuple(g.placeholder(f"a{i}") for i in range(7))))
    rec = dump_graph(g)["nodes"][7]
    assert rec["target"] == "aten.mkldnn_rnn_layer.default" and rec["schema"] == str(op._schema)
    assert [n.target for n in load_graph(dump_graph(g)).nodes][7] is op
