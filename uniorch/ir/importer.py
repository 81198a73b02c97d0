"""Captured FX graph → torch-dialect MLIR through torch-mlir's FxImporter, with uniorch locations.

Every op gets `loc("module.path"("file.py":line:0))`: the submodule that ran it and the innermost
line of the user's code (not torch's own `linear.py`), so diagnostics and `explain` point at the
model source. Parameters, buffers and lifted constants stay function arguments, never literals.
"""
from __future__ import annotations

import re

from torch_mlir import ir
from torch_mlir.extras.fx_importer import ContextCache, FxImporter

from ..capture import CapturedGraph
from ..capture.locations import node_source_loc
from ..errors import MLIRImportError
from .context import make_context


NODE_TAG = re.compile(r'"@([A-Za-z_]\w*)"')


class _LocatingCache(ContextCache):
    tag_nodes = False

    def get_node_location(self, node):
        src = node_source_loc(node)
        loc = (
            ir.Location.file(src.file, src.line, 0, context=self._c)
            if src.file
            else ir.Location.unknown(context=self._c)
        )
        if src.module_path:
            loc = ir.Location.name(src.module_path, childLoc=loc, context=self._c)
        if self.tag_nodes:
            # `"@addmm_3"` names the FX node: lowering keeps locations, so every linalg op (and the
            # kernel it lands in) maps back to the ATen ops it came from, for explain and fallback.
            loc = ir.Location.name(f"@{node.name}", childLoc=loc, context=self._c)
        return loc


def _said(exc: BaseException) -> str:
    """An importer error for a report: its message, or where it was raised when it has none (a bare
    `assert` in torch-mlir's importer: a sparse tensor's layout, which it does not import)."""
    import traceback

    text = str(exc).strip()
    if not text:
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        if frame is not None:
            text = f"raised in {frame.name}, at `{(frame.line or '').strip()}`"
    return f"{type(exc).__name__}: {text}"


def node_names(location) -> list[str]:
    """FX node names tagged in an MLIR location (several after ops were fused or CSE'd)."""
    return list(dict.fromkeys(NODE_TAG.findall(str(location))))


def import_graph(graph, ctx: ir.Context | None = None, func_name: str = "main", tag_nodes: bool = False) -> ir.Module:
    """A functional core-ATen FX graph (placeholders carry meta["val"]) → torch-dialect module."""
    ctx = ctx or make_context()
    importer = FxImporter(context=ctx)
    importer._cc = _LocatingCache(ctx, py_attr_tracker=importer._py_attr_tracker)
    importer._cc.tag_nodes = tag_nodes
    _sym_floats_as_products(graph)
    _size_remainders_as_floor_divisions(graph)
    _byte_arithmetic_in_int32(graph)
    try:
        importer.import_stateless_graph(graph, func_name=func_name)
    except Exception as exc:
        raise MLIRImportError(f"torch-mlir could not import the captured graph: {_said(exc)}") from exc
    _devices_as_cpu(importer.module)
    return importer.module


def _sym_floats_as_products(graph) -> None:
    """`torch.sym_float(n)` (a size in float arithmetic: `1.0 / x.shape[0]`) as `n * 1.0`, the same
    value: torch-mlir's importer has no rule for sym_float ("Unimplemented call_function")."""
    import operator

    import torch

    for node in list(graph.nodes):  # `n ** -0.5` (attention's scale): a square root, which lowers to math.sqrt
        base = node.args[0] if node.op == "call_function" and node.target is operator.pow and node.args else None
        if isinstance(base, torch.fx.Node) and base.target is torch.sym_float and node.args[1] in (0.5, -0.5):
            with graph.inserting_before(node):
                root = graph.call_function(torch.ops.aten.sqrt.int, (base.args[0],))
                value = root if node.args[1] > 0 else graph.call_function(operator.truediv, (1.0, root))
            root.meta.update(node.meta)
            value.meta.update(node.meta)
            node.replace_all_uses_with(value)
            graph.erase_node(node)
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch.sym_float and len(node.args) == 1:
            with graph.inserting_before(node):
                product = graph.call_function(operator.mul, (node.args[0], 1.0))
            product.meta.update(node.meta)
            node.replace_all_uses_with(product)
            graph.erase_node(node)


