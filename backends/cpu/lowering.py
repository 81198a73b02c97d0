"""Ascend's linalg (the adapter's output, generic form) → LLVM dialect, with upstream MLIR passes
through torch-mlir's bindings.

The pass list is triton-ascend's own CPU path (`linalg_to_llir` in its compiler.py: bufferize,
linalg to loops, everything to LLVM), with linalg lowered to scf loops rather than affine ones (the
adapter's tile sizes are computed inside scf loops, which affine loops cannot take as bounds), and
five additions it needs to run in this process:
  * buffer deallocation: the adapter's tiles are `memref.alloc`s, freed nowhere; run once per
    program, they would leak. Small tiles go on the stack.
  * `memref.copy` of strided views becomes `linalg.copy` (loops): lowered as is it calls
    `memrefCopy` from MLIR's C runner library, which torch-mlir's wheel does not ship.
  * a max/min-like reduction the adapter leaves without an initial value starts from its first
    element (`_seed_reductions`).
  * the functions of Ascend's runtime the adapter calls (`tl.cumsum`/`tl.cumprod`, `tl.gather`)
    get bodies (`runtime_calls.py`), inlined before bufferizing.
  * a grid function, `<entry>__grid(args, gx, gy, gz, lo, hi)`, that runs programs lo..hi-1 of
    the grid in one native call (the adapter's kernel takes the grid size and its program id as
    six trailing i32), so a launch costs one call per thread, not one per program.
"""
from __future__ import annotations

import re

from ..sdk import BackendError
from . import libm_calls, runtime_calls
from .bf16_storage import bf16_as_i16

# Ascend's kernel ABI as the adapter writes it: two leading memref<?xi8> (sync-block lock and
# workspace, named by the SyncBlockLockArgIdx / WorkspaceArgIdx attributes), the TTIR arguments
# (pointers as memref<?xT>), then num_programs x/y/z and program_id x/y/z as i32.
LEADING, TRAILING = 2, 6

# The adapter's named-ops form (what bishengir-compile takes too) leaves elementwise arith/math on
# tensors: convert-elementwise-to-linalg makes them linalg.generic before bufferizing.
BUFFERIZE = ("builtin.module(inline,symbol-dce,func.func(convert-elementwise-to-linalg),eliminate-empty-tensors,"
             "empty-tensor-to-alloc-tensor,one-shot-bufferize{allow-return-allocs-from-loops=true})")
# promote-buffers-to-stack: tiles up to 64 KiB live on the stack (threads' stacks are 8 MiB);
# larger ones are malloc'd and freed by the deallocation pipeline. A tile promoted inside a loop
# is scoped to one iteration (`_scope_loop_allocas`) before lowering on.
PROMOTE = "builtin.module(func.func(promote-buffers-to-stack{max-alloc-size-in-bytes=65536}))"
# Other arith ops on bf16 (an int -> bf16 cast, `llvm.sitofp` to bf16, which no i16 can carry) are
# first emulated in f32 with a truncation after each (arith-emulate-unsupported-floats).
# arith-expand with bf16: f32 <-> bf16 conversions as integer ops (round to nearest even). Without
# AVX512-BF16 LLVM calls compiler-rt's __truncsfbf2 for them, which the JIT does not link; what is
# left of bf16 (loads, stores, bitcasts) is then i16 (bf16_storage.py).
TO_LLVM = ("builtin.module(buffer-deallocation-pipeline,convert-linalg-to-loops,lower-affine,"
           "convert-scf-to-cf,convert-cf-to-llvm,"
           "func.func(arith-emulate-unsupported-floats{source-types=bf16 target-type=f32},"
           "arith-expand{include-bf16=true}),"
           "convert-arith-to-llvm,"
           "convert-math-to-llvm,convert-math-to-libm,convert-complex-to-llvm,convert-vector-to-llvm,"
           "convert-index-to-llvm,memref-expand,expand-strided-metadata,finalize-memref-to-llvm,"
           "convert-func-to-llvm,lower-affine,convert-arith-to-llvm,reconcile-unrealized-casts)")


