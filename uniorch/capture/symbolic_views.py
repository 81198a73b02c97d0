"""Views that merge symbolic dims, as `prims.collapse`: the form torch-mlir lowers correctly.

torch-mlir lowers `aten.view(x, [s0 * s1, 32])` of a `[s0, s1, 32]` tensor (what `nn.Linear` does
to a 3-d input) by casting the second dim to 1 (`tensor.cast ... to tensor<?x1x32xf32>`) and
collapsing `[[0], [1, 2]]`: right only when s1 is 1. `flatten` is turned into that same view by
its pipeline. `prims.collapse(x, 0, 1)` becomes `tensor.collapse_shape [[0, 1], [2]]`, which is
right for every size. Views that split a symbolic dim stay views: torch-mlir lowers those through
`tensor.reshape` of the computed sizes, which is right (if opaque).
"""
from __future__ import annotations

import operator

import sympy
import torch


def _expr(size):
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))


def _equal(a, b) -> bool:
    return sympy.expand(a - b) == 0


def merge_groups(src: list, dst: list) -> list[tuple[int, int]] | None:
    """(start, end) dim ranges of `src` that merge into one dim of `dst`, when the view only
    merges adjacent dims; None when it splits or regroups some."""
    groups, i = [], 0
    for d in dst:
        if i >= len(src):
            return None
        start, prod = i, src[i]
        i += 1
        while not _equal(prod, d) and i < len(src):
            prod = prod * src[i]
            i += 1
        if not _equal(prod, d):
            return None
        if sum(1 for s in src[start:i] if not _equal(s, 1)) > 1:  # dropping unit dims lowers fine as a view
            groups.append((start, i - 1))
    if i != len(src) and not all(_equal(s, 1) for s in src[i:]):
        return None
    return groups if i == len(src) else None


def _const(s):
    if isinstance(s, torch.SymInt):
        v = s.node.maybe_as_int()
        return s if v is None else v
    return s


def _concrete(val):
    if isinstance(val, (list, tuple)):
        return type(val)(_concrete(v) for v in val)
    if not isinstance(val, torch.Tensor) or not hasattr(val, "fake_mode"):
        return val
    shape, stride = [_const(s) for s in val.shape], [_const(s) for s in val.stride()]
    if all(a is b for a, b in zip((*shape, *stride), (*val.shape, *val.stride()))):
        return val
    with val.fake_mode:
        return torch.empty_strided(shape, stride, dtype=val.dtype, device=val.device)


def specialized_sizes_as_ints(gm: torch.fx.GraphModule) -> None:
    """A dim export was asked to keep symbolic but had to equate with a constant (an input's
    feature dim read by a Linear of that width) is a SymInt whose value is known; torch-mlir's
    importer would type it `?` and its lowering then mixes `?` and the constant. Such sizes
    become plain ints in every node's value."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        new = _concrete(val)
        if new is not val:
            node.meta["val"] = new
            _set_tensor_meta(node)


def _set_tensor_meta(node) -> None:
    """torch-mlir's importer types a node by its `tensor_meta` before its `val`: keep them agreeing."""
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    val = node.meta["val"]
    if isinstance(val, torch.Tensor):
        node.meta["tensor_meta"] = _extract_tensor_metadata(val)
    elif isinstance(val, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in val):
        node.meta["tensor_meta"] = type(val)(_extract_tensor_metadata(v) for v in val)


def drop_noop_expands(gm: torch.fx.GraphModule) -> int:
    """`expand` to the shape a tensor already has, with symbolic sizes, is the tensor itself.
    torch-mlir cannot tell, so it lowers one as a gather checking every dim for a broadcast of size 1
    at run time (SDPA's decomposition expands k and v to their own shape before its bmm)."""
    done = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.expand.default:
            continue
        src, dst = node.args[0].meta.get("val"), node.meta.get("val")
        if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor) or src.dim() != dst.dim():
            continue
        if all(isinstance(s, int) for s in (*src.shape, *dst.shape)):
            continue
        if all(_equal(_expr(a), _expr(b)) for a, b in zip(src.shape, dst.shape)):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            done += 1
    if done:
        gm.recompile()
    return done


