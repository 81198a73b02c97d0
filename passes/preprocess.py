"""Normalises the linalg graph for fusion (docs/kernels.md §1), with upstream passes only.

Elementwise fusion runs while matmul and convolution are still named ops, so no producer is fused
*into* a contraction (it would be recomputed for every output element); only afterwards is every
named op generalised, so fusion and codegen see one op kind, `linalg.generic`. Then uniorch's own
rewrites undo what would hide a fusion opportunity (symbolic_reshapes, gather_casts, compose_gathers, extract_operands,
split_prologue, sink_collapse, view_rewrites, pad_views, concat_pieces, stack_pieces, epilogue_views, scatter_coords),
returned transposes that eager returns as views become views (returned_views),
compare in the type the values have (narrow_compares), and take a norm's statistics of a
convolution's output from partial sums its epilogue writes (tile_stats).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from uniorch.ir.special import erase_dead_special_generics
from uniorch.ir.stages import run_pipeline_text

from uniorch.codegen import patterns as pat

from .base import Pass, PassContext
from .ir_utils import main_func
from .collapse_contraction import collapse_into_contractions
from .compose_gathers import compose_gathers
from .concat_pieces import hoist_concat_pieces
from .constant_casts import fold_constant_casts
from .epilogue_views import merge_epilogue_dims
from .extract_operands import extracts_as_operands
from .gather_casts import extract_before_casts
from .narrow_compares import narrow_compares
from .narrow_stores import narrow_stores, sink_widenings
from .pad_views import pad_after_collapse
from .returned_views import returned_permutes_as_views, returned_values_as_views_of_their_copies
from .pool_indices import fix_pool_nan_indices
from .scatter_coords import assemble_scatter_coords
from .seed_input import seeds_as_input
from .sink_collapse import bubble_expands, sink_collapses
from .split_products import split_sliced_products
from .split_reduction import split_reductions
from .split_prologue import split_prologues
from .stack_pieces import stacks_as_selects
from .symbolic_reshapes import fold_symbolic_reshapes
from .plain_reductions import merge_extrema
from .tile_stats import tile_stats
from .view_rewrites import rewrite_views

# resolve-ranked-shaped-type-result-dims: a `tensor.dim` of an op's result (symbolic sizes) becomes
# the dim of the operand it comes from, so sizes never read a kernel's result and fusion sees only
# real readers
# convert-elementwise-to-linalg: arith and math ops on whole tensors (MLIR written by hand for
# uniorch-opt; torch-mlir's lowering never leaves them) become linalg.generic; left as they were,
# no kernel computed them and --emit triton printed nothing
PIPELINE = ("builtin.module(func.func(convert-elementwise-to-linalg), func.func(linalg-fuse-elementwise-ops),"
            " linalg-generalize-named-ops,"
            " func.func(resolve-ranked-shaped-type-result-dims), canonicalize, cse)")


@dataclass(frozen=True)
class Preprocess(Pass):
    name = "uniorch-preprocess"
    summary = "upstream elementwise fusion, then generalise named ops: fusion-ready linalg"

    def run(self, module, pctx: PassContext) -> None:
        with module.context, ir.Location.unknown(module.context):
            seeds_as_input(module, main_func(module))  # kernels take the random keys as a tensor
            fold_constant_casts(main_func(module))  # arange's float step: a constant, not a kernel argument
            fix_pool_nan_indices(main_func(module))  # before fusion moves ops into its body
            fold_symbolic_reshapes(main_func(module), merges=False)  # a reshape back to a tensor's own dims is it
        run_pipeline_text(module, PIPELINE, self.name)
        main = main_func(module)
        with module.context:
            erase_dead_special_generics(main)  # fusion's leftovers MLIR keeps (calls are not pure)
            erase_checks(main)  # batch norm's variance checks: no rewrite below should see them as readers
            fold_symbolic_reshapes(main)  # elementwise fusion's reshape folding leaves pairs too
            extract_before_casts(main)  # a gather from a widened 16-bit tensor reads the 16 bits
            compose_gathers(main)  # a gather of a gather (reflect pad: one per dim) reads the source
            assemble_scatter_coords(main)  # a scatter's indices written once, not column by column
            extracts_as_operands(main)  # symbolic broadcasts read by tensor.extract: indexing maps
            split_sliced_products(main)  # q, k and v sliced off one product: a product each, before their views sink
            split_prologues(main)
            collapse_into_contractions(main)  # Swin's window scores: q·kᵀ over the collapsed dims
            sink_collapses(main)  # grouped-query attention keeps one batch layout
            rewrite_views(main)
            split_sliced_products(main)  # a fused q/k/v read in slices: a product per slice
            pad_after_collapse(main)  # pads meet the convolutions that read them
            stacks_as_selects(main)  # stack of computed pieces: one generic, no copy
            hoist_concat_pieces(main)  # rotate_half's negation moves after its concatenation
            bubble_expands(main)  # ... and a view of rotate_half(q) moves back to q
            merge_epilogue_dims(main)  # a bias add read through a head-split view: back on the matmul's dims
            split_reductions(main)  # a weight gradient's long sum over the batch: partials, then their sum
            narrow_compares(main)
            narrow_stores(main)  # a 16-bit value leaves its kernel in 16 bits
            extract_before_casts(main)  # ... and a gather of a widening split off there reads it so
            merge_extrema(main)  # amax over (H, W): one reduction, not one per dim
            tile_stats(main)  # a norm's statistics of a convolution's output: partials in its epilogue
            sink_widenings(main)  # a widening read through reshapes: each reader widens the 16 bits
            returned_permutes_as_views(main)  # q, k and v saved for the backward: eager's views, no copy
            returned_values_as_views_of_their_copies(main)  # SDPA's output, saved also as its transpose


def erase_checks(func_op: ir.Operation) -> None:
    """Zero-result generics that only `cf.assert` (torch-mlir's check that batch norm's variance
    is nonzero, which elementwise fusion clones next to every op it fused it with, reading whole
    activations). Kernels cannot raise, and fusion would erase them; erased here, a convolution
    read by BatchNorm and a channel shuffle's view has one reader, and the view moves onto it."""
    for op in [o.operation for o in func_op.regions[0].blocks[0].operations]:
        if pat.is_assert_only(op):
            op.erase()