def grid_name(entry: str) -> str:
    return f"{entry}__grid"


def kernel_abi(linalg: str, entry: str) -> list[str]:
    """The kernel's argument types between Ascend's leading buffers and the grid arguments, as
    MLIR type text ("memref<?xf32>", "i64", ...), from the adapter's output."""
    from torch_mlir import ir

    with ir.Context():
        module = ir.Module.parse(strip_annotations(linalg))
        func = _entry_func(module, entry)
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        types = [str(t) for t in ftype.inputs]
    if len(types) < LEADING + TRAILING or types[:LEADING] != ["memref<?xi8>"] * LEADING \
            or types[-TRAILING:] != ["i32"] * TRAILING:
        raise BackendError(f"kernel {entry}: the adapter's signature is not Ascend's kernel ABI "
                           f"(2 memref<?xi8>, arguments, 6 i32): ({', '.join(types)})")
    return types[LEADING:-TRAILING]


def _entry_func(module, entry: str):
    from torch_mlir import ir

    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == entry:
            return op
    raise BackendError(f"kernel {entry}: no func.func @{entry} in the adapter's output")


# `annotation.mark` ops are hints for bishengir's scheduling (e.g. MayImplicitTransposeWithLastAxis):
# no results, no semantics, and a dialect upstream MLIR does not have.
_ANNOTATIONS = re.compile(r'^\s*"annotation\.mark"\(.*$\n?', re.M)


# ops the adapter's (older) MLIR names differently from torch-mlir's
_RENAMED = {'"bufferization.to_memref"(': '"bufferization.to_buffer"('}


# `tt.extern_elementwise` calls of the vendor math library (codegen's `libdevice.atan`, ...), which
# the adapter passes through: upstream MLIR's math op of the same function, which the lowering
# turns into a libm call (convert-math-to-libm). Others stay, and the kernel runs on the interpreter.
_EXTERN = re.compile(r'"tt\.extern_elementwise"(\([^)]*\)) <\{[^}]*symbol = "((?:__nv_|__ocml_)\w+?)"\}>')
_LIBM = {"acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "erf", "erfc", "expm1", "log1p",
         "tan", "tanh", "sinh", "cosh"}


def _extern_as_math(match) -> str:
    routed = libm_calls.stand_in(match.group(2), match.group(1))  # lgamma, Bessel, nextafter
    if routed is not None:
        return routed
    name = re.sub(r"_f(32|64)$", "", re.sub(r"^(__nv_|__ocml_)", "", match.group(2)))  # ROCm's ocml: __ocml_atan_f32
    if name not in _LIBM and name.endswith("f") and name[:-1] in _LIBM:  # CUDA's f32 names: __nv_atanf
        name = name[:-1]
    if name not in _LIBM:
        return match.group(0)
    return f'"math.{name}"{match.group(1)} <{{fastmath = #arith.fastmath<none>}}>'


# a two-operand extern call, whole: result, operands, the operand type and the result type
_HYPOT = re.compile(r'^(\s*)%(\w+) = "tt\.extern_elementwise"\((%\w+), (%\w+)\) <\{[^}]*symbol = '
                    r'"(?:__nv_|__ocml_)hypot(?:f|_f32|_f64)?"\}> : \(([^,]+), [^)]+\) -> (\S+)$', re.M)
_INF_BITS = {"f32": "0x7F800000", "f64": "0x7FF0000000000000"}


