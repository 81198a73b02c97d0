"""uniorch-fuse: which ops share a kernel (docs/kernels.md §2). Structural checks on captured
functions and hand-written IR, plus end-to-end numerics of fused graphs (every group generated and
run in Triton's interpreter, compared with eager on fresh random inputs)."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch_mlir import ir

from kernel_util import capture, groups, main_of, run_module

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _kinds(module) -> dict[int, str]:
    out = {}
    for n, ops in groups(module).items():
        kinds = [ir.StringAttr(o.attributes["uniorch.kind"]).value for o in ops if "uniorch.kind" in o.attributes]
        assert len(kinds) == 1, f"group {n} has {len(kinds)} anchors"
        out[n] = kinds[0]
    return out


def _domain(module, n):
    anchor = next(o for o in groups(module)[n] if "uniorch.domain" in o.attributes)
    d = ir.DictAttr(anchor.attributes["uniorch.domain"])
    return ([ir.IntegerAttr(x).value for x in ir.ArrayAttr(d["parallel"])],
            [ir.IntegerAttr(x).value for x in ir.ArrayAttr(d["reduction"])])


def assert_acyclic(module):
    """Groups contracted to single nodes, the graph of @main's ops stays a DAG."""
    main = main_of(module)
    ops = [o.operation for o in main.regions[0].blocks[0].operations]

    def top(o):
        while o.parent is not None and o.parent != main:
            o = o.parent
        return o

    node = {}
    for i, o in enumerate(ops):
        node[i] = ("g", ir.IntegerAttr(o.attributes["uniorch.group"]).value) if "uniorch.group" in o.attributes else ("o", i)
    index = {}
    for i, o in enumerate(ops):
        index.setdefault(id(o), i)
    edges: dict = {}
    for i, o in enumerate(ops):
        inner = []
        o.walk(lambda x: (inner.append(x.operation), ir.WalkResult.ADVANCE)[1])
        for x in inner:
            for v in x.operands:
                if isinstance(v.owner, ir.Block):
                    continue
                src = top(v.owner.operation)
                j = next((k for k, p in enumerate(ops) if p == src), None)
                if j is not None and node[j] != node[i]:
                    edges.setdefault(node[j], set()).add(node[i])
    state: dict = {}

    def visit(n):
        state[n] = 1
        for m in edges.get(n, ()):
            if state.get(m) == 1:
                raise AssertionError(f"cycle through {n} -> {m}")
            if m not in state:
                visit(m)
        state[n] = 2

    for n in set(node.values()):
        if n not in state:
            visit(n)


class _Fused:
    """What fusion decided, read before the groups are outlined and run."""

    def __init__(self, module):
        self.kinds = _kinds(module)
        self.domains = {n: _domain(module, n) for n in self.kinds}
        self.bodies = {n: [[x.operation.name for x in o.regions[0].blocks[0].operations] if o.name == "linalg.generic" else [o.name]
                           for o in ops] for n, ops in groups(module).items()}


def _numerics(fn, args, rtol=1e-4, atol=1e-5) -> _Fused:
    module = capture(fn, args)
    assert_acyclic(module)
    fused = _Fused(module)
    outs, _ = run_module(module, args)
    ref = fn(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, ref):
        torch.testing.assert_close(o, r, rtol=rtol, atol=atol)
    return fused


# -- the pass ------------------------------------------------------------------------------------
def test_registered_with_options():
    from uniorch.passes import registry

    cls = registry.get("uniorch-fuse")
    assert cls.name == "uniorch-fuse"
    assert cls.from_options("max-ops=8").max_ops == 8
    assert cls.from_options("").pipeline_text() == "uniorch-fuse"


def test_softmax_is_one_group():
    module = capture(lambda x: torch.softmax(x, -1), (torch.randn(6, 40),))
    assert _kinds(module) == {0: "reduction"}
    assert _domain(module, 0) == ([6], [40])
    assert {o.name for o in groups(module)[0]} == {"linalg.generic", "tensor.expand_shape"}  # + the empty init's view


