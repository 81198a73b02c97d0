"""uniorch-plan-memory: assign kernel results to buffers, reusing storage across the kernel sequence.

After scheduling, `@main` is a sequence of kernel calls and views. Every call result gets a buffer
id (`uniorch.buffers = [ids]` on the call, `uniorch.buffer_bytes` on the module); a buffer is
reused by a later result once every value living in it (directly or through a view) has had its
last use. Greedy best-fit linear scan.
- Values returned from `@main` escape to the caller and never share.
- The pieces of a `tensor.concat` left in `@main` (uniorch-concat-in-place) live in its buffer,
  from the first piece's kernel on.
- A kernel that writes in place (`uniorch.inplace`, e.g. insert_slice into a concat buffer) shares
  its destination's buffer when nothing reads the destination afterwards (and the destination is
  all of its storage, not a slice, and no other operand of the call reads that storage).
- A result with symbolic sizes gets a buffer of its own, marked -1 and allocated per call at the
  size of that call.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from .base import Pass, PassContext
from .ir_utils import main_func

# linalg.transpose: a returned view (passes/returned_views.py), a permute of its operand
VIEWS = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice", "linalg.transpose")


def nbytes(t) -> int:
    t = ir.RankedTensorType(t)
    et = t.element_type
    width = et.width if hasattr(et, "width") else 64  # index and other widthless types: 8 bytes
    n = 1
    for d in t.shape:
        n *= d
    return n * max(1, (width + 7) // 8)


def kernel_inplace(module) -> dict[str, dict[int, int]]:
    """kernel name -> {result index: input index it is written into}."""
    out = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and "uniorch.inplace" in op.attributes:
            name = ir.StringAttr(op.attributes["sym_name"]).value
            pairs = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes["uniorch.inplace"])]
            out[name] = {k: i for k, i in enumerate(pairs) if i >= 0}
    return out


@dataclass(frozen=True)
class PlanMemory(Pass):
    name = "uniorch-plan-memory"
    summary = "give kernel results buffer ids, reusing storage whose values are dead (linear scan)"

    def run(self, module, pctx: PassContext) -> None:
        main = main_func(module)
        ops = [o.operation for o in main.regions[0].blocks[0].operations]
        calls = [op for op in ops if op.name == "func.call"]
        pos = {op: i for i, op in enumerate(ops)}
        inplace = kernel_inplace(module)

        storage = {}  # value -> storage key (a call result); views and in-place results share
        sliced = set()  # values that are a part of their storage (extract_slice, maybe reshaped)
        for op in ops:
            if op.name in VIEWS and op.operands[0] in storage:
                storage[op.results[0]] = storage[op.operands[0]]
                if op.name in ("tensor.extract_slice", "linalg.transpose") or op.operands[0] in sliced:
                    sliced.add(op.results[0])
            elif op.name == "func.call":
                for r in op.results:
                    storage[r] = r
            elif op.name == "tensor.concat":  # its pieces' kernels write into it (passes/concat_in_place.py)
                storage[op.results[0]] = op.results[0]
                for piece in [v for v in op.operands if v in storage]:
                    old = storage[piece]
                    for v, key in list(storage.items()):
                        if key == old:
                            storage[v] = op.results[0]

        def liveness():
            last, esc = {}, set()
            for op in ops:
                for v in op.operands:
                    if v in storage:
                        key = storage[v]
                        last[key] = max(last.get(key, -1), pos[op])
                        if op.name == "func.return":
                            esc.add(key)
            return last, esc

        last_use, escaping = liveness()
        for op in calls:  # merge in-place results into their destination's storage when safe
            aliases = inplace.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value, {})
            for k, i in aliases.items():
                dest = op.operands[i]
                # never when the call also reads the destination's storage through another operand,
                # nor for a slice of a buffer (the result would start at the buffer, not the slice)
                shared = dest in sliced or (dest in storage and any(
                    j != i and w in storage and storage[w] == storage[dest] for j, w in enumerate(op.operands)))
                if dest in storage and last_use.get(storage[dest]) == pos[op] and storage[dest] not in escaping \
                        and not shared:
                    old = op.results[k]
                    for v, key in list(storage.items()):
                        if key == old:
                            storage[v] = storage[dest]
                    last_use, escaping = liveness()

        sizes: list[int] = []
        buffer_of: dict = {}
        free: list[int] = []
        live: list[tuple[int, int]] = []  # (position of last use, buffer id)
        with module.context:
            i64 = ir.IntegerType.get_signless(64)
            for op in calls:
                here = pos[op]
                for entry in [e for e in live if e[0] < here]:
                    live.remove(entry)
                    free.append(entry[1])
                ids = []
                for r in op.results:
                    key = storage[r]
                    if key not in buffer_of and not ir.RankedTensorType(r.type).has_static_shape:
                        # symbolic sizes: a buffer of its own, sized per call (-1), never shared
                        sizes.append(-1)
                        buffer_of[key] = len(sizes) - 1
                    if key not in buffer_of:
                        need = nbytes(key.type)  # a concatenation's pieces: its whole size
                        fits = [b for b in free if sizes[b] >= need] if key not in escaping else []
                        if fits:
                            buffer_of[key] = min(fits, key=lambda b: sizes[b])
                            free.remove(buffer_of[key])
                        else:
                            sizes.append(need)
                            buffer_of[key] = len(sizes) - 1
                        if key not in escaping:
                            live.append((last_use.get(key, here), buffer_of[key]))
                    ids.append(buffer_of[key])
                op.attributes["uniorch.buffers"] = ir.ArrayAttr.get([ir.IntegerAttr.get(i64, b) for b in ids])
            module.operation.attributes["uniorch.buffer_bytes"] = ir.ArrayAttr.get(
                [ir.IntegerAttr.get(i64, s) for s in sizes])