def _hypot_as_math(match) -> str:
    """hypot(x, y) in math and arith ops, which MLIR has no op for (complex abs, a spectrogram's
    magnitude): m sqrt(1 + (n/m)^2) with m, n the larger and smaller of |x| and |y|, so no square
    overflows; 0 where both are 0, inf where either is inf (a NaN in the other included), as libm's."""
    indent, res, x, y, ty = match.group(1), match.group(2), match.group(3), match.group(4), match.group(5)
    elt = re.search(r"f(16|32|64)>?$", ty).group(0).rstrip(">")
    if elt not in _INF_BITS:
        return match.group(0)
    bits = re.sub(r"f(16|32|64)(>?)$", r"i1\2", ty)
    fm = "<{fastmath = #arith.fastmath<none>}>"
    tmp = f"%hypot_{res}_"

    def const(name, value):
        attr = f"dense<{value}> : {ty}" if ty.startswith("tensor") else f"{value} : {ty}"
        return f'{indent}{tmp}{name} = "arith.constant"() <{{value = {attr}}}> : () -> {ty}'

    def op(name, what, args, out=ty, attrs=fm):
        return f'{indent}{tmp}{name} = "{what}"({", ".join(args)}) {attrs} : ({", ".join([ty] * len(args))}) -> {out}'

    def cmp(name, a, b, pred):  # 1: oeq
        return op(name, "arith.cmpf", [a, b], bits, f"<{{fastmath = #arith.fastmath<none>, predicate = {pred} : i64}}>")

    t = lambda n: tmp + n  # noqa: E731
    lines = [op("ax", "math.absf", [x]), op("ay", "math.absf", [y]),
             op("m", "arith.maximumf", [t("ax"), t("ay")]), op("n", "arith.minimumf", [t("ax"), t("ay")]),
             op("r", "arith.divf", [t("n"), t("m")]), const("one", "1.000000e+00"),
             op("s", "math.fma", [t("r"), t("r"), t("one")]), op("q", "math.sqrt", [t("s")]),
             op("h", "arith.mulf", [t("m"), t("q")]), const("zero", "0.000000e+00"), const("inf", _INF_BITS[elt]),
             cmp("z", t("m"), t("zero"), 1), cmp("xi", t("ax"), t("inf"), 1), cmp("yi", t("ay"), t("inf"), 1),
             f'{indent}{tmp}i = "arith.ori"({t("xi")}, {t("yi")}) : ({bits}, {bits}) -> {bits}',
             f'{indent}{tmp}hz = "arith.select"({t("z")}, {t("zero")}, {t("h")}) : ({bits}, {ty}, {ty}) -> {ty}',
             f'{indent}%{res} = "arith.select"({t("i")}, {t("inf")}, {t("hz")}) : ({bits}, {ty}, {ty}) -> {ty}']
    return "\n".join(lines)


def strip_annotations(linalg: str) -> str:
    """The adapter's generic-form output as torch-mlir's MLIR reads it: hints dropped, ops renamed,
    the vendor math library's calls as math ops."""
    linalg = _ANNOTATIONS.sub("", linalg)
    for old, new in _RENAMED.items():
        linalg = linalg.replace(old, new)
    return _EXTERN.sub(_extern_as_math, _HYPOT.sub(_hypot_as_math, linalg))


def _uses_ascend_buffers(linalg: str) -> bool:
    """Whether the kernel reads the sync-block lock or the workspace (only cross-core kernels do):
    the cpu backend passes neither. In the generic form, the entry's arguments are %arg0, %arg1."""
    return len(re.findall(r"%arg[01]\b", linalg)) > 2


