"""Elementwise special functions torch-mlir has no linalg lowering for, carried to codegen by name.

torch-mlir imports `aten.lgamma`, `aten.special_i0e`, `aten.hypot`, ... as `torch.operator` (or as
a torch op without a linalg pattern), so the backend-contract or linalg pipeline rejects them and
the whole region ran eagerly. Before those pipelines run, each such op whose function codegen can
implement (uniorch.codegen.body.SPECIAL) is replaced by

    torch_c.to_builtin_tensor → linalg.generic { func.call @__uniorch_math_<fn>_<f32|f64>(scalars) }
                             → torch_c.from_builtin_tensor

Why a `func.call` in the body: it is the one op every pass keeps verbatim. It has no folder, it is
not pure (so CSE/canonicalize never merge or drop it on their own), elementwise fusion clones body
ops as they are, and if a pass ever did something it does not understand, the symbol would dangle
and verification fails loudly instead of giving a wrong answer. The callee is a private declaration
in the module, never defined: codegen (body.py) maps the name to Triton (a libdevice call on GPUs,
a `@jit` helper ported from ATen's Math.h where libdevice has none).

The body also does PyTorch's type promotion: integer and bool inputs are converted to the float
result type, f16/bf16 compute in f32 and round once (as ATen's kernels do), f32/f64 call the
function at their own precision. Static shapes only (what capture hands over); anything else is
left alone and keeps torch-mlir's error as its fallback reason.
"""
from __future__ import annotations

from torch_mlir import ir

PREFIX = "__uniorch_math_"

# torch op name (after "torch.aten.") -> (function name for codegen, number of tensor operands,
# leading scalar-constant operands folded into the function name: polygamma's order n)
OPS = {
    "lgamma": ("lgamma", 1, 0), "digamma": ("digamma", 1, 0), "special_psi": ("digamma", 1, 0),
    "erfc": ("erfc", 1, 0), "special_erfc": ("erfc", 1, 0), "erfinv": ("erfinv", 1, 0),
    "special_erfinv": ("erfinv", 1, 0),
    "i0": ("i0", 1, 0), "special_i0": ("i0", 1, 0), "special_i0e": ("i0e", 1, 0),
    "special_i1": ("i1", 1, 0), "special_i1e": ("i1e", 1, 0),
    "special_erfcx": ("erfcx", 1, 0), "special_ndtri": ("ndtri", 1, 0),
    "special_bessel_j0": ("bessel_j0", 1, 0), "special_bessel_j1": ("bessel_j1", 1, 0),
    "special_bessel_y0": ("bessel_y0", 1, 0), "special_bessel_y1": ("bessel_y1", 1, 0),
    "special_modified_bessel_i0": ("i0", 1, 0), "special_modified_bessel_i1": ("i1", 1, 0),
    "special_modified_bessel_k0": ("k0", 1, 0), "special_modified_bessel_k1": ("k1", 1, 0),
    "special_scaled_modified_bessel_k0": ("k0e", 1, 0), "special_scaled_modified_bessel_k1": ("k1e", 1, 0),
    "special_spherical_bessel_j0": ("spherical_bessel_j0", 1, 0), "special_airy_ai": ("airy_ai", 1, 0),
    "signbit": ("signbit", 1, 0), "isfinite": ("isfinite", 1, 0),
    "hypot": ("hypot", 2, 0), "nextafter": ("nextafter", 2, 0), "special_zeta": ("zeta", 2, 0),
    "igamma": ("igamma", 2, 0), "igammac": ("igammac", 2, 0),
    "special_gammainc": ("igamma", 2, 0), "special_gammaincc": ("igammac", 2, 0),
    "polygamma": ("polygamma", 1, 1), "special_polygamma": ("polygamma", 1, 1),
    "special_hermite_polynomial_h": ("hermite_h", 2, 0), "special_hermite_polynomial_he": ("hermite_he", 2, 0),
    "special_laguerre_polynomial_l": ("laguerre_l", 2, 0), "special_legendre_polynomial_p": ("legendre_p", 2, 0),
}
for _k in "tuvw":
    OPS[f"special_chebyshev_polynomial_{_k}"] = (f"chebyshev_{_k}", 2, 0)
    OPS[f"special_shifted_chebyshev_polynomial_{_k}"] = (f"shifted_chebyshev_{_k}", 2, 0)

_FLOATS = {"f32": "f32", "f64": "f64", "f16": "f32", "bf16": "f32"}  # storage -> compute type
_INTS = {"si8": "i8", "si16": "i16", "si32": "i32", "si64": "i64", "i1": "i1"}  # torch -> builtin


