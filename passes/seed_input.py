"""Random numbers: torch-mlir's global seed becomes an input of `@main`, part of `uniorch-preprocess`.

torch-mlir lowers each random op (rand, randn, bernoulli, dropout, ...) to a counter-based
generator whose key is a 64-bit scalar read from a mutable `ml_program.global @global_seed` and
advanced in place (`global_load`, a multiply-add, `global_store`), and that scalar is used inside
the op's `linalg.generic`. Kernels take tensors, and launch plans hold no mutable globals, so the
k-th random op's key becomes element k of a new last argument `%seeds : tensor<Nxi64>` of `@main`,
read inside the generic, and the module records N as `uniorch.seeds`. The launch plan fills it
from PyTorch's default generator on every call: `torch.manual_seed` makes runs reproducible,
while the stream differs from eager's (as with Inductor's own generator).
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, tensor

SEEDS_ATTR = "uniorch.seeds"


def seeds_as_input(module: ir.Module, func_op: ir.Operation) -> int:
    """Rewrites the seed globals of `func_op` (the module's @main); returns how many seeds."""
    block = func_op.regions[0].blocks[0]
    loads = [o.operation for o in block.operations if o.operation.name == "ml_program.global_load"]
    if not loads:
        return 0
    keys = []  # per random op: the scalar key its generic uses
    for load in loads:
        users = [u.owner for u in load.results[0].uses]
        extract = next((u for u in users if u.name == "tensor.extract"), None)
        if extract is None:
            raise ValueError("a seed global read without tensor.extract")
        key = _advanced(extract.results[0])
        if key is None:
            raise ValueError("a seed global advanced in an unknown way")
        keys.append(key)
    i64 = ir.IntegerType.get_signless(64)
    seed_type = ir.RankedTensorType.get([len(keys)], i64)
    seeds = block.add_argument(seed_type, func_op.location)
    ftype = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
    func_op.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(list(ftype.inputs) + [seed_type], list(ftype.results)))
    for k, key in enumerate(keys):
        for use in list(key.uses):
            body = _enclosing_generic_body(use.owner)
            if body is None:
                continue  # the store back into the global: erased below
            with ir.InsertionPoint.at_block_begin(body), func_op.location:
                index = arith.ConstantOp(ir.IndexType.get(), k).result
                value = tensor.ExtractOp(seeds, [index]).result
            use.owner.operands[use.operand_number] = value
    # the globals' bookkeeping: stores, inserts, the multiply-adds and loads, then the global
    for op in [o.operation for o in block.operations]:
        if op.name == "ml_program.global_store":
            op.erase()
    for op in reversed([o.operation for o in block.operations]):
        if op.name in ("tensor.insert", "arith.addi", "arith.muli", "tensor.extract", "ml_program.global_load") \
                and all(not list(r.uses) for r in op.results) and _touches_seed(op):
            op.erase()
    for op in [o.operation for o in module.body.operations]:
        if op.name == "ml_program.global":
            op.erase()
    with module.context:
        module.operation.attributes[SEEDS_ATTR] = ir.IntegerAttr.get(i64, len(keys))
    return len(keys)


def _advanced(v: ir.Value):
    """The value `v * A + B` (torch-mlir's step of the seed), or None."""
    for use in v.uses:
        mul = use.owner
        if mul.name == "arith.muli":
            for use2 in mul.results[0].uses:
                if use2.owner.name == "arith.addi":
                    return use2.owner.results[0]
    return None


def _enclosing_generic_body(op):
    while op is not None:
        parent = op.parent
        if parent is None:
            return None
        parent = parent.opview.operation if hasattr(parent, "opview") else parent
        if parent.name == "linalg.generic":
            return parent.regions[0].blocks[0]
        if parent.name == "func.func":
            return None
        op = parent
    return None


def _touches_seed(op) -> bool:
    """Whether `op` belongs to the seed's chain (reads a global, or an i64 scalar / 0-d tensor)."""
    if op.name == "ml_program.global_load":
        return True
    return all(str(r.type) in ("i64", "tensor<i64>") for r in op.results)
