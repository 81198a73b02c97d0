"""uniorch-fuse, the factor side of a contraction: what a convolution or matmul computes in its
factor tiles instead of reading from memory (a constant pad as masked loads, concatenated pieces,
a transposed convolution's zero-stuffed input, and pointwise prologues: BatchNorm + ReLU before a
conv, a LayerNorm's normalise before a linear layer). Mixed into passes/fuse.py's `_Fusion`."""
from __future__ import annotations

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.softmax_match import match_softmax
from uniorch.ir import dims

from .fuse_common import (
    _IN_KERNEL, MATMUL_PROLOGUE_MAX_N, PROLOGUE_MAX_FILTERS, _Group, _moves_or_widens, _static, _widens,
)
from .pad_views import pad_value
from .plan_memory import nbytes


def _pure_gather(x: ir.Operation) -> bool:
    """x's body is index arithmetic and one `tensor.extract`, whose value it yields."""
    from .compose_gathers import CHEAP

    ops = [o.operation for o in pat.body(x).operations]
    extracts = [o for o in ops if o.name == "tensor.extract"]
    return (len(extracts) == 1 and all(o.name in CHEAP for o in ops) and len(x.results) == 1
            and ops[-1].operands[0] == extracts[0].results[0])


def _numel(t):
    return dims.prod(list(ir.RankedTensorType(t).shape))