@pytest.mark.parametrize("which", ["layernorm", "rmsnorm"])
def test_norms_are_one_group(which):
    if which == "layernorm":
        fn, args = (lambda x, w, b: F.layer_norm(x, (32,), w, b)), (torch.randn(3, 5, 32), torch.randn(32), torch.randn(32))
    else:
        fn, args = (lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w), (torch.randn(7, 32), torch.randn(32))
    fused = _numerics(fn, args)
    assert fused.kinds == {0: "reduction"}
    assert fused.domains[0][1] == [32]


def test_linear_bias_gelu_is_one_contraction():
    module = capture(lambda x, w, b: F.gelu(F.linear(x, w, b)), (torch.randn(4, 32), torch.randn(16, 32), torch.randn(16)))
    assert _kinds(module) == {0: "contraction"}
    assert _domain(module, 0) == ([4, 16], [32])
    ops = groups(module)[0]
    # the transposed weight, the zero fill, the matmul and the bias+GELU epilogue
    assert len(ops) == 4


def test_bmm_with_transposed_operand_and_residual_epilogue():
    fn = lambda a, b, r: torch.relu(torch.bmm(a, b.transpose(1, 2)) + r)
    module = capture(fn, (torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 4, 6)))
    assert _kinds(module) == {0: "contraction"}


def test_transposes_fold_into_consumers():
    fused = _numerics(lambda x, y: torch.relu(x.t() * 2.0 + y), (torch.randn(8, 12), torch.randn(12, 8)))
    assert fused.kinds == {0: "pointwise"}


def test_broadcast_chain_grows_domain():
    fused = _numerics(lambda a, b: torch.tanh(a[:, None] * 2.0) + b, (torch.randn(5), torch.randn(5, 7)))
    assert fused.kinds == {0: "pointwise"}
    assert sorted(fused.domains[0][0]) == [5, 7]


def test_ops_sharing_only_an_iota_keep_their_own_domains():
    """A replicate pad and a linear interpolate of one tensor share the gathers' batch iotas: they
    became one kernel over the product of both domains ([2, 8, 250, 12, 14]), 10x the work of
    both together (with an adaptive pool beside them, 75M iterations and 5 s a call)."""
    def f(h):
        return F.pad(h, (2, 2, 1, 1), mode="replicate"), F.interpolate(h.flatten(2), scale_factor=2.5, mode="linear")
    fused = _numerics(f, (torch.randn(2, 8, 10, 10),))
    points = {g: math.prod(par) * math.prod(red) for g, (par, red) in fused.domains.items()}
    assert max(points.values()) <= 2 * 8 * 250, fused.domains  # the interpolation's own output


def test_cheap_producer_is_duplicated_per_consumer_group():
    """A broadcast feeding two reductions over different rows is copied into both kernels."""
    def f(x, b):
        y = x + b  # cheap: one add, with a broadcast operand
        return y.sum(0), y.amax(1)
    fused = _numerics(f, (torch.randn(6, 9), torch.randn(9)))
    assert sorted(fused.kinds.values()) == ["reduction", "reduction"]
    for bodies in fused.bodies.values():  # the add is in both kernels
        assert ["arith.addf", "linalg.yield"] in bodies


def test_expensive_shared_producer_is_cut():
    def f(x):
        e = torch.exp(x)
        return e.sum(-1), e * 3.0
    fused = _numerics(f, (torch.randn(4, 16),))
    assert sorted(fused.kinds.values()) == ["pointwise", "reduction"]
    exps = [b for bodies in fused.bodies.values() for b in bodies if "math.exp" in b]
    assert len(exps) == 1  # not recomputed


def test_values_flow_through_unit_views():
    """exp -> expand_shape (adds a unit dim) -> sum, and exp -> divide: one kernel, the view in it."""
    def f(x):
        s = x.exp()
        return s / s.sum(-1).reshape(4, 1)
    fused = _numerics(f, (torch.randn(4, 8),))
    assert fused.kinds == {0: "reduction"}
    assert ["tensor.expand_shape"] in fused.bodies[0]