def _grid_wrapper(entry: str, types: list[str]) -> str:
    n = len(types)
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    args = ", ".join(f"%a{i}" for i in range(n))
    # the declaration lets the wrapper parse (and verify) on its own; only the wrapper is moved
    return f"""
func.func private @{entry}({', '.join(types)}, i32, i32, i32, i32, i32, i32)
func.func @{grid_name(entry)}({params}, %gx: i32, %gy: i32, %gz: i32, %lo: index, %hi: index) {{
  %c1 = arith.constant 1 : index
  %nx = arith.index_cast %gx : i32 to index
  %ny = arith.index_cast %gy : i32 to index
  scf.for %i = %lo to %hi step %c1 {{
    %x = arith.remui %i, %nx : index
    %r = arith.divui %i, %nx : index
    %y = arith.remui %r, %ny : index
    %z = arith.divui %r, %ny : index
    %px = arith.index_cast %x : index to i32
    %py = arith.index_cast %y : index to i32
    %pz = arith.index_cast %z : index to i32
    func.call @{entry}({args}, %gx, %gy, %gz, %px, %py, %pz) : ({', '.join(types)}, i32, i32, i32, i32, i32, i32) -> ()
  }}
  return
}}
"""


def _walk(module, name) -> list:
    """Every op under `module` named `name` (or one of a tuple of names), in walk order."""
    names = (name,) if isinstance(name, str) else tuple(name)
    found = []

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    inner = inner.operation
                    if inner.name in names:
                        found.append(inner)
                    visit(inner)

    visit(module.operation)
    return found


def _seed_reductions(module, entry: str) -> None:
    """The adapter writes a max/min-like `linalg.reduce` with a `tensor.empty` as its init (Ascend's
    compiler takes that as "no initial value"); upstream MLIR reads the init, so the result would
    depend on uninitialized memory. Each such reduction starts from its first element instead:
    init = the inputs' slice at index 0 of the reduced dim, inputs = the rest. Exact for any
    combiner, as "no initial value" means; over a dim of one element the rest is empty and the
    reduction returns that element (a softmax over one key: a decoder's first step)."""
    from torch_mlir import ir
    from torch_mlir.dialects import tensor

    for op in _walk(module, "linalg.reduce"):
        n_in = len(op.operands) // 2
        inputs, inits = list(op.operands)[:n_in], list(op.operands)[n_in:]
        if not all(_defined_by(v, "tensor.empty") for v in inits):
            continue
        dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        shape = ir.RankedTensorType(inputs[0].type).shape
        if len(dims) != 1 or any(ir.ShapedType.is_dynamic_size(x) for x in shape) or shape[dims[0]] < 1:
            raise BackendError(f"kernel {entry}: a reduction without an initial value over dims {dims} of "
                               f"{shape}, which the cpu lowering does not seed")
        d = dims[0]
        with ir.InsertionPoint(op), op.location:
            for i, (x, init) in enumerate(zip(inputs, inits)):
                elt = ir.RankedTensorType(x.type).element_type
                head_sizes = [1 if k == d else n for k, n in enumerate(shape)]
                tail_sizes = [n - 1 if k == d else n for k, n in enumerate(shape)]
                # an empty rest starts at 0: past the end is out of bounds even for no elements
                offsets = [1 if k == d and shape[d] > 1 else 0 for k in range(len(shape))]
                head = tensor.ExtractSliceOp(init.type, x, [], [], [], [0] * len(shape), head_sizes, [1] * len(shape))
                tail = tensor.ExtractSliceOp(ir.RankedTensorType.get(tail_sizes, elt), x, [], [], [], offsets,
                                             tail_sizes, [1] * len(shape))
                op.operands[i] = tail.result
                op.operands[n_in + i] = head.result


def _defined_by(value, name: str) -> bool:
    from torch_mlir import ir

    owner = value.owner
    return not isinstance(owner, ir.Block) and owner.name == name