class FactorJoins:
    def try_join_pad(self, g: _Group, x: ir.Operation, role: str) -> bool:
        """A constant-value pad read only by a convolution's input joins its contraction kernel: the
        kernel loads the unpadded tensor with the bounds as a mask (no padded copy in memory).
        Likewise a pad read only by a reduction or pointwise kernel (a pooling window over a padded
        input) of a tensor computed elsewhere."""
        if role != "producer" or not _static(x) or pad_value(x) is None:
            return False
        if g.kind in ("reduction", "pointwise"):
            return len(x.operands) == 1 and self.join_as_loads(g, x)
        if g.kind != "contraction":
            return False
        n_in = pat.num_inputs(g.anchor)
        users = [(pat.op_of(u.owner), u.operand_number) for u in x.results[0].uses]
        if not users or any(o != g.anchor or i >= n_in for o, i in users):
            return False
        if self.creates_cycle(g, x):
            return False
        return self._adopt(g, x)

    def join_as_loads(self, g: _Group, x: ir.Operation) -> bool:
        """A pad or concatenation of tensors computed elsewhere joins a reduction or pointwise
        kernel as masked loads of those tensors (codegen/generic_emit.py padded, concatenated)."""
        members = set(g.ops)
        if any(not isinstance(v.owner, ir.Block) and self.top(v.owner) in members for v in x.operands):
            return False
        if any(not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name in _IN_KERNEL for v in x.operands):
            return False  # a constant would be built inside the kernel, not read from memory
        if self.feeds_loads(g, x):
            return False  # a concat of a concat: the inner one would be computed, not in memory
        if any(self.top(u.owner) in members and pat.op_of(u.owner) != self.top(u.owner) for u in x.results[0].uses):
            return False  # gathered from (a pooling's indices): a gather reads the tensor itself
        if all(self.top(u.owner) in members for u in x.results[0].uses):
            return False if self.creates_cycle(g, x) else self._adopt(g, x)
        # read elsewhere too (two poolings of one padded input): this kernel gets its own copy of
        # the op, which costs nothing here, and the original keeps its other readers; only the
        # copy's paths count (the original's other readers may lead back into this kernel)
        y, redirected = self.clone_for(members, x)
        if self.creates_cycle(g, y):
            self.undo_clone(x, y, redirected)
            return False
        return self._adopt(g, y)

    def try_join_concat(self, g: _Group, x: ir.Operation, role: str) -> bool:
        """A concatenation read only inside a contraction's kernel (its factors, directly or through
        their pad, prologue or widening cast) joins it: each piece is loaded where the index falls in it (masked loads),
        and the concatenated tensor is never written (DenseNet's growing input, a UNet's skip
        connection)."""
        if role != "producer" or not _static(x):
            return False
        dim = ir.IntegerAttr(x.attributes["dim"]).value
        if any(ir.RankedTensorType(v.type).shape[dim] < 0 for v in x.operands):
            return False  # pieces at symbolic offsets: a copy kernel of its own writes it
        if g.kind in ("reduction", "pointwise"):
            return self.join_as_loads(g, x)
        if g.kind != "contraction":
            return False
        members = set(g.ops)
        users = [pat.op_of(u.owner) for u in x.results[0].uses]
        if users and all(o != g.anchor and o not in g.prologue for o in users) and any(o in members for o in users):
            # read by the epilogue (ViT's CLS token and patches, plus positions, for the residual):
            # masked loads of the pieces, as a pointwise kernel reads them; other readers keep theirs
            return self.join_as_loads(g, x)
        if not users or any(o not in members for o in users):
            return False  # read outside the kernel too: written once by a copy kernel
        if self.creates_cycle(g, x):
            return False
        return self._adopt(g, x)

    def feeds_stuffed_source(self, g: _Group, x: ir.Operation) -> bool:
        """Whether x computes the source of a zero-stuffed insert_slice in g: the kernel loads that
        source from memory on the slice's lattice, so it cannot be computed in the same kernel."""
        members = set(g.ops)
        return any(pat.op_of(u.owner) in members and pat.op_of(u.owner).name == "tensor.insert_slice"
                   and u.operand_number == 0 for r in x.results for u in r.uses)

    def try_join_stuffed(self, g: _Group, x: ir.Operation, role: str) -> bool:
        """A static insert_slice of a tensor computed elsewhere into a fill, read only by a
        convolution's input (a transposed convolution's zero-stuffed input), joins its kernel: the
        kernel loads the source where the index lies on the slice's lattice and the fill elsewhere,
        so the stuffed buffer is never written. The fill comes along as a producer."""
        if g.kind != "contraction" or role != "producer" or not _static(x) or len(x.operands) != 2:
            return False
        src, dest = x.operands
        if not isinstance(src.owner, ir.Block) and self.top(src.owner) in set(g.ops):
            return False
        if isinstance(dest.owner, ir.Block) or not pat.is_fill(pat.op_of(dest.owner)):
            return False
        if ir.RankedTensorType(src.type).rank != ir.RankedTensorType(dest.type).rank:
            return False  # rank-reducing
        n_in = pat.num_inputs(g.anchor)
        users = [(pat.op_of(u.owner), u.operand_number) for u in x.results[0].uses]
        if not users or any(o != g.anchor or i >= n_in for o, i in users):
            return False
        fill = pat.op_of(dest.owner)
        if fill not in self.group_of and any(pat.op_of(u.owner) != x for u in dest.uses):
            # one zero buffer shared by several pads (a backward pass's input-gradient
            # convolutions, which torch-mlir writes as insert_slices into one CSE'd fill): each
            # takes a copy of the fill, a constant in its kernel, so no buffer is written and read
            shared = fill
            fill, moved = self.clone_for({x}, fill)
            if self.creates_cycle(g, x, [fill]):
                self.undo_clone(shared, fill, moved)
                return False
        alone = fill not in self.group_of and all(pat.op_of(u.owner) == x for u in fill.results[0].uses)
        if self.creates_cycle(g, x, [fill] if alone else []):
            return False
        if alone:  # the fill is read only here: a constant in the kernel, not a buffer
            self._adopt(g, fill)
        return self._adopt(g, x)

    def try_join_prologue(self, g: _Group, x: ir.Operation) -> bool:
        """A pointwise producer read only by a convolution's or matmul's factor side (directly,
        through a pad, or through other such producers) is evaluated in the kernel's factor tiles
        (BatchNorm + ReLU before a DenseNet conv, GroupNorm's normalise + SiLU before a UNet conv,
        LayerNorm's or RMSNorm's normalise before a linear layer): its result never goes to memory.
        A convolution takes one while its filters fit one tile (`PROLOGUE_MAX_FILTERS`), so each
        element is computed for one tile of output channels; a matmul while its columns fit a few
        (`MATMUL_PROLOGUE_MAX_N`). A cheap producer also read elsewhere (the widening of a 16-bit
        input that the norm's statistics read too) is cloned into the prologue."""
        a = g.anchor
        conv = pat.is_convolution(a)
        if not (conv or pat.is_contraction(a)) or not pat.is_pointwise(x) or not _static(x):
            return False
        limit = PROLOGUE_MAX_FILTERS if conv else MATMUL_PROLOGUE_MAX_N
        if not conv and _feeds_product(a):
            # what uniorch-fuse-chain makes one kernel of: a chain loops over the hidden columns in
            # one program per row tile, which computes the prologue once (ConvNeXt's 96 channels,
            # LayerNorm'd into 384)
            limit = CHAIN_PROLOGUE_MAX_N
        if not conv:
            if _moves_or_widens(x) and any(pat.op_of(u.owner) == a for r in x.results for u in r.uses):
                return False  # a transposed or widened factor: read in place (`admissible`)
            if match_softmax(x.results[0], lambda o: o not in self.group_of) is not None:
                return False  # attention's probabilities: uniorch-fuse-attention takes the softmax whole
            if not self._prologue_pays(g, x):
                return False
        # a pure gather (a transposed convolution's flipped filters) computes nothing: each tile
        # that reads it only loads at other addresses, however many tiles share an element
        moves = _pure_gather(x)
        members = set(g.ops)
        # a gather (upsampling, a reflect pad) is loaded where the factor tile needs it, from memory:
        # never from a value this kernel computes, and nothing it gathers from may join it later
        if self.gathers_computed(g, x):
            return False
        n_in = pat.num_inputs(a)
        inside = outside = 0
        for r in x.results:
            for u in r.uses:
                o = pat.op_of(u.owner)
                if o not in members:
                    outside += 1
                    continue
                inside += 1
                if o == a and (u.operand_number >= n_in or not (
                        moves or self._fits(self._filters(a, u.operand_number), limit))):
                    return False
                if o != a and o.name not in ("tensor.pad", "tensor.concat") and o not in g.prologue \
                        and not (not conv and self._factor_view(g, o, limit)):
                    return False
        if not inside or (outside and not (pat.is_cheap(x) or (not conv and self._factor_of_matmuls(x))
                                           or (conv and self._input_of_convs(x)))):
            return False
        if any(o.name in ("tensor.pad", "tensor.concat") and not self._fits(self._filters(a, 0), PROLOGUE_MAX_FILTERS)
               for o in g.ops):
            return False
        if outside:  # a clone for the prologue; the original stays with its other readers
            y, redirected = self.clone_for(members, x)
            if self.creates_cycle(g, y):
                self.undo_clone(x, y, redirected)
                return False
            x = y
        elif self.creates_cycle(g, x):
            return False
        g.prologue.add(x)
        return self._adopt(g, x)

    def _factor_of_matmuls(self, x: ir.Operation) -> bool:
        """Every reader of x is a matmul's factor (directly or through a widening): a pre-norm's
        output read by the query, key and value projections. Each takes its own copy as a
        prologue, a few flops per element against the 2·N of its dot, and the normalised
        activation is never written."""
        def factor(u) -> bool:
            o = pat.op_of(u.owner)
            if pat.is_contraction(o):
                return u.operand_number < pat.num_inputs(o)
            return _widens(o) and all(factor(w) for r in o.results for w in r.uses)
        uses = [u for r in x.results for u in r.uses]
        return bool(uses) and all(factor(u) for u in uses) and all(self._in_memory(v, x) for v in list(x.operands)[:pat.num_inputs(x)])

    def _input_of_convs(self, x: ir.Operation) -> bool:
        """Every reader of x is a convolution's input, directly or through its padding or a
        concatenation of its input, or a reduction such as a pooling (a UNet block's GroupNorm +
        SiLU read by the downsampling convolution or max-pool and, through the skip
        concatenation, by a decoder's convolution). Each convolution takes its own copy as a
        prologue, as a single reader would, a reduction's kernel takes x as its producer once
        it is the last reader, and x is never written: its readers load the convolution output
        it is computed from instead, as many bytes."""
        def conv_input(u) -> bool:
            o = pat.op_of(u.owner)
            if pat.is_convolution(o):
                return u.operand_number == 0
            if pat.is_reduction(o) and not pat.is_contraction(o):
                return True
            if o.name in ("tensor.pad", "tensor.concat"):
                return all(conv_input(w) for w in o.results[0].uses)
            return False
        uses = [u for r in x.results for u in r.uses]
        return bool(uses) and all(conv_input(u) for u in uses) \
            and all(self._in_memory(v, x) for v in list(x.operands)[:pat.num_inputs(x)])

    def _in_memory(self, v, x: ir.Operation) -> bool:
        """v, read by x, is an argument, a small tensor (statistics), or a kernel's result already
        (its op grouped), or a widening of one: copies of x would each read it, not recompute it
        from its pieces (ViT's patch embedding plus positions before its first norm)."""
        if isinstance(v.owner, ir.Block) or not isinstance(v.type, ir.RankedTensorType):
            return True
        if 4 * _numel(v.type) <= _numel(x.results[0].type):
            return True
        p = pat.op_of(v.owner)
        if _widens(p):  # a 16-bit tensor widened on load
            return self._in_memory(p.operands[0], x)
        if any(isinstance(c.type, ir.ShapedType) for c in pat.captured_values(p)):
            return True  # a gather (an embedding lookup): never a prologue, so a kernel writes it
        return self.top(p) in self.group_of

    @staticmethod
    def _prologue_pays(g: _Group, x: ir.Operation) -> bool:
        """x's result (which would be written and read again) is at least twice the small tensors
        broadcast into it from other kernels (a norm's per-row statistics, which those kernels
        write instead): not so for rows of a few 16-bit elements normalised with three f32
        statistics. Small: a quarter of the result's elements or fewer (not a grouped-query
        repeat of k before its rotary embedding)."""
        out, n_out = nbytes(x.results[0].type), _numel(x.results[0].type)
        side = 0
        for v in list(x.operands)[:pat.num_inputs(x)]:
            if isinstance(v.owner, ir.Block) or not isinstance(v.type, ir.RankedTensorType):
                continue
            if pat.op_of(v.owner) not in g.ops and 4 * _numel(v.type) <= n_out:
                side += nbytes(v.type)
        return 2 * side <= out

    @staticmethod
    def _fits(n, limit: int) -> bool:
        return isinstance(n, int) and n <= limit  # a symbolic count may be any size

    def _factor_view(self, g: _Group, o: ir.Operation, limit: int) -> bool:
        """o moves or widens a value for g's anchor and feeds nothing but its factors (attention's
        kᵀ, a 16-bit factor widened): what o reads is computed in the factor tiles as if the anchor
        read it directly, within the same recompute limit."""
        if not _moves_or_widens(o) or not self._feeds_factor_only(g, o):
            return False
        return all(self._fits(self._filters(g.anchor, u.operand_number), limit) for r in o.results for u in r.uses)

    @staticmethod
    def _feeds_factor_only(g: _Group, w: ir.Operation) -> bool:
        """w (a widening of a 16-bit prologue's result) is read by g's anchor as a factor only."""
        uses = [u for r in w.results for u in r.uses]
        return bool(uses) and all(pat.op_of(u.owner) == g.anchor and u.operand_number < pat.num_inputs(g.anchor)
                                  for u in uses)

    @staticmethod
    def _filters(conv, i: int) -> int:
        """How many output elements share each element of input i: the parallel loops it does not
        index (a convolution's output channels per group, for its image input)."""
        used = pat.map_dims(pat.indexing_maps(conv)[i])
        n = 1
        for d, (it, size) in enumerate(zip(pat.iterator_types(conv), pat.loop_sizes(conv))):
            if it == "parallel" and d not in used:
                n *= size
        return n


# a chain's widths (codegen/attention_plan.py MAX_HEAD_DIM, passes/fuse_chain.py MAX_HIDDEN)
CHAIN_PROLOGUE_MAX_N, _CHAIN_MAX_WIDTH = 4096, 256


def _feeds_product(a: ir.Operation) -> bool:
    """Matmul `a` (its A rows at most a chain's width) has one result whose one reader, through
    one-reader pointwise ops, is another matmul's input: the first product of a chain."""
    from uniorch.codegen.attention_plan import _plan

    k = _plan(a).K
    if not isinstance(k, int) or k > _CHAIN_MAX_WIDTH or len(a.results) != 1:
        return False
    v = a.results[0]
    for _ in range(16):
        uses = list(v.uses)
        if len(uses) != 1:
            return False
        o = pat.op_of(uses[0].owner)
        if pat.is_contraction(o):
            return uses[0].operand_number < pat.num_inputs(o)
        if not pat.is_pointwise(o) or len(o.results) != 1:
            return False
        v = o.results[0]
    return False