def _vtensor(t: ir.Type):
    """(shape, element type name) of a static `!torch.vtensor<[...],T>`, else None."""
    s = str(t)
    if not s.startswith("!torch.vtensor<[") or not s.endswith(">"):
        return None
    dims, _, elem = s[len("!torch.vtensor<["):-1].rpartition("],")
    try:
        shape = [int(d) for d in dims.split(",")] if dims else []
    except ValueError:
        return None
    if any(d < 0 for d in shape):
        return None
    return shape, elem


def _builtin(shape, elem: str) -> str:
    e = _INTS.get(elem, elem)
    return f"tensor<{'x'.join(str(d) for d in shape) + 'x' if shape else ''}{e}>"


def _int_constant(v: ir.Value):
    owner = v.owner
    if isinstance(owner, ir.Block) or owner.name != "torch.constant.int":
        return None
    return ir.IntegerAttr(owner.attributes["value"]).value


def _map(rank: int, shape, out_shape) -> str:
    dims = ", ".join(f"d{i}" for i in range(rank))
    off = rank - len(shape)
    res = ", ".join("0" if (s == 1 and out_shape[off + j] != 1) else f"d{off + j}" for j, s in enumerate(shape))
    return f"affine_map<({dims}) -> ({res})>"


def _convert(val: str, frm: str, to: str, name: str) -> tuple[list[str], str]:
    """Body lines converting scalar `val` of builtin type `frm` to float type `to`."""
    if frm == to:
        return [], val
    if frm in ("f32", "f64", "f16", "bf16"):
        width = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
        op = "arith.extf" if width[frm] < width[to] else "arith.truncf"
        return [f"{name} = {op} {val} : {frm} to {to}"], name
    # bool is 0/1 (uitofp), other integers are signed in torch
    op = "arith.uitofp" if frm == "i1" else "arith.sitofp"
    return [f"{name} = {op} {val} : {frm} to {to}"], name


def _replacement(op, supported) -> tuple[str, str, str] | None:
    """(function text, callee declaration, callee name) replacing `op`, or None when it is not ours to rewrite."""
    name = op.name
    if name == "torch.operator":
        name = ir.StringAttr(op.attributes["name"]).value
    if not name.startswith("torch.aten."):
        return None
    key = name[len("torch.aten."):]
    key = key.rsplit(".", 1)[0] if key.endswith(".default") else key
    if key not in OPS or len(op.results) != 1:
        return None
    fn, n_tensors, n_scalars = OPS[key]
    operands = list(op.operands)
    if len(operands) != n_tensors + n_scalars:
        return None
    scalars = []
    for v in operands[:n_scalars]:
        c = _int_constant(v)
        if c is None or c < 0:
            return None
        scalars.append(c)
    tensors = operands[n_scalars:]
    out = _vtensor(op.results[0].type)
    ins = [_vtensor(v.type) for v in tensors]
    if out is None or any(i is None for i in ins):
        return None
    out_shape, out_elem = out
    rank = len(out_shape)
    if any(len(s) > rank for s, _ in ins):
        return None
    if out_elem == "i1":  # predicates (signbit, isfinite) compute on the input's float type
        elem0 = ins[0][1]
        if elem0 in _INTS:
            return None  # integer inputs: torch.signbit/isfinite of ints are trivial, not ours
        compute = _FLOATS.get(elem0)
    else:
        compute = _FLOATS.get(out_elem)
    if compute is None or any(e not in _FLOATS and e not in _INTS for _, e in ins):
        return None
    if fn == "nextafter" and compute != out_elem:
        # the next 16-bit value is not the next float32 one rounded back (that is x itself): left
        # to eager, whose kernel steps the 16-bit pattern
        return None
    callee = PREFIX + fn + "".join(f"_n{c}" for c in scalars) + "_" + compute
    if callee[len(PREFIX):] not in supported:
        return None
    loc = str(op.location)
    arg_types = [str(v.type) for v in tensors]
    res_elem = "i1" if out_elem == "i1" else _INTS.get(out_elem, out_elem)
    lines = []
    blt = []
    for i, (t, (shape, elem)) in enumerate(zip(arg_types, ins)):
        blt.append(_builtin(shape, elem))
        lines.append(f"%b{i} = torch_c.to_builtin_tensor %a{i} : {t} -> {blt[-1]} {loc}")
    out_t = _builtin(out_shape, out_elem)
    lines.append(f"%e = tensor.empty() : {out_t} {loc}")
    maps = [_map(rank, s, out_shape) for s, _ in ins] + [_map(rank, out_shape, out_shape)]
    iters = ", ".join(['"parallel"'] * rank)
    bargs = ", ".join(f"%in{i}: {_INTS.get(e, e)}" for i, (_, e) in enumerate(ins))
    body = []
    call_args = []
    for i, (_, e) in enumerate(ins):
        conv, v = _convert(f"%in{i}", _INTS.get(e, e), compute, f"%c{i}")
        body += [f"{c} {loc}" for c in conv]
        call_args.append(v)
    call_res = "i1" if out_elem == "i1" else compute
    body.append(f"%v = func.call @{callee}({', '.join(call_args)}) : ({', '.join([compute] * len(ins))}) -> {call_res} {loc}")
    result = "%v"
    if call_res != res_elem:
        conv, result = _convert("%v", call_res, res_elem, "%r")
        body += [f"{c} {loc}" for c in conv]
    body.append(f"linalg.yield {result} : {res_elem} {loc}")
    lines.append(
        f"%g = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{iters}]}} "
        f"ins({', '.join(f'%b{i}' for i in range(len(ins)))} : {', '.join(blt)}) outs(%e : {out_t}) {{\n"
        f"^bb0({bargs}, %out: {res_elem}):\n    " + "\n    ".join(body) + f"\n}} -> {out_t} {loc}")
    res_t = str(op.results[0].type)
    lines.append(f"%t = torch_c.from_builtin_tensor %g : {out_t} -> {res_t} {loc}")
    lines.append(f"func.return %t : {res_t}")
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(arg_types))
    decl = f"func.func private @{callee}({', '.join([compute] * len(ins))}) -> {call_res}"
    text = f"func.func @__uniorch_tmp({params}) -> {res_t} {{\n  " + "\n  ".join(lines) + "\n}"
    return text, decl, callee