def _clamp_discrete_loads(module) -> None:
    """The adapter lowers a load whose addresses it cannot analyse (division and remainder in
    them: a flat index decomposed into a tensor's dims, a concatenation's pieces, a pooling
    window) as a loop loading each lane of the block on its own, masked lanes included, and keeps
    the valid lanes afterwards; on an NPU a masked-off lane's address is harmless, here it is a
    read of this process's memory past the tensor (a crash where the next page is unmapped). Each
    such element load is clamped into its memref (`[0, size - 1]`): valid lanes read what they
    did, masked-off ones some element of the same tensor that nobody keeps."""
    from torch_mlir import ir
    from torch_mlir.dialects import arith, memref

    for op in _walk(module, "memref.reinterpret_cast"):
        src = op.operands[0]
        if not isinstance(src.owner, ir.Block) or len(op.operands) != 2 \
                or list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"])) != [1]:
            continue  # one element at a dynamic offset of a kernel argument
        if not all(u.owner.name == "memref.load" for u in op.results[0].uses):
            continue  # stores are guarded by their masks
        with ir.InsertionPoint(op), op.location:
            index = ir.IndexType.get()
            zero = arith.ConstantOp(index, 0).result
            last = arith.SubIOp(memref.DimOp(src, zero).result, arith.ConstantOp(index, 1).result).result
            op.operands[1] = arith.MinSIOp(arith.MaxSIOp(op.operands[1], zero).result, last).result


def _clamp_window_copies(module) -> None:
    """The other form of such a load: one row at a time (its address has the division in it), each
    a strided window of the block's width copied from the argument, the mask applied after. A
    window reaching past the argument's end (a softmax over 333 of a 5x333x7 tensor, 512 wide)
    copies only the elements inside it: the rest are masked-off lanes."""
    from torch_mlir import ir
    from torch_mlir.dialects import arith, memref

    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    for op in _walk(module, "memref.copy"):
        cast = op.operands[0].owner
        if isinstance(cast, ir.Block) or cast.name != "memref.reinterpret_cast":
            continue
        arg = cast.operands[0]
        segments = list(ir.DenseI32ArrayAttr(cast.attributes["operandSegmentSizes"]))
        sizes = list(ir.DenseI64ArrayAttr(cast.attributes["static_sizes"]))
        wide = [d for d, n in enumerate(sizes) if n != 1]
        if not isinstance(arg.owner, ir.Block) or segments[:3] != [1, 1, 0] or len(wide) != 1:
            continue
        d, width = wide[0], sizes[wide[0]]
        strides = list(ir.DenseI64ArrayAttr(cast.attributes["static_strides"]))
        dyn = iter(list(cast.operands)[2:])
        with ir.InsertionPoint(op), op.location:
            index = ir.IndexType.get()

            def const(v):
                return arith.ConstantOp(index, v).result

            step = None
            for k, st in enumerate(strides):
                value = next(dyn) if st == dynamic else None
                if k == d:
                    step = value if value is not None else const(st)
            zero, one = const(0), const(1)
            ahead = arith.SubIOp(memref.DimOp(arg, zero).result, cast.operands[1]).result  # elements from the offset on
            forward = arith.CeilDivSIOp(arith.MaxSIOp(ahead, zero).result, arith.MaxSIOp(step, one).result).result
            behind = arith.AddIOp(arith.FloorDivSIOp(cast.operands[1], arith.MaxSIOp(
                arith.SubIOp(zero, step).result, one).result).result, one).result  # a negative stride
            standing = arith.SelectOp(arith.CmpIOp(arith.CmpIPredicate.sgt, ahead, zero).result,
                                      const(width), zero).result  # stride 0: one element, read width times
            n = arith.SelectOp(arith.CmpIOp(arith.CmpIPredicate.sgt, step, zero).result, forward,
                               arith.SelectOp(arith.CmpIOp(arith.CmpIPredicate.eq, step, zero).result, standing,
                                              behind).result).result
            n = arith.MinSIOp(arith.MaxSIOp(n, zero).result, const(width)).result
            shape = [n if k == d else 1 for k in range(len(sizes))]
            offsets, units = [0] * len(sizes), [1] * len(sizes)
            memref.copy(*[memref.subview(v, offsets, shape, units, result_type=_prefix_type(v.type, d))
                          for v in op.operands[:2]])
        op.erase()


