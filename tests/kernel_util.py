"""Test helpers: capture a torch function, fuse it, outline one group as a kernel function (the
shape uniorch-schedule produces, docs/kernels.md §3) and run it through the Triton interpreter.

Kept independent of the scheduler so codegen tests pin codegen alone. Kernel inputs must be
function arguments, views of them or constants (true when the whole function fuses into one group).
"""
from __future__ import annotations

import torch
from torch_mlir import ir
from torch_mlir.dialects import func

PREPROCESS = "func.func(linalg-fuse-elementwise-ops),linalg-generalize-named-ops,canonicalize,cse"

_TORCH = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
          "i1": torch.bool, "i8": torch.int8, "i32": torch.int32, "i64": torch.int64}


def capture(fn, args, fuse: bool = True):
    from uniorch.ir import to_mlir
    from uniorch.passes import PassContext, parse_pipeline, run_pipeline

    module = to_mlir(fn, args)
    pipe = PREPROCESS + (",uniorch-fuse" if fuse else "")
    run_pipeline(module, parse_pipeline(pipe, module.context), PassContext())
    return module


def main_of(module):
    from uniorch.passes.ir_utils import main_func

    return main_func(module)


def groups(module) -> dict[int, list]:
    out: dict[int, list] = {}
    for op in main_of(module).regions[0].blocks[0].operations:
        op = op.operation
        if "uniorch.group" in op.attributes:
            out.setdefault(ir.IntegerAttr(op.attributes["uniorch.group"]).value, []).append(op)
    return out


def _top(op, main):
    while op.parent is not None and op.parent != main:
        op = op.parent
    return op


def _plan(module, ops):
    """What outlining `ops` needs: (inputs, scalar/empty values to clone, nested uses, results)."""
    main = main_of(module)
    members = set(o.operation for o in ops)
    entry = main.regions[0].blocks[0]

    def top(x):
        return _top(x.operation if hasattr(x, "operation") else x, main)

    def outside(v):
        if isinstance(v.owner, ir.Block):
            return v.owner == entry
        return top(v.owner) not in members

    def clonable(v):
        if isinstance(v.owner, ir.Block):
            return False
        o = v.owner.operation
        return o.name == "tensor.empty" or (o.name == "arith.constant" and not isinstance(v.type, ir.ShapedType))

    inputs, clones, uses = [], [], []
    for op in ops:
        walked = []
        op.walk(lambda o: (walked.append(o.operation), ir.WalkResult.ADVANCE)[1])
        for inner in walked:
            for i, v in enumerate(inner.operands):
                if not outside(v):
                    continue
                uses.append((inner, i, v))
                if clonable(v):
                    if v not in clones:
                        clones.append(v)
                elif v not in inputs:
                    inputs.append(v)
    results = []
    for op in ops:
        for r in op.results:
            if any(top(u.owner) not in members for u in r.uses):
                results.append(r)
    return inputs, clones, uses, results


def _move(module, ops, plan, name, kind):
    main = main_of(module)
    inputs, clones, uses, results = plan
    if kind is None:
        kind = next((ir.StringAttr(o.attributes["uniorch.kind"]).value for o in ops if "uniorch.kind" in o.attributes),
                    None)
    with module.context, ops[-1].location:
        ftype = ir.FunctionType.get([v.type for v in inputs], [r.type for r in results])
        with ir.InsertionPoint(main):
            kernel = func.FuncOp(name, ftype, visibility="private")
        blk = kernel.add_entry_block()
        mapping = dict(zip(inputs, blk.arguments))
        with ir.InsertionPoint(blk):
            for v in clones:
                mapping[v] = v.owner.operation.clone().results[0]
            func.ReturnOp(results)
        ret = [o.operation for o in blk.operations][-1]
        for op in ops:
            op.move_before(ret)
        for inner, i, v in uses:
            inner.operands[i] = mapping[v]
        kernel.attributes["uniorch.kernel"] = ir.UnitAttr.get()
        if kind:
            kernel.attributes["uniorch.kind"] = ir.StringAttr.get(kind)
    return kernel.operation


def outline(module, ops, name: str = "k0_test", kind: str | None = None):
    """Moves `ops` (top-level ops of @main) into `func.func private @name`; returns (kernel op,
    input values of @main it takes, result values of @main it produces)."""
    plan = _plan(module, ops)
    return _move(module, ops, plan, name, kind), plan[0], plan[3]


def outline_all(module):
    """Outlines every group (planned first, so no group's uses are rewired before it is planned).
    Returns [(group id, kernel op, inputs, results)]."""
    gs = groups(module)
    plans = {n: _plan(module, ops) for n, ops in gs.items()}
    out = []
    for n, ops in sorted(gs.items()):
        kind = next((ir.StringAttr(o.attributes["uniorch.kind"]).value for o in ops if "uniorch.kind" in o.attributes), None)
        kernel = _move(module, ops, plans[n], f"k{n}_{kind or 'test'}", kind)
        out.append((n, kernel, plans[n][0], plans[n][3]))
    return out