def test_without_views_option_the_view_stays_between_kernels():
    from uniorch.passes import PassContext, parse_pipeline, run_pipeline

    from kernel_util import PREPROCESS

    def f(x):
        s = x.exp()
        return s / s.sum(-1).reshape(4, 1)
    module = capture(f, (torch.randn(4, 8),), fuse=False)
    run_pipeline(module, parse_pipeline(PREPROCESS + ",uniorch-fuse{views=false}", module.context), PassContext())
    assert_acyclic(module)
    assert sorted(_kinds(module).values()) == ["pointwise", "reduction"]  # exp -> view -> sum would be a cycle


NO_CYCLE = open(__file__.replace("test_fuse.py", "filecheck/fuse/no-cycle.mlir")).read()


def test_no_cycle_through_general_reshapes():
    from uniorch.ir import make_context, parse_module
    from uniorch.passes import PassContext, parse_pipeline, run_pipeline

    ctx = make_context()
    module = parse_module(NO_CYCLE, ctx)
    run_pipeline(module, parse_pipeline("uniorch-fuse", ctx), PassContext())
    assert_acyclic(module)
    assert len(groups(module)) == 3


def test_conv_bn_relu_pool_graph():
    w, b = torch.randn(4, 3, 3, 3), torch.randn(4)
    mean, var, g, beta = torch.randn(4), torch.rand(4) + 0.5, torch.randn(4), torch.randn(4)

    def f(x, w, b, mean, var, g, beta):
        y = F.conv2d(x, w, b)
        y = F.batch_norm(y, mean, var, g, beta, training=False)
        return F.max_pool2d(torch.relu(y), 2).mean((2, 3))
    fused = _numerics(f, (torch.randn(2, 3, 10, 10), w, b, mean, var, g, beta), atol=1e-4)
    # conv (+bias, BN, ReLU and the 2x2 pool as its epilogue: try_join_window), mean
    assert sorted(fused.kinds.values()) == ["contraction", "reduction"]


def test_transformer_ish_block_numerics():
    def f(x, w, b, res):
        h = F.layer_norm(x + res, (16,), w, b)
        p = torch.softmax(h * 0.25, -1)
        return F.gelu(p) + h
    _numerics(f, (torch.randn(3, 5, 16), torch.randn(16), torch.randn(16), torch.randn(3, 5, 16)))


def test_argmax_and_gather_groups():
    def f(x, table, idx):
        return torch.argmax(x, -1), F.embedding(idx, table) * 2.0
    _numerics(f, (torch.randn(4, 9), torch.randn(10, 3), torch.randint(0, 10, (2, 3))))


# -- hand-written IR -----------------------------------------------------------------------------
ASSERT_AND_TM = """
func.func @main(%x: tensor<4xf32>, %i: tensor<4xi64>) -> (tensor<4xf32>, tensor<4xi64>) {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) {
  ^bb0(%in: f32):
    %ok = arith.cmpf one, %in, %c0 : f32
    cf.assert %ok, "unimplemented: tensor with zero element"
    linalg.yield
  }
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = math.exp %in : f32
    linalg.yield %1 : f32
  } -> tensor<4xf32>
  %ei = tensor.empty() : tensor<4xi64>
  %ea = tensor.empty() : tensor<i64>
  %s:2 = tm_tensor.scan dimension(0) inclusive(true) ins(%i : tensor<4xi64>) outs(%ei, %ea : tensor<4xi64>, tensor<i64>) {
  ^bb0(%a: i64, %b: i64):
    %2 = arith.addi %a, %b : i64
    tm_tensor.yield %2 : i64
  } -> tensor<4xi64>, tensor<i64>
  return %0, %s#0 : tensor<4xf32>, tensor<4xi64>
}
"""


def test_asserts_erased_scan_is_its_own_kernel():
    from uniorch.ir import make_context, parse_module
    from uniorch.passes import PassContext, parse_pipeline, run_pipeline

    ctx = make_context()
    module = parse_module(ASSERT_AND_TM, ctx)
    run_pipeline(module, parse_pipeline("uniorch-fuse", ctx), PassContext())
    text = str(module)
    assert "cf.assert" not in text
    ops = [o.operation for o in main_of(module).regions[0].blocks[0].operations]
    scan = next(o for o in ops if o.name == "tm_tensor.scan")
    assert "uniorch.group" in scan.attributes  # a "scan" kernel (codegen/scan.py)
    assert _kinds(module) == {0: "pointwise", 1: "scan"}


