"""Ops after a data-dependent selection up to a reduction over its rows (`loss[mask].mean()`,
`x[mask].sum(0)`, a cross-entropy over the rows a mask keeps) or a write back through the same
mask (`y[mask] = f(x[mask])`), computed at a static size with the rows outside the selection
masked out.

Why: capture computes a boolean-mask selection compacted at its largest size plus the count of
rows kept (data_dependent.py: a cumsum of the mask, a scatter, a gather), then trims it with the
count read to the host. Everything after the trim has a size known only at run time, so it ran
eagerly: every op of a masked loss. The rows are independent of one another until a reduction
over them, so the ops up to it run at the static size, and the reduction keeps the selection's
rows (`where(valid, x, 0)`): a sum, or a sum divided by the count for a mean. No host read is
left, and eager's values: an empty selection sums to 0, and its mean is 0 / 0 = NaN, as eager's.

Where the compaction is data_dependent's own (`zeros(n + 1).index_put((where(keep, cumsum(keep)
- 1, n),), values)`) it is seen through: the ops run on the source's rows in place and `valid` is
the flat mask itself, so a masked mean is one kernel reading x and the mask, and a write back is
`where(mask, f(x), y)`. Otherwise they run on the compacted rows, `valid = arange < count`.

Kept per row: elementwise ops (the other operands broadcast along the rows), reductions and
softmaxes over other dims, a gather along another dim, indexing by row tensors, unsqueeze and
squeeze. Two selections meet only where their masks (or counts) are computed the same way from
the same tensors, so their rows line up. A value after the trim that is returned is compacted
again if needed and trimmed at the boundary; anything else (a view across rows, a max over them:
eager raises on an empty one) keeps the trimmed form and runs eagerly.
"""
from __future__ import annotations

import contextlib

import torch
import torch.fx as fx

from .data_dependent import _SCALAR_READ, _is_trim
from .symbolic_views import _set_tensor_meta

aten, prims = torch.ops.aten, torch.ops.prims
_ROW_REDUCTIONS = {aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default, aten.prod.dim_int,
                   aten.logsumexp.default, aten.any.dims, aten.all.dims, aten.var.correction}
_SOFTMAXES = {aten._softmax.default, aten._log_softmax.default}
_TERMINAL = {aten.sum.default, aten.sum.dim_IntList, aten.mean.default, aten.mean.dim}
_LOW = (torch.float16, torch.bfloat16)


class _Padded:
    """A node's value at the padded size: `node` holds `size` rows along `dim`. Its rows are the
    selection's in order, the first `count` real (`valid` None), or, where the compaction itself
    is seen through, the source's rows in place, those of the flat mask `valid` selected.
    `trimmed`: past the trim (its rows beyond the selection are no one's), else the padded
    tensor itself, on the way to its trim. `read`: the count's host read, past the trim."""

    def __init__(self, node: fx.Node, dim: int, size: int, key, *, count=None, read=None, valid=None,
                 where=None, trimmed: bool = True):
        self.node, self.dim, self.size, self.key = node, dim, size, key
        self.count, self.read, self.valid, self.where, self.trimmed = count, read, valid, where, trimmed

    def like(self, node: fx.Node, dim: int) -> "_Padded":
        return _Padded(node, dim, self.size, self.key, count=self.count, read=self.read, valid=self.valid,
                       where=self.where, trimmed=self.trimmed)