def _frexp_replacement(op, supported):
    """`aten.frexp` (mantissa, int32 exponent): one generic with two results, a call each."""
    name = ir.StringAttr(op.attributes["name"]).value if op.name == "torch.operator" else op.name
    if name not in ("torch.aten.frexp", "torch.aten.frexp.Tensor") or len(op.results) != 2 or len(op.operands) != 1:
        return None
    x, (m, e) = _vtensor(op.operands[0].type), [_vtensor(r.type) for r in op.results]
    if x is None or m is None or e is None or x[1] not in _FLOATS or e[1] != "si32" or x[0] != m[0] or m[0] != e[0]:
        return None
    shape, elem = x
    compute = _FLOATS[elem]
    calls = [PREFIX + "frexp_mantissa_" + compute, PREFIX + "frexp_exponent_" + compute]
    if any(c[len(PREFIX):] not in supported for c in calls):
        return None
    loc = str(op.location)
    rank = len(shape)
    t_in, t_m, t_e = _builtin(shape, elem), _builtin(shape, elem), _builtin(shape, "si32")
    idmap = _map(rank, shape, shape)
    iters = ", ".join(['"parallel"'] * rank)
    body = []
    conv, v = _convert("%in0", elem, compute, "%c0")
    body += [f"{c} {loc}" for c in conv]
    body.append(f"%vm = func.call @{calls[0]}({v}) : ({compute}) -> {compute} {loc}")
    body.append(f"%ve = func.call @{calls[1]}({v}) : ({compute}) -> i32 {loc}")
    conv, vm = _convert("%vm", compute, elem, "%rm")
    body += [f"{c} {loc}" for c in conv]
    body.append(f"linalg.yield {vm}, %ve : {elem}, i32 {loc}")
    ta, tm, te = str(op.operands[0].type), str(op.results[0].type), str(op.results[1].type)
    text = "\n  ".join([
        f"func.func @__uniorch_tmp(%a0: {ta}) -> ({tm}, {te}) {{",
        f"%b0 = torch_c.to_builtin_tensor %a0 : {ta} -> {t_in} {loc}",
        f"%em = tensor.empty() : {t_m} {loc}",
        f"%ee = tensor.empty() : {t_e} {loc}",
        f"%g:2 = linalg.generic {{indexing_maps = [{idmap}, {idmap}, {idmap}], iterator_types = [{iters}]}} "
        f"ins(%b0 : {t_in}) outs(%em, %ee : {t_m}, {t_e}) {{\n^bb0(%in0: {elem}, %o0: {elem}, %o1: i32):\n    "
        + "\n    ".join(body) + f"\n}} -> ({t_m}, {t_e}) {loc}",
        f"%tm = torch_c.from_builtin_tensor %g#0 : {t_m} -> {tm} {loc}",
        f"%te = torch_c.from_builtin_tensor %g#1 : {t_e} -> {te} {loc}",
        f"func.return %tm, %te : {tm}, {te}",
    ]) + "\n}"
    decls = [f"func.func private @{calls[0]}({compute}) -> {compute}", f"func.func private @{calls[1]}({compute}) -> i32"]
    return text, decls, calls