def test_is_contraction_patterns():
    from uniorch.codegen.patterns import contraction_dims, is_contraction
    from uniorch.ir import make_context, parse_module

    def generic(maps, iters, body, a="tensor<4x8xf32>", b="tensor<8x6xf32>", c="tensor<4x6xf32>"):
        text = f"""
        func.func @f(%a: {a}, %b: {b}, %c: {c}) -> {c} {{
          %0 = linalg.generic {{indexing_maps = [{', '.join(f'affine_map<{m}>' for m in maps)}], iterator_types = {iters}}}
              ins(%a, %b : {a}, {b}) outs(%c : {c}) {{
          ^bb0(%x: f32, %y: f32, %o: f32):
            {body}
          }} -> {c}
          return %0 : {c}
        }}"""
        m = parse_module(text, make_context())
        return m, next(o.operation for o in m.body.operations[0].regions[0].blocks[0].operations)

    mm = ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"]
    it = '["parallel", "parallel", "reduction"]'
    mac = "%1 = arith.mulf %x, %y : f32\n %2 = arith.addf %o, %1 : f32\n linalg.yield %2 : f32"
    keep = []
    m, op = generic(mm, it, mac)
    keep.append(m)
    assert is_contraction(op) and contraction_dims(op).m == (0,) and contraction_dims(op).k == (2,)
    # B transposed in the map (permuted operand)
    m, op = generic(["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d1, d2)", "(d0, d1, d2) -> (d0, d1)"], it, mac,
                    b="tensor<6x8xf32>")
    keep.append(m)
    assert is_contraction(op)
    # a scaled product is not a plain contraction
    m, op = generic(mm, it, "%s = arith.constant 2.0 : f32\n %1 = arith.mulf %x, %y : f32\n %3 = arith.mulf %1, %s : f32\n"
                            " %2 = arith.addf %o, %3 : f32\n linalg.yield %2 : f32")
    keep.append(m)
    assert not is_contraction(op)
    # max-plus is a reduction, not a contraction
    m, op = generic(mm, it, "%1 = arith.addf %x, %y : f32\n %2 = arith.maximumf %o, %1 : f32\n linalg.yield %2 : f32")
    keep.append(m)
    assert not is_contraction(op)


def test_convolution_is_an_implicit_gemm_contraction():
    module = capture(lambda x, w: F.conv2d(x, w, padding=1), (torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)))
    assert _kinds(module) == {0: "contraction"}  # the pad joins the conv: no copy kernel


def test_sibling_reductions_share_a_kernel():
    """Two reductions of the same rows with no edge between them read the input once."""
    fused = _numerics(lambda x: (x.sum(-1), x.amax(-1), x.abs().sum(-1)), (torch.randn(6, 20),))
    assert fused.kinds == {0: "reduction"}


def test_reductions_sharing_an_init_are_siblings():
    """Two reductions of different inputs sharing one init (a fill behind a keepdim view): the
    shared init makes them siblings, one kernel computes both."""
    def f(x, y):
        return x.amax(-1, keepdim=True), (y * 2).amax(-1, keepdim=True)
    fused = _numerics(f, (torch.randn(3, 9), torch.randn(3, 9)))
    assert fused.kinds == {0: "reduction"}


def test_softmaxes_over_different_dims_share_a_converted_input():
    """Regression: the second group adopted the unit view the first group's clone left dead, and
    annotate() crashed on the erased op (fuzzer: softmax(x, 0), softmax(x, 2) of a bf16 tensor)."""
    x = torch.randn(1, 4, 1).bfloat16()
    fused = _numerics(lambda x: (torch.softmax(x, 0), torch.softmax(x, 2)), (x,), rtol=1e-2, atol=1e-2)
    assert sorted(fused.kinds.values()) == ["reduction", "reduction"]
    x = torch.randn(3, 5, 4).bfloat16()
    _numerics(lambda x: (torch.softmax(x, 0), torch.softmax(x, 2)), (x,), rtol=1e-2, atol=1e-2)