def collapse_symbolic_views(gm: torch.fx.GraphModule) -> int:
    """Rewrites merging views of symbolic shapes into `prims.collapse` chains; returns how many."""
    views = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default)
    done = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in views:
            continue
        src_val, dst_val = node.args[0].meta.get("val"), node.meta.get("val")
        if not isinstance(src_val, torch.Tensor) or not isinstance(dst_val, torch.Tensor):
            continue
        if all(isinstance(s, int) for s in (*src_val.shape, *dst_val.shape)):
            continue
        groups = merge_groups([_expr(s) for s in src_val.shape], [_expr(s) for s in dst_val.shape])
        if not groups:
            continue
        cur, val = node.args[0], src_val
        with gm.graph.inserting_before(node), val.fake_mode:
            for start, end in reversed(groups):  # right to left: earlier dims keep their indices
                val = torch.ops.prims.collapse.default(val, start, end)
                nxt = gm.graph.call_function(torch.ops.prims.collapse.default, (cur, start, end))
                nxt.meta.update({k: v for k, v in node.meta.items() if k != "val"})
                nxt.meta["val"] = val
                _set_tensor_meta(nxt)
                cur = nxt
        if len(val.shape) != len(dst_val.shape):  # trailing unit dims of the source were dropped
            continue
        node.replace_all_uses_with(cur)
        gm.graph.erase_node(node)
        done += 1
    if done:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return done


def decided_min_max(gm: torch.fx.GraphModule) -> int:
    """`torch.sym_max(a, b)` / `sym_min` whose order holds over the size symbols' ranges (what the
    trace's guards left them: a sliding-window cache's `keys[:, :, -4095:]` normalizes its start as
    `max(s - 4095, 0)`, and `s + 1 < 4096` was checked): the operand it always picks. torch-mlir's
    importer has no rule for either, and the symbolic compile was given up."""
    done = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch.sym_sum and len(node.args) == 1:
            # a sum of sizes (export writes n-ary sums so): the adds torch-mlir imports
            terms = list(node.args[0])
            if terms and all(isinstance(t, (int, torch.fx.Node)) for t in terms):
                def value(t):
                    return t.meta.get("val") if isinstance(t, torch.fx.Node) else t

                with gm.graph.inserting_before(node):
                    total, so_far = terms[0], value(terms[0])
                    for t in terms[1:]:
                        total = gm.graph.call_function(operator.add, (total, t))
                        so_far = so_far + value(t) if so_far is not None and value(t) is not None else None
                        total.meta["val"] = so_far  # the partial sum's own value
                if isinstance(total, torch.fx.Node):
                    node.replace_all_uses_with(total)
                    gm.graph.erase_node(node)
                    done += 1
            continue
        if node.op != "call_function" or node.target not in (torch.sym_max, torch.sym_min) or len(node.args) != 2:
            continue
        a, b = node.args
        va = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
        vb = b.meta.get("val") if isinstance(b, torch.fx.Node) else b
        sym = next((v for v in (va, vb) if isinstance(v, torch.SymInt)), None)
        if sym is None or not all(isinstance(v, (int, torch.SymInt)) for v in (va, vb)):
            continue
        diff = sym.node.shape_env.bound_sympy(sympy.expand(_expr(va) - _expr(vb)))
        if diff.lower >= 0:  # a >= b always
            pick = a if node.target is torch.sym_max else b
        elif diff.upper <= 0:
            pick = b if node.target is torch.sym_max else a
        else:
            continue
        for user in list(node.users):
            user.args = torch.fx.node.map_arg(user.args, lambda x: pick if x is node else x)
            user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda x: pick if x is node else x)
        gm.graph.erase_node(node)
        done += 1
    if done:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return done