def _prefix_type(t, d: int):
    """A memref type's own layout, with dim `d` of dynamic size (a subview at offset 0)."""
    from torch_mlir import ir

    t = ir.MemRefType(t)
    strides, offset = t.get_strides_and_offset()
    shape = list(t.shape)
    shape[d] = ir.ShapedType.get_dynamic_size()
    return ir.MemRefType.get(shape, t.element_type, ir.StridedLayoutAttr.get(offset, strides), t.memory_space)


def _copies_to_linalg(module) -> None:
    from torch_mlir import ir
    from torch_mlir.dialects import linalg

    for op in _walk(module, "memref.copy"):
        with ir.InsertionPoint(op), op.location:
            linalg.copy(op.operands[0], outs=[op.operands[1]])
        op.erase()


_LOOPS = ("scf.for", "scf.while")


def _scope_loop_allocas(module) -> None:
    """Each loop body that allocates stack tiles becomes one `memref.alloca_scope`, so its tiles
    are freed at the end of every iteration. LLVM gives an `alloca` in a loop new stack each time
    round: ConvMixer's 1x1 convolution, computing a 7x7 depthwise one in its B tiles (49 taps in
    each of 48 K steps at 768 channels), took 250 KB of stack per K step and overflowed a thread's
    8 MiB (a segfault). A body yielding a memref keeps its tiles on the heap instead: a scoped one
    would be freed before the next iteration reads it."""
    from torch_mlir import ir
    from torch_mlir.dialects import memref

    for loop in _walk(module, _LOOPS):
        for region in loop.regions:
            for block in region.blocks:
                ops = [o.operation for o in block.operations]
                allocas = _own_allocas(ops)
                if not allocas:
                    continue
                term = ops[-1]
                if term.regions:
                    continue
                if any(isinstance(v.type, ir.MemRefType) for v in term.operands):
                    for a in allocas:
                        with ir.InsertionPoint(a), a.location:
                            heap = memref.AllocOp(a.results[0].type, list(a.operands), [])
                        a.results[0].replace_all_uses_with(heap.result)
                        a.erase()
                    continue
                with ir.InsertionPoint(term), term.location:
                    scope = memref.AllocaScopeOp([v.type for v in term.operands])
                    body = scope.regions[0].blocks.append()
                with ir.InsertionPoint(body), term.location:
                    ret = memref.AllocaScopeReturnOp(list(term.operands))
                for o in ops[:-1]:
                    o.move_before(ret.operation)
                for i, v in enumerate(list(term.operands)):
                    term.operands[i] = scope.results[i]


# stack tiles a kernel's frame may hold outside loops; the rest go to the heap (the launching thread's
# stack is 8 MiB, and Python's frames below the kernel use some of it)
FRAME_BUDGET = 1 << 20


def _bound_frame(module) -> None:
    """The stack tiles each function allocates outside its loops, all live at once in its frame,
    stay under FRAME_BUDGET: the largest move to the heap (freed by the deallocation pipeline)
    until they do. A bitonic sort of an 8192-long row written out step by step (as GPUs run it; the
    cpu target's now loops), 91 steps each with its own 32 KiB key and 64 KiB index tiles, took
    8.7 MB of one frame and crashed the process."""
    from torch_mlir import ir
    from torch_mlir.dialects import memref

    for func in _walk(module, "func.func"):
        if not func.regions[0].blocks:
            continue
        allocas = _own_allocas([o.operation for o in func.regions[0].blocks[0].operations])
        sized = sorted(((_bytes(ir.MemRefType(a.results[0].type)), a) for a in allocas), key=lambda t: -t[0])
        total = sum(n for n, _ in sized)
        for n, a in sized:
            if total <= FRAME_BUDGET:
                break
            with ir.InsertionPoint(a), a.location:
                heap = memref.AllocOp(a.results[0].type, list(a.operands), [])
            a.results[0].replace_all_uses_with(heap.result)
            a.erase()
            total -= n


