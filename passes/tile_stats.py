"""Tile statistics, part of `uniorch-preprocess`: a norm's statistics over a convolution's (or
matmul's) output rows, partly computed in that contraction's epilogue, so the statistics kernel
reads small per-chunk partials instead of the whole activation.

BatchNorm in training, GroupNorm and a spatial mean (squeeze-excite) reduce the output of a
convolution over its rows (batch x height x width: the M of its tiles), which no one tile holds.
Fused as they come, the statistics are a reduction kernel that reads the activation the
convolution has just written. Here the rows are cut into chunks of `L` consecutive rows (M
flattened as the contraction's tiles flatten it; `L` a power of two dividing the reduced rows, so
a tile of BLOCK_M rows, a multiple of L, holds whole chunks), and the convolution's epilogue
writes per chunk and column the chunk's sum and its centred sum of squares:

    S[p, c] = sum_{m in chunk p} x[m, c]        Q[p, c] = sum_{m in chunk p} (x[m, c] - S[p, c] / L)²

The statistics, as capture/statistics.py writes them (a sum of x for the mean, then sums of d and
d² with d = x - c for a per-row value c), come back from the partials exactly (Chan, Golub and
LeVeque's pairwise update):

    sum(x) = sum_p S        sum(x - c) = sum_p (S - L c)        sum((x - c)²) = sum_p (Q + L (S/L - c)²)

so the statistics kernel sums rows / L partials per column instead of the rows. A plain sum (a
mean) needs S only. Partials cost 4 bytes per chunk and column each, written and read, against
the activation read they replace: only where that is fewer bytes (fp32: L >= 8, or 4 for a plain
sum; twice that for a 16-bit activation).

Conditions: the sums are f32 sums of x, which is the contraction's result or an epilogue value of
it, through identity-mapped one-input pointwise ops (an upcast) and then reshapes; the reduced
rows are the innermost M dims of the contraction (a suffix of its row order) and the rows kept
(GroupNorm's batch) the outer ones, each whole; columns may be split (GroupNorm's channels per
group); static shapes; not a norm over a linear layer's features (LayerNorm, RMSNorm), whose row
one tile holds (uniorch-fuse-row-stats) or one reduction kernel sums and normalises in registers.
uniorch-fuse puts the partial generics (`uniorch.tile_stat = L`) in the contraction's kernel
(`try_join_tile_stat`); the rest
(the sums of partials, then a normalise that reads the activation) fuses as any other op, so a
BatchNorm's normalise can ride on the pooling or convolution after it. Codegen:
codegen/contraction_stats.py; the schedule keeps the tile a multiple of L along the chunked axis.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat
from uniorch.codegen.attention_plan import _plan

from .fuse_common import TILE_STAT, _i64
from .ir_utils import build_generic as _generic, clone_body as _clone_body, mapped as _mapped
from .plain_reductions import as_plain_reduction, reduced_prefix as _prefix
from .sink_collapse import _groups, _reassociation
from .split_reduction import _zeros
from .tile_readers import chunk_lengths, read_with_result, summed_whole_beside

MAX_CHUNK = 64  # rows per chunk; the schedule's BLOCK_M is then at least this
# reduced rows with no power-of-two factor of 16 (7 x 7 pixels, ResNet's last stage at 224 px) are
# one chunk when at most this many: a tile of the next power of two holds one chunk, its programs
# stepping by the chunk (contraction_stats.py, `row_step`)
MAX_WHOLE_CHUNK = 128
# maxes and mins come from partials too (a global max pool): combiner -> the partials' start
EXTREMA = {"arith.maximumf": float("-inf"), "arith.minimumf": float("inf")}


def tile_stats(main) -> None:
    """Rewrites each matching set of sums in `main` (before uniorch-fuse), in one scan: after a
    rewrite it goes on from the new sum of partials (what it erased lay after the sum it matched)."""
    with ir.Location.unknown():
        block = main.regions[0].blocks[0]
        start = 0
        while True:
            ops = [o.operation for o in block.operations]
            for i in range(start, len(ops)):
                op = ops[i]
                if _sum_prefix(op) is not None or _extremum(op):
                    found = _match(op)
                elif (plain := as_plain_reduction(op)) is not None:
                    # a global max pool (adaptive_max_pool2d(x, 1)): matched as the plain max it is
                    found = _match(plain, replacing=op)
                    if found is None:
                        plain.erase()
                    else:
                        op.results[0].replace_all_uses_with(plain.results[0])
                        op.erase()
                else:
                    found = _match_split(op)
                if found is not None:
                    new0 = _rewrite(found)
                    start = [o.operation for o in block.operations].index(new0) + 1
                    break
            else:
                return


# ---------------------------------------------------------------- matching


def _f32(v) -> bool:
    return str(ir.ShapedType(v.type).element_type) == "f32"


def _body_names(op) -> list[str]:
    return [o.name for o in pat.body_ops(op)]


def _plain_sum(op) -> bool:
    """`op` sums its one f32 input, read in loop order: out = out + in."""
    return _sum_prefix(op) == [] and _f32(pat.inputs(op)[0])


def _sum_prefix(op) -> list | None:
    """The body ops before the sum if `op` sums f(in) of its one input, read in loop order, into
    an f32 result (f: a 16-bit input's upcast), with f's ops reading only `in` and constants."""
    prefix = _prefix(op, ("arith.addf",))
    return prefix if prefix is not None and _f32(op.results[0]) else None


def _extremum(op) -> str | None:
    """The combiner if `op` is a max or min (torch's, NaN-propagating) of f(in), its one input
    read in loop order (f: ops on it alone, a ReLU folded in by torch-mlir's amax)."""
    if _prefix(op, tuple(EXTREMA)) is None:
        return None
    return pat.body_ops(op)[-1].name


def _sibling_match(op) -> _Found | None:
    """Another reduction's partials, asked by a max of the same activation (not asking back)."""
    return _match(op, siblings=False) if _sum_prefix(op) is not None or _extremum(op) else None


def _sum_of_square(op) -> bool:
    """out = out + in * in (the sum of d²), in loop order."""
    if not pat.is_reduction(op) or pat.num_inputs(op) != 1 or len(op.results) != 1:
        return False
    maps = pat.indexing_maps(op)
    if maps[0] != ir.AffineMap.get_identity(maps[0].n_dims):
        return False
    if _body_names(op) != ["arith.mulf", "arith.addf"]:
        return False
    mul = pat.body_ops(op)[0]
    a = pat.body(op).arguments[0]
    return mul.operands[0] == a and mul.operands[1] == a and pat.reduction_combiners(op) is not None


def _static_shape(v) -> list[int] | None:
    t = ir.RankedTensorType(v.type)
    return list(t.shape) if t.has_static_shape else None


@dataclass
class _Found:
    r0: ir.Operation         # sum(x)
    dev: ir.Operation | None  # d = x - c
    r1: ir.Operation | None  # sum(d)
    r2: ir.Operation | None  # sum(d²)
    y: ir.Value              # the contraction's result, x is computed from
    chain: list              # pointwise ops from y towards x (forward order), inlined in the partials' bodies
    views: list              # the reshapes after them (forward order)
    y_m: list                # y dims along the chunked tile axis, in the contraction's order (outer to inner)
    L: int
    xdims: list              # per x dim: ("M", ydim) kept row | ("S", ydims) reduced rows | ("O", ydim, size) | ("U",)
    o_y: list                # y's other non-unit dims, in y order
    comb: str = "arith.addf"  # the partials' combiner: a sum's, or a max's or min's (`_extremum`)


def _is_product(op) -> bool:
    return pat.is_generic(op) and (pat.is_contraction(op) or pat.is_convolution(op))


def _walk(x: ir.Value):
    """From x back to a value on a contraction's output tile: (that value, the contraction,
    pointwise chain, views), the chain and the views in forward order; None if the way back is
    anything else. The value is the contraction's result or an epilogue op of it (BatchNorm's
    scale and shift, an activation: `_on_product`)."""
    views, chain = [], []
    v = x
    while True:
        if isinstance(v.owner, ir.Block):
            return None
        op = pat.op_of(v.owner)
        if _is_product(op):
            return v, op, list(reversed(chain)), list(reversed(views))
        if op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
            if chain:
                return None  # a pointwise op after a reshape
            views.append(op)
            v = op.operands[0]
            continue
        if pat.is_pointwise(op) and len(op.results) == 1:
            ins = pat.inputs(op)
            maps = pat.indexing_maps(op)
            ident = ir.AffineMap.get_identity(maps[-1].n_dims)
            if (len(ins) == 1 and isinstance(ins[0].type, ir.ShapedType) and maps[0] == ident and maps[-1] == ident
                    and not pat.block_arg_used(op, 1)
                    and not any(o.name == "tensor.extract" for o in pat.body_ops(op))):
                chain.append(op)
                v = ins[0]
                continue
            product = _on_product(op)
            if product is not None:
                return v, product, list(reversed(chain)), list(reversed(views))
        return None


def _on_product(op, depth: int = 8):
    """The contraction whose result pointwise `op` computes from elementwise (through more such
    ops), its other inputs broadcast along the result (per-channel parameters); else None."""
    if depth == 0 or not pat.is_pointwise(op) or len(op.results) != 1:
        return None
    maps = pat.indexing_maps(op)
    ident = ir.AffineMap.get_identity(maps[-1].n_dims)
    shape = _static_shape(op.results[0])
    if maps[-1] != ident or shape is None or any(o.name == "tensor.extract" for o in pat.body_ops(op)):
        return None
    cands, others = [], []
    for a, m in zip(pat.inputs(op), maps):
        if not isinstance(a.type, ir.ShapedType) or isinstance(a.owner, ir.Block):
            continue
        cand = None
        if m == ident and _static_shape(a) == shape:
            p = pat.op_of(a.owner)
            cand = p if _is_product(p) else _on_product(p, depth - 1)
        if cand is None:
            others.append(a)
        else:
            cands.append((a, cand))
    # on two products' tiles (a residual block's conv and its input, another conv's output): the
    # later one's, computed from the other, which is stored for the block's first conv anyway
    found = None
    for _, c in cands:
        if all(o == c or _reads(c.results[0], o) for _, o in cands):
            found = c
            break
    if cands and found is None:
        return None
    others += [a for a, c in cands if c != found]
    # the other inputs are parameters: none computed from the product (softmax's max of it)
    if found is not None and any(_reads(a, found) for a in others):
        return None
    return found


def _reads(v: ir.Value, target, limit: int = 256) -> bool:
    """Whether `v` is computed from `target`'s results (a bounded walk over producers, which
    skips ops before `target` in its block: none of them reads it; True when the walk is cut
    short, to be safe)."""
    func = target.parent if target.parent is not None and target.parent.name == "func.func" else None
    stack, seen = [v], 0
    while stack:
        w = stack.pop()
        if isinstance(w.owner, ir.Block):
            continue
        op = pat.op_of(w.owner)
        if op == target:
            return True
        # MLIR's own order of the block (cached in it), not an index of the block per call
        if func is not None and op.parent == func and op.is_before_in_block(target):
            continue
        seen += 1
        if seen > limit:
            return True
        stack.extend(op.operands)
    return False


def _view_atoms(op, atoms: list) -> list | None:
    """Per result dim of reshape `op`, its factors of the contraction value's dims: (y dim, size,
    stride within that dim); size-1 dims have none."""
    groups = _groups(op)
    if op.name == "tensor.collapse_shape":
        return [[a for i in g for a in atoms[i]] for g in groups]
    shape = _static_shape(op.results[0])
    out: list = [None] * len(shape)
    for src, g in enumerate(groups):
        sizes = [shape[j] for j in g]
        src_atoms = atoms[src]
        nonunit = [j for j in g if shape[j] != 1]
        for j in g:
            out[j] = []
        if not src_atoms:
            continue
        if len(src_atoms) == 1:
            d, size, stride = src_atoms[0]
            inner = stride
            for j in reversed(g):
                if shape[j] != 1:
                    out[j] = [(d, shape[j], inner)]
                    inner *= shape[j]
            if math.prod(sizes) != size:
                return None
        elif len(nonunit) == len(src_atoms) and [shape[j] for j in nonunit] == [a[1] for a in src_atoms]:
            for j, a in zip(nonunit, src_atoms):
                out[j] = [a]
        elif len(nonunit) == 1 and math.prod(sizes) == math.prod(a[1] for a in src_atoms):
            # only unit dims split off a merged dim (GroupNorm with a channel per group: the
            # pixels, collapsed, viewed as 1 x pixels): the merged dim's factors stay together
            out[nonunit[0]] = list(src_atoms)
        else:
            return None
    return out


def _match_split(r0) -> _Found | None:
    """A sum of several inputs' product, one of them on a contraction's output tile (LayerNorm's
    weight gradient: sum over the rows of dy * (x - mean) * rstd, dy a matmul's result) matched
    as the plain sum of a pointwise summand: the summand is an epilogue value, loading the other
    inputs beside the output tile, and the contraction writes its partials. Else None, and the
    split is undone."""
    split = _split_summand(r0)
    if split is None:
        return None
    summand, total, joins = split
    found = _match(total)
    if found is not None and (found.chain or found.views or (_rounded(summand) and not joins)):
        # a 16-bit product stored narrow and widened again (bf16 autocast): fusion leaves the
        # widening to the reader, so the summand would not be on the kernel's output tile; one
        # reading only the product and parameters joins its epilogue (a bf16 CNN's pooled head)
        found = None
    if found is None:
        empty = pat.outputs(summand)[0].owner
        total.erase()
        summand.erase()
        empty.erase()
        return None
    r0.results[0].replace_all_uses_with(total.results[0])
    r0.erase()
    return found


def _only_reader(v, op, depth: int = 8) -> bool:
    """Whether `op` is the only reader of v, directly or through pointwise ops read only by it."""
    for u in v.uses:
        user = pat.op_of(u.owner)
        if user == pat.op_of(op):
            continue
        if depth == 0 or not pat.is_pointwise(user) or not all(_only_reader(r, op, depth - 1) for r in user.results):
            return False
    return True


def _product_read_only_by(product, r0) -> bool:
    """Whether the sum `r0` is all that reads the product (its epilogue included): its output is
    stored for the sum alone, so partials in its epilogue save the whole store and read."""
    return all(_only_reader(r, r0) for r in product.results)


def _split_summand(r0):
    """(pointwise summand, plain sum of it, whether the summand joins the product's epilogue even
    if it rounds: below) built before reduction `r0`, an f32 sum (or a max or min: a bias and
    ReLU folded into PointNet's max over points) of a body over several inputs; one input read in
    loop order gives the summand's shape. None if `r0` is not such a reduction or no input is a
    contraction's output tile."""
    if not pat.is_reduction(r0) or pat.num_inputs(r0) < 2 or len(r0.results) != 1:
        return None
    combiners = pat.reduction_combiners(r0)
    comb = combiners[0][0] if combiners else None
    if comb not in ("arith.addf",) + tuple(EXTREMA) or (comb == "arith.addf" and not _f32(r0.results[0])):
        return None
    maps = pat.indexing_maps(r0)
    ins = pat.inputs(r0)
    n = maps[0].n_dims
    ident = ir.AffineMap.get_identity(n)
    # A convolution's output summed with other full-size inputs stays a reduction kernel where the
    # product is read elsewhere too: BatchNorm's weight gradient in a CNN's backward, whose dy the
    # input's gradient reads, moved more bytes with the epilogue loading x beside the tile than the
    # sum saved (the zoo's densenet_block: 37 -> 43 kernels, +14 %). It joins the epilogue where the
    # sum is the product's only reader (ResNet's last block, relu(bn(conv) + x), pooled) or its
    # other inputs are constant along the sum (per-channel parameters, loaded once per column).
    its = pat.iterator_types(r0)
    summed_dims = {i for i, t in enumerate(its) if t == "reduction"}
    params_only = sum(1 for m in maps[:-1] if m == ident) == 1 \
        and all(m == ident or not (pat.map_dims(m) & summed_dims) for m in maps[:-1])
    lead = [a for a, m in zip(ins, maps) if m == ident and isinstance(a.type, ir.RankedTensorType)
            and _static_shape(a) is not None and (w := _walk(a)) is not None
            and (params_only or _product_read_only_by(w[1], r0) or not pat.is_convolution(w[1]))]
    if not lead:
        return None
    joins = params_only or all(_product_read_only_by(_walk(a)[1], r0) for a in lead)
    blk = pat.body(r0)
    summed = combiners[0][1]
    prefix = [o for o in pat.body_ops(r0)[:-1]]
    shape_t = ir.RankedTensorType.get(_static_shape(lead[0]), ir.ShapedType(r0.results[0].type).element_type)
    with ir.InsertionPoint(r0):
        empty = tensor.EmptyOp(list(shape_t.shape), shape_t.element_type).result

        def body(args):
            mapping = _clone_body(prefix, [(blk.arguments[i], args[i]) for i in range(len(ins))])
            return [_mapped(mapping, summed)]
        summand = _generic(ins, [empty], maps[:-1] + [ident], ["parallel"] * n, body)
        total = _generic([summand.results[0]], [pat.outputs(r0)[0]], [ident, maps[-1]], its,
                         lambda a: [_f(comb, a[1], a[0])])
    return summand.operation, total.operation, joins


def _rounded(op, depth: int = 8) -> bool:
    """Whether the way from pointwise `op` back to its contraction rounds or widens a value."""
    if depth == 0 or not pat.is_pointwise(op):
        return False
    if any(o.name in ("arith.truncf", "arith.extf") for o in pat.body_ops(op)):
        return True
    for a in pat.inputs(op):
        if isinstance(a.type, ir.ShapedType) and not isinstance(a.owner, ir.Block) \
                and _rounded(pat.op_of(a.owner), depth - 1):
            return True
    return False


def _match(r0, replacing=None, siblings: bool = True) -> _Found | None:
    """The statistics `r0` starts, if its partials can come from a contraction's epilogue;
    `replacing`: the op r0 is built to replace (a whole-image pool), not another reader of x;
    `siblings`: whether a max asks if the other reductions of x get partials (not when asked by
    one of them: two maxes of one activation would ask each other forever)."""
    x = pat.inputs(r0)[0]
    x_shape = _static_shape(x)
    prefix = _sum_prefix(r0)
    extremum = _extremum(r0)  # a max or min is exact in any type: its partials keep x's
    if x_shape is None or (not _f32(x) and not prefix and not extremum):
        return None
    if extremum and read_with_result(r0, x):
        # max.dim's index search reads x with the max, or a sum that gets no partials (CBAM's
        # average pool at 14 x 14, chunks of 4) does: one kernel reads x for both
        return None
    walk = _walk(x)
    if walk is None:
        return None
    y, anchor, chain, views = walk
    y_shape = _static_shape(y)
    if y_shape is None or any(not _static_shape(r) for r in anchor.results):
        return None
    plan = _plan(anchor)
    out_map = pat.indexing_maps(anchor)[-1]
    loop_to_y = {}
    for j, e in enumerate(out_map.results):
        if isinstance(e, ir.AffineDimExpr):
            loop_to_y[e.position] = j
    # the rows reduced are the tile's M or its N (a convolution's batch x height x width is N)
    its = pat.iterator_types(r0)
    reduced = {i for i, t in enumerate(its) if t == "reduction"}
    atoms = [[(d, s, 1)] if s != 1 else [] for d, s in enumerate(y_shape)]
    for v in views:
        atoms = _view_atoms(v, atoms)
        if atoms is None:
            return None
    for cls in ("m", "n"):
        if plan.order[cls] and all(l in loop_to_y for l in plan.order[cls]):
            rows = _rows([loop_to_y[l] for l in plan.order[cls]], y_shape, atoms, reduced)
            if rows is not None:
                break
    else:
        return None
    y_m, xdims, L = rows
    if any(other != L for other in chunk_lengths(anchor)):
        return None  # one chunk length per kernel (codegen/contraction_stats.py): amax over W beside one over H x W
    if extremum and siblings and summed_whole_beside(r0, x, L, _sibling_match, replacing):
        return None
    if L & (L - 1) and not pat.is_convolution(anchor):
        # one chunk of all the rows is for a convolution's pixels per image; a linear layer's rows
        # summed whole (a bias gradient) are its weight gradient's operand sum (passes/fuse_operand_sums.py)
        return None
    m_set = set(y_m)
    if cls == "n" and not pat.is_convolution(anchor):
        # a norm over a linear layer's features (LayerNorm, RMSNorm): one tile holds a short row
        # (uniorch-fuse-row-stats), and a longer one is read once by a kernel that sums it and
        # normalises it in registers, which partials would only add to (BERT-base: +1.8 MB)
        return None
    # columns: x's column dims split y's, in y's order, outer factors first
    o_y = [d for d in range(len(y_shape)) if d not in m_set and y_shape[d] != 1]
    x_o = [xd for xd in xdims if xd[0] == "O"]
    pos = 0
    for d in o_y:
        part = []
        while pos < len(x_o) and x_o[pos][1] == d:
            part.append(x_o[pos])
            pos += 1
        if math.prod(p[2] for p in part) != y_shape[d]:
            return None
    if pos != len(x_o):
        return None
    for i in reduced:
        if xdims[i][0] == "M":
            return None
    for i, xd in enumerate(xdims):
        if xd[0] == "S" and i not in reduced:
            return None

    # the sums: x's readers are r0 and d = x - c; d's readers sum(d) and sum(d²)
    r0_maps = pat.indexing_maps(r0)
    dev = r1 = r2 = None
    x_users = {pat.op_of(u.owner) for u in x.uses}
    for u in x_users if not prefix and not extremum else ():
        if u == r0 or not pat.is_pointwise(u) or pat.num_inputs(u) != 2:
            continue
        if _body_names(u) != ["arith.subf"] or pat.inputs(u)[0] != x:
            continue
        sub = pat.body_ops(u)[0]
        args = pat.body(u).arguments
        if sub.operands[0] != args[0] or sub.operands[1] != args[1]:
            continue
        if pat.indexing_maps(u)[0] != r0_maps[0] or not _kept_only(pat.indexing_maps(u)[1], xdims, reduced):
            continue
        dev = u
    if dev is not None:
        for use in dev.results[0].uses:
            u = pat.op_of(use.owner)
            if pat.indexing_maps(u) == r0_maps and _plain_sum(u) and r1 is None:
                r1 = u
            elif pat.indexing_maps(u) == r0_maps and _sum_of_square(u) and r2 is None:
                r2 = u
            else:
                return None  # d read by anything else
        if r2 is None or pat.iterator_types(r2) != its or (r1 is not None and pat.iterator_types(r1) != its):
            return None
    # fewer bytes only: 4-byte partials (one or two per chunk and column), written and read, against
    # the activation read they replace, in its narrowest stored type (a bf16 conv output)
    stored = [x, y] + [pat.inputs(o)[0] for o in chain]
    size = min(ir.ShapedType(v.type).element_type.width // 8 for v in stored)
    part = ir.ShapedType(x.type).element_type.width // 8 if extremum else 4
    if 2 * part * (2 if r2 is not None else 1) >= L * size:
        return None
    if not _kept_only(r0_maps[1], xdims, reduced):
        return None

    return _Found(r0, dev, r1, r2, y, chain, views, y_m, L, xdims, o_y, extremum or "arith.addf")


def _rows(y_m: list, y_shape: list, atoms: list, reduced: set):
    """(y_m, x dims' roles, L) when x's dims reduce the innermost of the tile dims `y_m` (a suffix
    of their order, each whole) and keep the outer ones whole; else None."""
    m_set = set(y_m)
    xdims: list = []
    for i, al in enumerate(atoms):
        if not al:
            xdims.append(("U",))
            continue
        rows = {a[0] in m_set for a in al}
        if rows == {True}:
            if any(a[2] != 1 or a[1] != y_shape[a[0]] for a in al):
                return None  # a row dim split
            if i in reduced:
                xdims.append(("S", [a[0] for a in al]))
            elif len(al) == 1:
                xdims.append(("M", al[0][0]))
            else:
                return None
        elif rows == {False} and len(al) == 1:
            xdims.append(("O", al[0][0], al[0][1]))
        else:
            return None
    nonunit_m = [d for d in y_m if y_shape[d] != 1]
    red_m = [d for xd in xdims if xd[0] == "S" for d in xd[1]]
    kept_m = [xd[1] for xd in xdims if xd[0] == "M"]
    k = len(nonunit_m) - len(red_m)
    if not red_m or sorted(red_m) != sorted(nonunit_m[k:]) or kept_m != nonunit_m[:k]:
        return None
    suffix = math.prod(y_shape[d] for d in red_m)
    L = min(MAX_CHUNK, suffix & -suffix)
    if L < 16 and suffix <= MAX_WHOLE_CHUNK:
        L = suffix
    return y_m, xdims, L


def _kept_only(m: ir.AffineMap, xdims: list, reduced: set) -> bool:
    """`m` (over x's dims) reads only dims that survive in the merge: no reduced row dims."""
    for e in m.results:
        if isinstance(e, ir.AffineDimExpr):
            if xdims[e.position][0] == "S":
                return False  # (a reduced unit dim reads index 0 wherever it is read: moved_map)
        elif not isinstance(e, ir.AffineConstantExpr):
            return False
    return True


# ---------------------------------------------------------------- rewriting


def _inline(chain: list, v: ir.Value) -> ir.Value:
    """The pointwise ops `chain` applied to the element `v` (inside the generic being built)."""
    for op in chain:
        v = _mapped(_clone_body(pat.body_ops(op), pat.body(op).arguments[0], v), pat.yield_op(op).operands[0])
    return v


def _summand(r0, v: ir.Value) -> ir.Value:
    """What `r0`'s body adds up (or takes the max of), for the element `v`: its ops before the
    combiner cloned here."""
    mapping = _clone_body(_prefix(r0, ("arith.addf",) + tuple(EXTREMA)), pat.body(r0).arguments[0], v)
    return _mapped(mapping, pat.reduction_combiners(r0)[0][1])


def _f(name: str, *args):
    return ir.Operation.create(name, results=[args[0].type], operands=list(args)).results[0]


def _cst(v: float):
    f32 = ir.F32Type.get()
    return ir.Operation.create("arith.constant", results=[f32], attributes={"value": ir.FloatAttr.get(f32, v)}).results[0]


def _rewrite(f: _Found):
    f32 = ir.F32Type.get()
    y_shape = _static_shape(f.y)
    rank = len(y_shape)
    L = f.L
    m_all = f.y_m
    P = math.prod(y_shape[d] for d in m_all) // L
    part_map = chunk_map(y_shape, m_all, f.o_y, L)
    ident = ir.AffineMap.get_identity(rank)
    y_its = ["reduction" if d in set(m_all) else "parallel" for d in range(rank)]
    summing = f.comb == "arith.addf"
    part_elem = f32 if summing else ir.ShapedType(pat.inputs(f.r0)[0].type).element_type
    part_t = ir.RankedTensorType.get([P] + [y_shape[d] for d in f.o_y], part_elem)
    tile_attr = {TILE_STAT: _i64(L)}

    with ir.InsertionPoint(f.r0):
        if summing:
            S = _generic([f.y], [_zeros(part_t)], [ident, part_map], y_its,
                         lambda a: [_f("arith.addf", a[1], _summand(f.r0, _inline(f.chain, a[0])))], tile_attr)
        else:  # a chunk's max (min), from -inf (inf); the merge starts from r0's own init
            S = _generic([f.y], [_zeros(part_t, EXTREMA[f.comb])], [ident, part_map], y_its,
                         lambda a: [_f(f.comb, a[1], _summand(f.r0, _inline(f.chain, a[0])))], tile_attr)
        S = S.results[0]
        Q = None
        if f.r2 is not None:
            z2 = _zeros(part_t)

            def m2(a):
                mean = _f("arith.mulf", a[1], _cst(1.0 / L))
                d = _f("arith.subf", _inline(f.chain, a[0]), mean)
                return [_f("arith.addf", a[2], _f("arith.mulf", d, d))]
            Q = _generic([f.y, S], [z2], [ident, part_map, part_map], y_its, m2, tile_attr).results[0]

        # the partials as the merge reads them: [kept rows..., chunks of the reduced rows, x's columns...]
        kept = [xd[1] for xd in f.xdims if xd[0] == "M"]
        x_o = [(i, xd) for i, xd in enumerate(f.xdims) if xd[0] == "O"]
        e_shape = [y_shape[d] for d in kept] + [P // max(1, math.prod(y_shape[d] for d in kept))]
        groups = [list(range(len(e_shape)))]
        for d in f.o_y:
            parts = [xd for _, xd in x_o if xd[1] == d]
            groups.append(list(range(len(e_shape), len(e_shape) + len(parts))))
            e_shape += [xd[2] for xd in parts]

        def view(t):
            if e_shape == list(part_t.shape):
                return t
            et = ir.RankedTensorType.get(e_shape, part_elem)
            return tensor.ExpandShapeOp(et, t, _reassociation(groups), [], e_shape).result
        ES = view(S)
        EQ = view(Q) if Q is not None else None

    # the merge's loops: x's dims, the reduced rows replaced by one chunk loop
    r0_its = pat.iterator_types(f.r0)
    x_shape = _static_shape(pat.inputs(f.r0)[0])
    pos: dict[int, int] = {}
    loops: list = []  # (size, iterator)
    jpos = None
    for i, xd in enumerate(f.xdims):
        if xd[0] == "S":
            if jpos is None:
                jpos = len(loops)
                loops.append((e_shape[len(kept)], "reduction"))
            continue
        if xd[0] == "U" and r0_its[i] == "reduction":
            continue
        pos[i] = len(loops)
        loops.append((x_shape[i], r0_its[i]))
    n = len(loops)
    ld = [ir.AffineDimExpr.get(i) for i in range(n)]
    e_res = [ld[pos[next(i for i, xd in enumerate(f.xdims) if xd[0] == "M" and xd[1] == d)]] for d in kept]
    e_res.append(ld[jpos])
    e_res += [ld[pos[i]] for i, _ in x_o]
    e_map = ir.AffineMap.get(n, 0, e_res)

    def moved_map(m: ir.AffineMap) -> ir.AffineMap:
        # a reduced unit dim has no loop here: it is index 0 (GroupNorm's mean of one channel
        # per group, read back at that unit dim)
        res = [(ld[pos[e.position]] if e.position in pos else ir.AffineConstantExpr.get(0))
               if isinstance(e, ir.AffineDimExpr) else e for e in m.results]
        return ir.AffineMap.get(n, 0, res)

    its = [t for _, t in loops]
    out_map = moved_map(pat.indexing_maps(f.r0)[1])

    def replace(old, new_op):
        old.results[0].replace_all_uses_with(new_op.results[0])
        old.erase()

    with ir.InsertionPoint(f.r0):
        new0 = _generic([ES], [pat.outputs(f.r0)[0]], [e_map, out_map], its,
                        lambda a: [_f(f.comb, a[1], a[0])])
    replace(f.r0, new0)
    new0 = new0.operation
    if f.dev is not None:
        c = pat.inputs(f.dev)[1]  # d = x - c
        c_map = moved_map(pat.indexing_maps(f.dev)[1])
        if f.r1 is not None:
            with ir.InsertionPoint(f.r1):
                new1 = _generic([ES, c], [pat.outputs(f.r1)[0]], [e_map, c_map, out_map], its,
                                lambda a: [_f("arith.addf", a[2], _f("arith.subf", a[0], _f("arith.mulf", a[1], _cst(float(L)))))])
            replace(f.r1, new1)

        def m2(a):
            t = _f("arith.subf", _f("arith.mulf", a[0], _cst(1.0 / L)), a[2])
            w = _f("arith.addf", a[1], _f("arith.mulf", _f("arith.mulf", t, t), _cst(float(L))))
            return [_f("arith.addf", a[3], w)]
        with ir.InsertionPoint(f.r2):
            new2 = _generic([ES, EQ, c], [pat.outputs(f.r2)[0]], [e_map, e_map, c_map, out_map], its, m2)
        replace(f.r2, new2)
        if not list(f.dev.results[0].uses):
            f.dev.erase()
    for o in reversed(f.views + f.chain):
        if not list(o.results[0].uses):
            o.erase()
    return new0


def chunk_map(y_shape: list, y_m: list, o_y: list, L: int) -> ir.AffineMap:
    """The partials' map over y's dims: (flat row // L, y's columns...), the rows `y_m` flattened
    outer to inner as the contraction's tiles flatten M (codegen/contraction_stats.py checks it)."""
    rank = len(y_shape)
    dims = [ir.AffineDimExpr.get(i) for i in range(rank)]
    flat, stride = None, 1
    for d in reversed(y_m):
        term = dims[d] * stride if stride != 1 else dims[d]
        flat = term if flat is None else term + flat
        stride *= y_shape[d]
    chunk = ir.AffineFloorDivExpr.get(flat, ir.AffineConstantExpr.get(L))
    return ir.AffineMap.get(rank, 0, [chunk] + [dims[d] for d in o_y])


__all__ = ["tile_stats", "TILE_STAT", "MAX_CHUNK", "MAX_WHOLE_CHUNK", "chunk_map"]