def _val(a):
    v = a.meta.get("val") if isinstance(a, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _static(v) -> bool:
    return v is not None and all(isinstance(s, int) for s in v.shape)


def _structures(graph: fx.Graph) -> dict:
    """Per node, a number equal for two nodes computed by the same ops from the same inputs (hash
    consing, in one pass in graph order: a mask computed deep in a model is not walked per use)."""
    table: dict = {}
    ids: dict = {}

    def arg(a):
        if isinstance(a, fx.Node):
            return ("node", ids[a])
        if isinstance(a, (list, tuple)):
            return tuple(arg(x) for x in a)
        return ("const", repr(a))

    for node in graph.nodes:
        if node.op == "call_function":
            key = (str(node.target), arg(node.args), tuple(sorted((k, arg(v)) for k, v in node.kwargs.items())))
        else:
            key = (node.op, str(node.target) if node.op == "get_attr" else node.name)
        ids[node] = table.setdefault(key, len(table))
    return ids


def _trim(node: fx.Node):
    """(padded, dim, the count's read) of data_dependent's trim `slice(padded, dim, 0,
    count.item())` with an integer count, else None."""
    if node.op != "call_function" or node.target is not aten.slice.Tensor or not _is_trim(node):
        return None
    src, dim, end = node.args[0], node.args[1], node.args[3]
    val, count = _val(src), _val(end.args[0])
    if val is None or count is None or count.dim() != 0 or count.dtype.is_floating_point:
        return None
    return src, dim % val.dim(), end


def _dims(dims, rank: int) -> set:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return set(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return {d % rank for d in dims}


class _Rewrite:
    def __init__(self, gm: fx.GraphModule):
        self.gm, self.graph = gm, gm.graph
        self.padded: dict[fx.Node, _Padded] = {}
        self._ids = None
        self.replaced = 0
        self.made: list[fx.Node] = []  # every node added, and those replaced: for the clean-up
        vals = (n.meta.get("val") for n in gm.graph.nodes)
        self.mode = next((v.fake_mode for v in vals if hasattr(v, "fake_mode")), None)  # the capture's

    @property
    def ids(self) -> dict:
        """`_structures` of the graph as captured, made at the first selection found."""
        if self._ids is None:
            self._ids = _structures(self.graph)
        return self._ids

    def call(self, target, args, kwargs, like: fx.Node) -> fx.Node:
        """A new node computing `target`, its value from its operands' (under the fake mode)."""
        node = self.graph.call_function(target, tuple(args), dict(kwargs))
        self.made.append(node)  # first: a node whose value fails is cleared with the rest
        node.meta = {k: v for k, v in like.meta.items() if k not in ("val", "tensor_meta")}
        value = lambda a: a.meta["val"] if isinstance(a, fx.Node) else a  # noqa: E731
        with self.mode if self.mode is not None else contextlib.nullcontext():
            node.meta["val"] = target(*fx.node.map_aggregate(args, value), **fx.node.map_aggregate(kwargs, value))
        _set_tensor_meta(node)
        return node

    def run(self) -> int:
        for node in list(self.graph.nodes):
            if node.op != "call_function":
                continue
            trim = _trim(node)
            if trim is not None:
                self._trim(node, *trim)
                continue
            compaction = self._compaction(node)
            if compaction is not None:
                keep, values = compaction
                n = _val(keep).shape[0]
                self.padded[node] = _Padded(values, 0, n, ("mask", self.ids[keep]), valid=keep,
                                            where=node.args[1][0], trimmed=False)
                continue
            inputs = [a for a in node.all_input_nodes if a in self.padded]
            if inputs:
                try:
                    self._visit(node, inputs)
                except Exception:  # noqa: BLE001 - an op not redone at the static size keeps its trimmed form
                    continue  # (what the visit added is unread, and cleared below)
        return self.replaced

    def _trim(self, node: fx.Node, src: fx.Node, dim: int, read: fx.Node) -> None:
        count = read.args[0]
        p = self.padded.get(src)
        if p is not None and not p.trimmed and p.dim == dim:  # the compaction seen through
            self.padded[node] = _Padded(p.node, dim, p.size, p.key, count=count, read=read, valid=p.valid,
                                        where=p.where)
        else:
            self.padded[node] = _Padded(src, dim, _val(src).shape[dim], ("count", self.ids[count]),
                                        count=count, read=read)

    def _compaction(self, node: fx.Node):
        """(flat mask, values) of data_dependent's compaction `zeros(n + 1).index_put((where(keep,
        cumsum(keep) - 1, n),), values)`: row i of the result is the row of `values` where `keep`
        is true for the i-th time. Else None."""
        if node.target is not aten.index_put.default or len(node.args) < 3 or (len(node.args) > 3 and node.args[3]):
            return None
        base, indices, values = node.args[:3]
        if len(indices) != 1 or not isinstance(values, fx.Node) or not isinstance(indices[0], fx.Node):
            return None
        where = indices[0]
        if where.target is not aten.where.self or not all(isinstance(a, fx.Node) for a in where.args):
            return None
        keep, pos, pad = where.args
        kv, bv, vv = _val(keep), _val(base), _val(values)
        if kv is None or kv.dtype != torch.bool or kv.dim() != 1 or not _static(bv) or not _static(vv):
            return None
        n = kv.shape[0]
        if tuple(bv.shape) != (n + 1, *vv.shape[1:]) or vv.shape[0] != n or vv.dim() != bv.dim():
            return None
        if pad.target is not aten.scalar_tensor.default or pad.args[0] != n:
            return None
        # pos = cumsum(keep as int64, 0) - 1: rows in the mask's order
        cumsum = pos.args[0] if pos.target is aten.sub.Tensor and pos.args[1] == 1 else None
        if not isinstance(cumsum, fx.Node) or cumsum.target is not aten.cumsum.default:
            return None
        counted = cumsum.args[0]
        if not isinstance(counted, fx.Node) or counted.target is not prims.convert_element_type.default or \
                self.ids[counted.args[0]] != self.ids[keep]:
            return None
        return keep, values

    # -- one op after a trim -------------------------------------------------------------------
    def _visit(self, node: fx.Node, inputs: list) -> None:
        first = self.padded[inputs[0]]
        if any((self.padded[a].key, self.padded[a].size, self.padded[a].trimmed) !=
               (first.key, first.size, first.trimmed) for a in inputs):
            return  # two selections that need not line up
        out = _val(node)
        if out is None:
            return
        target = node.target
        if first.trimmed and target in _TERMINAL and self._terminal(node):
            return
        if first.trimmed and first.valid is not None and target is aten.index_put.default:
            self._put(node)
            return
        if isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags \
                and torch.Tag.nondeterministic_seeded not in target.tags:
            dim = self._broadcast_dim(node, out)
        elif target in _ROW_REDUCTIONS:
            dim = self._reduced_dim(node, first)
        elif target in _SOFTMAXES and len(node.args) >= 2 and node.args[1] % out.dim() != first.dim:
            dim = first.dim
        elif target is aten.gather.default and node.args[1] % out.dim() != first.dim \
                and all(a in self.padded for a in (node.args[0], node.args[2])):
            dim = first.dim
        elif target is aten.index.Tensor:
            dim = self._gathered_dim(node)
        elif target is aten.unsqueeze.default:
            dim = first.dim + (1 if node.args[1] % out.dim() <= first.dim else 0)
        elif target in (prims.squeeze.default, aten.squeeze.dims, aten.squeeze.dim):
            src = _val(node.args[0])
            dims = _dims(node.args[1], src.dim())  # (squeezing a dim not of size 1 leaves it)
            dims = None if first.dim in dims else {d for d in dims if src.shape[d] == 1}
            dim = None if dims is None else first.dim - sum(d < first.dim for d in dims)
        else:
            return
        if dim is None or not all(isinstance(s, int) for i, s in enumerate(out.shape) if i != dim):
            return
        with self.graph.inserting_before(node):
            clone = self.call(target, *self._mapped(node), like=node)
        if tuple(_val(clone).shape) != tuple(first.size if i == dim else s for i, s in enumerate(out.shape)):
            self.graph.erase_node(clone)
            self.made.remove(clone)
            return
        self.padded[node] = first.like(clone, dim)

    def _gathered_dim(self, node: fx.Node) -> int | None:
        """`x[..., i, j, ...]` with the index tensors padded (one row each) and x static: its rows,
        at the first index's position."""
        x, indices = node.args[:2]
        if x in self.padded or not _static(_val(x)):
            return None
        at = [i for i, t in enumerate(indices) if t is not None]
        if not at or at != list(range(at[0], at[-1] + 1)) or any(
                indices[i] not in self.padded or _val(indices[i]).dim() != 1 for i in at):
            return None
        return at[0]

    def _mapped(self, node: fx.Node):
        swap = lambda a: self.padded[a].node if isinstance(a, fx.Node) and a in self.padded else a  # noqa: E731
        return fx.node.map_aggregate(node.args, swap), fx.node.map_aggregate(node.kwargs, swap)

    def _broadcast_dim(self, node: fx.Node, out) -> int | None:
        """The trimmed dim in the output of an elementwise op, when every other tensor operand is
        static and broadcast along it."""
        dims = {self.padded[a].dim + out.dim() - _val(a).dim() for a in node.all_input_nodes if a in self.padded}
        if len(dims) != 1:
            return None
        (dim,) = dims
        for a in node.all_input_nodes:
            v = _val(a)
            if a in self.padded or v is None:
                continue
            at = dim - (out.dim() - v.dim())
            if not _static(v) or (at >= 0 and v.shape[at] != 1):
                return None
        return dim

    def _reduced_dim(self, node: fx.Node, first: _Padded) -> int | None:
        src = _val(node.args[0])
        dims = _dims(node.args[1] if len(node.args) > 1 else node.kwargs.get("dim"), src.dim())
        if first.dim in dims:
            return None
        keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        if node.target is aten.var.correction:
            keep = node.kwargs.get("keepdim", False)
        return first.dim if keep else first.dim - sum(d < first.dim for d in dims)

    def bound_outputs(self) -> None:
        """A value computed after the trim and returned is computed padded (its rows in the
        source's places compacted again, in a kernel) and trimmed as it is returned, where
        data_dependent.bound_outputs reads the count."""
        out = self.graph.output_node()
        for node, p in self.padded.items():
            if out not in node.users or node.target is aten.slice.Tensor or not p.trimmed:
                continue
            rows = p.node
            with self.graph.inserting_before(out):
                if p.valid is not None:
                    v = _val(p.node)
                    shape = [s + 1 if i == p.dim else s for i, s in enumerate(v.shape)]
                    try:
                        zeros = self.call(aten.full.default, (shape, 0), {"dtype": v.dtype, "device": v.device},
                                          like=node)
                        rows = self.call(aten.index_put.default, (zeros, [None] * p.dim + [p.where], p.node), {},
                                         like=node)
                    except Exception:  # noqa: BLE001 - returned as captured (computed eagerly)
                        continue
                trim = self.graph.call_function(aten.slice.Tensor, (rows, p.dim, 0, p.read))
            trim.meta = dict(node.meta)
            out.replace_input_with(node, trim)

    def _valid(self, p: _Padded, rank: int, call) -> fx.Node:
        """Which of `p`'s rows are the selection's, as a bool tensor broadcasting against it."""
        if p.valid is None:
            idx = call(aten.arange.start_step, (0, p.size), {"device": _val(p.node).device})
            valid = call(aten.lt.Tensor, (idx, p.count))
        else:
            valid = p.valid
        return call(aten.view.default, (valid, [p.size] + [1] * (rank - p.dim - 1)))

    def _put(self, node: fx.Node) -> None:
        """`y[mask] = f(x[mask])`: the values computed in place along the source's rows, so the
        write is `where(mask, values, y)`."""
        if len(node.args) > 3 and node.args[3]:
            return  # accumulate
        y, indices, values = node.args[:3]
        if y in self.padded or values not in self.padded or len(indices) != 1 or indices[0] in self.padded:
            return
        mask, p, yv = indices[0], self.padded[values], _val(y)
        mv = _val(mask)
        if mv is None or mv.dtype != torch.bool or p.dim != 0 or not _static(yv) or \
                tuple(mv.shape) != tuple(yv.shape[:mv.dim()]) or mv.numel() != p.size:
            return
        flat = p.valid  # the selection's flat mask must be this mask's
        if flat.target is not aten.view.default or self.ids[flat.args[0]] != self.ids.get(mask):
            return
        vals = _val(p.node)
        if tuple(vals.shape[1:]) != tuple(yv.shape[mv.dim():]):
            return
        call = lambda target, args, kwargs=None: self.call(target, args, kwargs or {}, like=node)  # noqa: E731
        with self.graph.inserting_before(node):
            v = call(aten.view.default, (p.node, list(yv.shape)))
            if vals.dtype != yv.dtype:
                v = call(prims.convert_element_type.default, (v, yv.dtype))
            m = call(aten.view.default, (mask, list(mv.shape) + [1] * (yv.dim() - mv.dim())))
            written = call(aten.where.self, (m, v, y))
        node.replace_all_uses_with(written)
        self.made.append(node)
        self.replaced += 1

    # -- the reduction over the rows -----------------------------------------------------------
    def _terminal(self, node: fx.Node) -> bool:
        """Rewrites a sum or mean over the trimmed dim; False where it reduces other dims only."""
        x = node.args[0]
        if x not in self.padded or len(node.all_input_nodes) != 1:
            return False
        p = self.padded[x]
        v = _val(p.node)
        dims = _dims(node.args[1] if len(node.args) > 1 and node.target not in (aten.sum.default, aten.mean.default)
                     else None, v.dim())
        if p.dim not in dims:
            return False
        keep = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
        dtype = node.kwargs.get("dtype")
        mean = node.target in (aten.mean.default, aten.mean.dim)
        call = lambda target, args, kwargs=None: self.call(target, args, kwargs or {}, like=node)  # noqa: E731
        with self.graph.inserting_before(node):
            valid = self._valid(p, v.dim(), call)
            zero = call(aten.scalar_tensor.default, (0,), {"dtype": v.dtype, "device": v.device})
            kept = call(aten.where.self, (valid, p.node, zero))
            acc = dtype if dtype is not None else (torch.float32 if mean and v.dtype in _LOW else None)
            total = call(aten.sum.dim_IntList, (kept, sorted(dims), keep), {"dtype": acc} if acc else {})
            if mean:
                n = call(prims.convert_element_type.default, (p.count, _val(total).dtype))
                other = 1
                for d in dims - {p.dim}:
                    other *= v.shape[d]
                if other != 1:
                    n = call(aten.mul.Tensor, (n, other))
                total = call(aten.div.Tensor, (total, n))
            if _val(total).dtype != _val(node).dtype:
                total = call(prims.convert_element_type.default, (total, _val(node).dtype))
        if tuple(_val(total).shape) == tuple(_val(node).shape):  # else left as it was (the new nodes unread)
            node.replace_all_uses_with(total)
            self.made.append(node)
            self.replaced += 1
        return True


def masked_reductions(gm: fx.GraphModule) -> int:
    """Rewrites the reductions described above in place; how many."""
    if not any(n.op == "call_function" and n.target is _SCALAR_READ for n in gm.graph.nodes):
        return 0
    rewrite = _Rewrite(gm)
    replaced = rewrite.run()
    # what the rewrite left unread: the trimmed ops it replaced, clones and new nodes nobody reads
    doomed = set(rewrite.made) | set(rewrite.padded)
    rewrite.bound_outputs()
    for node in reversed(list(gm.graph.nodes)):
        if node in doomed and all(_checks_dtype(u) for u in node.users):
            for check in list(node.users):  # a dtype check of a value no longer computed
                gm.graph.erase_node(check)
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return replaced


def _checks_dtype(node: fx.Node) -> bool:
    """`_assert_tensor_metadata` of dtype, device or layout only (`.float()` leaves one): true of
    the padded value as of the trimmed one, since none of them depends on the count."""
    return node.target is aten._assert_tensor_metadata.default and all(
        a is None for a in (list(node.args) + [None, None])[1:3]) and node.kwargs.get("sizes") is None