def value_of(v, args: list[torch.Tensor], main) -> torch.Tensor:
    """A kernel input of the test: an argument of @main, a reshape of one, or a constant."""
    if isinstance(v.owner, ir.Block):
        return args[list(main.regions[0].blocks[0].arguments).index(v)]
    op = v.owner.operation
    shape = list(ir.RankedTensorType(v.type).shape)
    if op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        return value_of(op.operands[0], args, main).reshape(shape)
    if op.name == "arith.constant":
        dense = ir.DenseElementsAttr(op.attributes["value"])
        et = str(ir.RankedTensorType(v.type).element_type)
        if dense.is_splat:
            sv = dense.get_splat_value()
            val = ir.FloatAttr(sv).value if et.startswith(("f", "bf")) else ir.IntegerAttr(sv).value
            return torch.full(shape, val, dtype=_TORCH[et])
    if op.name == "tensor.empty":
        et = str(ir.RankedTensorType(v.type).element_type)
        return torch.zeros(shape, dtype=_TORCH[et])
    raise AssertionError(f"test helper cannot materialise kernel input from {op.name}")


def torch_dtype(t) -> torch.dtype:
    return _TORCH[str(ir.RankedTensorType(t).element_type)]


def run_kernel(kernel, args, inputs, results, main, target="interpret", schedule=None, outs=None):
    """Generates, loads (interpreter) and launches one kernel; returns its outputs."""
    from uniorch.codegen.generic import generate_generic
    from uniorch.runtime import loader

    with kernel.context:
        ks = generate_generic(kernel, target, schedule)
    fn = loader.load(ks, interpret=True)
    ins = [value_of(v, args, main).contiguous() for v in inputs]
    if outs is None:
        outs = [torch.empty(list(ir.RankedTensorType(r.type).shape), dtype=torch_dtype(r.type)) for r in results]
    loader.launch(ks, fn, ins, outs)
    return ks, outs


def single_kernel(fn, args, schedule=None, fuse=True, expect_groups=1):
    """Captures `fn`, fuses, checks it is `expect_groups` group(s), outlines the last group and runs
    it. Returns (KernelSource, outputs of the kernel, module)."""
    module = capture(fn, args, fuse=fuse)
    main = main_of(module)
    if fuse:
        gs = groups(module)
        assert len(gs) == expect_groups, f"expected {expect_groups} group(s), got {len(gs)}:\n{module}"
        ops = gs[max(gs)]
    else:
        ops = [o.operation for o in main.regions[0].blocks[0].operations if o.operation.name == "linalg.generic"]
    kernel, inputs, results = outline(module, ops)
    ks, outs = run_kernel(kernel, args, inputs, results, main, schedule=schedule)
    return ks, outs, module


def _view(op, x: torch.Tensor) -> torch.Tensor:
    shape = list(ir.RankedTensorType(op.results[0].type).shape)
    if op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        return x.reshape(shape)
    assert op.name == "tensor.extract_slice", op.name
    offs = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    steps = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
    y = x[tuple(slice(o, o + (s - 1) * st + 1, st) for o, s, st in zip(offs, sizes, steps))]
    return y.reshape(shape)


def run_module(module, args, schedule=None):
    """Runs a fused @main: each group as a generated kernel (interpreter), views with torch.
    Returns (outputs, {kernel name: KernelSource})."""
    main = main_of(module)
    units = [(kernel, inputs, results) for _, kernel, inputs, results in outline_all(module)]
    env = {a: t for a, t in zip(main.regions[0].blocks[0].arguments, args)}
    rest = [o.operation for o in main.regions[0].blocks[0].operations]
    sources = {}
    pending = list(units) + rest
    while pending:
        progress = False
        for u in list(pending):
            if isinstance(u, tuple):
                kernel, inputs, results = u
                if not all(v in env for v in inputs):
                    continue
                from uniorch.codegen.generic import generate_generic
                from uniorch.runtime import loader

                with kernel.context:
                    kind = kernel.attributes["uniorch.kind"] if "uniorch.kind" in kernel.attributes else None
                    if kind is not None and ir.StringAttr(kind).value == "contraction":
                        from uniorch.codegen import generate  # convolutions: the contraction template

                        ks = generate(kernel, "interpret")
                    else:
                        ks = generate_generic(kernel, "interpret", schedule)
                outs = [torch.empty(list(ir.RankedTensorType(r.type).shape), dtype=torch_dtype(r.type)) for r in results]
                if "uniorch.inplace" in kernel.attributes:
                    src = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(kernel.attributes["uniorch.inplace"])]
                    for k, i in enumerate(src):
                        if i >= 0:
                            outs[k] = env[inputs[i]].clone()
                loader.launch(ks, loader.load(ks, interpret=True), [env[v] for v in inputs], outs)
                sources[ks.name] = ks
                env.update(zip(results, outs))
            else:
                op = u
                if op.name == "linalg.generic" and not op.results:
                    # a result-less leftover of upstream fusion around an opaque call (copysign's
                    # signbit): uniorch-preprocess erases it, this runner's bare pipeline does not
                    pending.remove(u)
                    progress = True
                    continue
                if op.name == "func.return":
                    if not all(v in env for v in op.operands):
                        continue
                    out = [env[v] for v in op.operands]
                    pending.remove(u)
                    progress = True
                    continue
                if not all(v in env for v in op.operands):
                    if op.name not in ("arith.constant", "tensor.empty"):
                        continue
                if op.name == "arith.constant":
                    if isinstance(op.results[0].type, ir.RankedTensorType):
                        env[op.results[0]] = value_of(op.results[0], args, main)
                elif op.name == "tensor.empty":
                    env[op.results[0]] = value_of(op.results[0], args, main)
                elif op.name in ("tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice"):
                    env[op.results[0]] = _view(op, env[op.operands[0]])
                else:
                    raise AssertionError(f"test runner cannot run ungrouped {op.name}")
            pending.remove(u)
            progress = True
        assert progress, "no unit is ready: a cycle between kernels?"
    return out, sources