def _bytes(t) -> int:
    """A static memref's size in bytes (dynamic ones are not promoted to the stack: 0)."""
    if not t.has_static_shape:
        return 0
    n = max(1, (t.element_type.width if hasattr(t.element_type, "width") else 64) // 8)
    for d in t.shape:
        n *= d
    return n


def _own_allocas(ops) -> list:
    """The `memref.alloca`s among `ops` and in their regions, but not in a nested loop's body
    (that loop is scoped by itself)."""
    found = []
    for o in ops:
        if o.name == "memref.alloca":
            found.append(o)
        elif o.name not in _LOOPS:
            for region in o.regions:
                for block in region.blocks:
                    found += _own_allocas([i.operation for i in block.operations])
    return found


def to_llvm(linalg: str, entry: str) -> str:
    """The LLVM dialect module of one kernel and its grid function, as text, from the adapter's
    output in generic form."""
    from torch_mlir import ir
    from torch_mlir.passmanager import PassManager

    linalg = strip_annotations(linalg)
    if _uses_ascend_buffers(linalg):
        raise BackendError(f"kernel {entry}: the adapter's kernel uses Ascend's sync-block lock or workspace "
                           "buffer, which the cpu backend does not provide")
    with ir.Context(), ir.Location.unknown():
        try:
            module = ir.Module.parse(linalg)
        except Exception as err:  # noqa: BLE001 - MLIR raises its own error types
            raise BackendError(f"kernel {entry}: torch-mlir cannot parse the adapter's linalg: {err}") from None
        func = _entry_func(module, entry)
        helpers = [ir.StringAttr(op.attributes["sym_name"]).value for op in _walk(module, "func.func")
                   if op.regions[0].blocks and ir.StringAttr(op.attributes["sym_name"]).value != entry]
        runtime_calls.define(module, _walk(module, "func.func"), _walk(module, "func.call"))
        external = [ir.StringAttr(op.attributes["sym_name"]).value for op in _walk(module, "func.func")
                    if not op.regions[0].blocks]
        if helpers:
            # the adapter's own scan helpers (reversed or leading-axis tl.cumsum) pass tensors across
            # a call; bufferizing function boundaries breaks the kernel's memref arguments
            raise BackendError(f"kernel {entry}: the adapter's linalg calls its helper function(s) "
                               f"{', '.join(helpers)} with tensors, which the cpu lowering does not bufferize")
        if external:
            # e.g. a reversed tl.cumsum: a call to `triton_cumsum_0` that runtime_calls leaves declared
            raise BackendError(f"kernel {entry}: the adapter's linalg calls {', '.join(external)}, a function of "
                               "Ascend's compiler runtime the cpu backend defines only as a forward scan along "
                               "the last axis")
        types = [str(t) for t in ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs]
        _seed_reductions(module, entry)
        _clamp_discrete_loads(module)
        _clamp_window_copies(module)
        for stage, pipeline in (("bufferize", BUFFERIZE), ("promote", PROMOTE), ("llvm", TO_LLVM)):
            try:
                PassManager.parse(pipeline).run(module.operation)
            except Exception as err:  # noqa: BLE001
                raise BackendError(f"kernel {entry}: lowering the adapter's linalg failed at '{stage}': {err}") from None
            if stage == "promote":
                _scope_loop_allocas(module)
                _bound_frame(module)
            if stage == "bufferize":
                _copies_to_linalg(module)
                libm_calls.as_calls(module)
                # added after the inliner ran: inlined into the grid loop, the kernel's stack tiles
                # would be allocated anew per program (MLIR's inliner adds no stack save/restore)
                wrapper = ir.Module.parse(_grid_wrapper(entry, types[:-TRAILING]))
                module.body.append(list(wrapper.body.operations)[-1].operation)
        return bf16_as_i16(str(module))


__all__ = ["grid_name", "kernel_abi", "to_llvm"]