def rewrite_special_functions(module: ir.Module) -> int:
    """Replaces the special-function ops of `module` (torch dialect, as imported) in place; returns
    how many were replaced."""
    from uniorch.codegen.body import SPECIAL

    supported = set(SPECIAL)
    todo = []

    def visit(o):
        if o.name == "torch.operator" or o.name.startswith("torch.aten."):
            todo.append(o)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    declared = {ir.StringAttr(o.attributes["sym_name"]).value for o in module.body.operations
                if o.operation.name == "func.func"}
    count = 0
    with module.context:
        for op in todo:
            rep = _replacement(op, supported) or _frexp_replacement(op, supported)
            if rep is None:
                continue
            text, decls, callees = rep
            decls, callees = ([decls], [callees]) if isinstance(decls, str) else (decls, callees)
            tmp = ir.Module.parse("\n".join(decls) + "\n" + text)
            fn = [o for o in tmp.body.operations if ir.StringAttr(o.attributes["sym_name"]).value == "__uniorch_tmp"][0]
            block = fn.regions[0].blocks[0]
            tensors = list(op.operands)[len(op.operands) - len(block.arguments):]
            for arg, v in zip(block.arguments, tensors):
                arg.replace_all_uses_with(v)
            body = [o for o in block.operations]
            ret = body[-1]
            new_results = list(ret.operands)
            for o in body[:-1]:
                o.operation.move_before(op)
            for old_r, new_r in zip(op.results, new_results):
                old_r.replace_all_uses_with(new_r)
            op.erase()
            for callee in callees:
                if callee not in declared:
                    d = [o for o in tmp.body.operations if ir.StringAttr(o.attributes["sym_name"]).value == callee][0]
                    d.operation.move_before(module.body.operations[0])
                    declared.add(callee)
            count += 1
    return count


_VERIFIER = "torch-verify-linalg-on-tensors-backend-contract"


def linalg_pipeline_without_verifier(ctx: ir.Context) -> str:
    """torch-mlir's torch → linalg pipeline, expanded, minus its contract verifier (which knows no
    body `func.call`); check_linalg_contract stands in for it."""
    from torch_mlir.passmanager import PassManager

    from .pipelines import PIPELINES

    with ctx:
        text = str(PassManager.parse(PIPELINES["linalg"]))
    if not text.endswith("," + _VERIFIER + ")"):
        raise RuntimeError(f"torch-mlir's linalg pipeline no longer ends with {_VERIFIER}: {text}")
    return text[: -len("," + _VERIFIER + ")")] + ")"


def check_linalg_contract(module: ir.Module) -> None:
    """What torch-mlir's verifier checks that matters here: nothing of the torch dialects is left
    (an op it failed to convert), and the only calls are special functions inside linalg bodies."""
    from uniorch.errors import LoweringError

    from .diagnostics import Diagnostic, from_location

    bad = []

    def visit(op):
        name = op.name
        left = name.startswith(("torch.", "torch_c."))
        stray = name == "func.call" and (
            not ir.FlatSymbolRefAttr(op.attributes["callee"]).value.startswith(PREFIX)
            or op.parent is None or not op.parent.name.startswith("linalg."))
        if left or stray:
            file, line, col = from_location(str(op.location))
            bad.append(Diagnostic(f"failed to legalize operation '{name}'", "error", file, line, col,
                                  raw_location=str(op.location)))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if bad:
        raise LoweringError("lowering torch to linalg failed", bad)


def erase_dead_special_generics(func) -> int:
    """Erases `linalg.generic` ops of `func` whose results are all unused (or that have none left)
    and whose body only computes: arith/math ops and special-function calls.

    Why: MLIR cannot know the body `func.call` is pure, so after elementwise fusion has cloned a
    special function into its consumer, canonicalize strips the producer's results but keeps the
    op itself, and nothing would ever run it. (Generics that check, `cf.assert`, are kept.)"""
    erased = 0
    changed = True
    while changed:
        changed = False
        for op in reversed([o.operation for o in func.regions[0].blocks[0].operations]):
            if op.name != "linalg.generic" or any(len(list(r.uses)) for r in op.results):
                continue
            body = [o.operation for o in op.regions[0].blocks[0].operations]
            calls = [o for o in body if o.name == "func.call"]
            if not calls or not all(
                    o.name.startswith(("arith.", "math.")) or o.name == "linalg.yield"
                    or (o.name == "func.call" and ir.FlatSymbolRefAttr(o.attributes["callee"]).value.startswith(PREFIX))
                    for o in body):
                continue
            op.erase()
            erased += 1
            changed = True
    return erased