def _size_remainders_as_floor_divisions(graph) -> None:
    """`n % d` of sizes (`(-n) % 4`, padding to a multiple) as `n - (n // d) * d`: torch-mlir imports
    Python's `%` as `aten.fmod.int`, which nothing lowers, and fmod would take the dividend's sign
    where Python's remainder takes the divisor's; `//` imports as floordiv.int, which floors."""
    import operator

    import torch

    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not operator.mod or len(node.args) != 2:
            continue
        if not all(isinstance(a, (int, torch.fx.Node)) and not isinstance(a, bool) for a in node.args):
            continue
        n, d = node.args
        with graph.inserting_before(node):
            quotient = graph.call_function(operator.floordiv, (n, d))
            whole = graph.call_function(operator.mul, (quotient, d))
            rest = graph.call_function(operator.sub, (n, whole))
        for new in (quotient, whole, rest):
            new.meta.update(node.meta)
        node.replace_all_uses_with(rest)
        graph.erase_node(node)


_BYTE_PACKETS = ("mul", "sub", "rsub", "remainder", "div", "floor_divide")


def _byte_arithmetic_in_int32(graph) -> None:
    """int8/uint8 `x * 3`, `x - 1`, `x % 3`, `x // 2`: torch-mlir's lowering reports "for
    conversion to byte or char type dstOriginalDtype has to be passed" and then crashes the
    process (a segfault in convert-torch-to-linalg). Computed in int32 from the same values and
    cast back, which wraps as the byte arithmetic does; a scalar is first wrapped to the byte
    range, as ATen converts it (int8 `x % 300` is `x % 44`)."""
    import torch

    aten = torch.ops.aten
    for node in list(graph.nodes):
        val = node.meta.get("val") if node.op == "call_function" else None
        packet = getattr(node.target, "overloadpacket", None)
        if (not isinstance(val, torch.Tensor) or val.dtype not in (torch.int8, torch.uint8) or packet is None
                or packet.__name__ not in _BYTE_PACKETS):
            continue
        bits = torch.iinfo(val.dtype)
        args = []
        with graph.inserting_before(node):
            for a in node.args:
                t = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
                if isinstance(t, torch.Tensor) and t.dtype == val.dtype:
                    wide = graph.call_function(aten._to_copy.default, (a,), {"dtype": torch.int32})
                    wide.meta.update({k: v for k, v in a.meta.items() if k not in ("val", "tensor_meta")})
                    wide.meta["val"] = t.to(torch.int32)
                    args.append(wide)
                elif type(a) is int:
                    args.append((a - bits.min) % (bits.max - bits.min + 1) + bits.min)
                else:
                    args.append(a)
            node.args = tuple(args)
            wide_val = val.to(torch.int32)
        with graph.inserting_after(node):
            narrow = graph.call_function(aten._to_copy.default, (node,), {"dtype": val.dtype})
        node.replace_all_uses_with(narrow, delete_user_cb=lambda user: user is not narrow)
        narrow.meta.update(node.meta)
        node.meta.pop("tensor_meta", None)  # the importer reads it before "val"
        node.meta["val"] = wide_val


def _devices_as_cpu(module: ir.Module) -> None:
    """A graph captured on a GPU names its device in factory ops (`scalar_tensor`, `empty_strided`,
    `arange`... with device=cuda:0), and torch-mlir lowers those for the CPU only ("lowering to
    torch backend contract failed"). Where the tensors live is the backend's business, not the
    graph's: every device constant becomes "cpu" in the module (the FX graph, which eager
    fallbacks run, keeps its own)."""
    with module.context:
        cpu = ir.StringAttr.get("cpu")

        def visit(op):
            if op.name == "torch.constant.device" and ir.StringAttr(op.attributes["value"]).value != "cpu":
                op.attributes["value"] = cpu
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)


def import_captured(captured: CapturedGraph, ctx: ir.Context | None = None, func_name: str = "main",
                    tag_nodes: bool = False) -> ir.Module:
    """Returns a module holding `func.func @main` in the torch dialect (value semantics)."""
    module = import_graph(captured.graph_module.graph, ctx, func_name, tag_nodes)
    if func_name == "main":
        from uniorch.passes.returned_views import record_result_layouts

        from .dims import record_symbols

        record_symbols(module, captured.graph_module.graph)
        record_result_layouts(module, captured.graph_module.graph)
    with module.context:
        names = ir.ArrayAttr.get([ir.StringAttr.get(f"{i.kind}:{i.target}") for i in captured.inputs])
        module.operation.attributes["uniorch.inputs"] = names
        if captured.name:
            module.operation.attributes["uniorch.model"] = ir.StringAttr.get(captured.name)
    return module