def _graph(order, edges, groups):
    """uniorch-fuse's dependency graph over named ops, for its cycle check alone."""
    from types import SimpleNamespace

    from uniorch.passes.fuse_graph import DependencyGraph

    g = DependencyGraph()
    g.ops, g._index = list(order), {o: i for i, o in enumerate(order)}
    g.succs = {o: {b for a, b in edges if a == o} for o in order}
    g.groups = [SimpleNamespace(ops=list(ops)) for ops in groups]
    g.group_of = {o: i for i, ops in enumerate(groups) for o in ops}
    return g


def test_cycle_check_follows_a_group_back_across_the_last_member():
    """G = {a1} takes a2. a1 feeds a5 and a0 feeds a2, and a0 and a5 are one kernel H: G -> H -> G.
    The path leaves past a2, the last op G would hold, and comes back through H's first member: the
    check's walk stops at a block position only past every group straddling it."""
    order = ["a0", "a1", "a2", "a3", "a4", "a5"]
    edges = [("a1", "a5"), ("a0", "a2"), ("a1", "a2"), ("a3", "a4")]
    g = _graph(order, edges, [["a1"], ["a0", "a5"]])
    assert g.creates_cycle(g.groups[0], "a2")
    g = _graph(order, edges, [["a1"], ["a5"]])
    assert not g.creates_cycle(g.groups[0], "a2")
    g = _graph(order, edges + [("a1", "a3")], [["a1"], ["a5"]])  # a1 -> a3 -> a4, before the bound
    assert g.creates_cycle(g.groups[0], "a4")


@pytest.mark.parametrize("name", ["masked_cumsum_argmax", "cnn_pools", "hf_t5"])
def test_a_refused_join_through_a_view_leaves_no_trace(name, monkeypatch):
    """Joining through a unit view clones it (and a cheap producer behind it) before the trial;
    a refused trial takes the clones back. Every such join refused after its clones must fuse the
    model exactly as refusing it before, and after each the dependency graph must be the one a
    fresh build finds (clones and redirected users keyed as they are now)."""
    from uniorch.ir import to_mlir
    from uniorch.passes import fuse as fuse_mod
    from uniorch.passes.fuse_graph import DependencyGraph
    from uniorch.runtime.compiler import to_kernel_stage
    from uniorch.targets import parse_target
    from uniorch.testing import zoo

    model, args, kwargs = zoo.load(name)
    join, cycle = fuse_mod._Fusion.try_join_view, fuse_mod._Fusion.creates_cycle
    undone = []

    def edges(graph, block):
        at = {o.operation: i for i, o in enumerate(block.operations)}
        return ({at[o]: sorted(at[p] for p in ps) for o, ps in graph.preds.items()},
                {at[o]: sorted(at[s] for s in ss) for o, ss in graph.succs.items()})

    def refused_late(self, g, x, role, view):
        before = len(list(self.block.operations))
        self.refuse = True
        try:
            assert not join(self, g, x, role, view)
        finally:
            self.refuse = False
        fresh = DependencyGraph()
        fresh.main, fresh.block = self.main, self.block
        fresh.build_graph()
        assert edges(self, self.block) == edges(fresh, self.block)
        assert all(o in self.preds and o in self.succs for o in fresh.preds)  # hashed as they are now
        assert all(self.group_of.get(o) == i for i, grp in enumerate(self.groups) for o in grp.ops)
        assert len(list(self.block.operations)) == before
        undone.append(role)
        return False

    def fused(mode):
        if mode == "late":
            monkeypatch.setattr(fuse_mod._Fusion, "try_join_view", refused_late)
            monkeypatch.setattr(fuse_mod._Fusion, "creates_cycle",
                                lambda self, *a: getattr(self, "refuse", False) or cycle(self, *a))
        else:
            monkeypatch.setattr(fuse_mod._Fusion, "try_join_view", lambda self, *a: False)
        module = to_mlir(model, args, kwargs)
        to_kernel_stage(module, "fused", parse_target("cuda:sm_90"))
        return str(module)

    early, late = fused("early"), fused("late")
    assert undone, "no join through a view was tried"
    assert late == early
