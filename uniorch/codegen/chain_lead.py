"""A chain's lead product (passes/fuse_chain.py marks it `uniorch.chain_lead`): the contraction
whose epilogue computes the chain's input row `x`, such as BERT's attention out-projection with
its bias, residual and LayerNorm, or ViT's out-projection with its residual.

The chain kernel (attention.py, chain mode) holds x's row tile whole already. With a lead it
computes that tile itself, once per row tile before the hidden loop,

    x = epilogue_0(a · W0)      (a K0 loop over tiles of BLOCK_L)

so x is neither stored nor read back, and every read of x in the chain (the hidden product's
A side and its prologue, the residual of the output's epilogue) takes the register tile. That
tile's columns are x's full width, so x must be one output dim of at most MAX_HEAD_DIM columns,
the hidden product's K, and its rows the chain's rows in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from .attention_plan import MAX_HEAD_DIM, _plan, _role_of, _roles, differing_rows, score_chain
from .contraction_ir import _as_op, _elem, _shape
from .contraction_plan import _get, _known, _Plan, epilogue_layouts
from .source import CodegenError

LEAD, LEAD_VALUE = "uniorch.chain_lead", "uniorch.chain_lead_value"


@dataclass
class Lead:
    plan: _Plan      # the lead product; results = [x]
    x: object        # the value of its epilogue the chain reads
    roles: tuple     # x's dims as roles of the lead's loops ("m"/"b" by position, "key" its columns)

    @property
    def ty(self) -> str:
        return _elem(self.x)

    def read_at(self, p: _Plan, idx: tuple, key_class: str) -> bool:
        """Whether a part with plan `p` reads x at the positions of the held tile: rows as the
        chain's, columns along its `key_class` dim, of x's width."""
        keys = p.order[key_class]
        if len(keys) != 1 or p.sizes[keys[0]] != self.plan.N:
            return False
        roles = _roles(p, key_class)
        return tuple(_role_of(lin, roles) for lin in idx) == self.roles


def lead_of(ops, p1: _Plan) -> Lead | None:
    """The lead of the chain whose hidden product is planned as `p1` (func, name and args set), or
    None; CodegenError where the marked lead cannot be held."""
    leads = [o for o in ops if LEAD in o.attributes]
    if not leads:
        return None
    if len(leads) > 1:
        raise CodegenError(p1.func, "a chain with more than one lead product")
    x_ops = [o for o in ops if LEAD_VALUE in o.attributes]
    if len(x_ops) != 1:
        raise CodegenError(p1.func, "a chain lead with no value marked for the chain")
    x = x_ops[0].results[ir.IntegerAttr(x_ops[0].attributes[LEAD_VALUE]).value]
    return analyze_lead(leads[0], x, p1, ops)


def analyze_lead(c0, x, p1: _Plan, ops) -> Lead:
    c0 = _as_op(c0)
    p0 = _plan(c0, p1.func, p1.name, p1.args, [x])
    if len(p0.order["n"]) != 1 or not isinstance(p0.N, int) or p0.N > MAX_HEAD_DIM:
        raise CodegenError(c0, f"a chain lead's output is held whole: one dim of at most {MAX_HEAD_DIM} columns")
    if len(p1.order["k"]) != 1 or p1.K != p0.N:
        raise CodegenError(c0, f"the chain's input width {p1.K} is not its lead's {p0.N}")
    rows = differing_rows(p0, p1)
    if rows is not None:
        what = "batch" if rows[0] == "batch" else "row"
        raise CodegenError(c0, f"the lead's {what} dims {rows[1]} are not the chain's {rows[2]}")
    p0.layouts = epilogue_layouts(p0, score_chain(c0, x, ops))
    if p0.window is not None or p0.siblings or p0.tile_stats:
        raise CodegenError(c0, "a chain lead with a pooling, sibling products or tile statistics")
    if not _known(p0.layouts, x):
        raise CodegenError(c0, "the chain's input is not computed over its lead's output")
    roles = tuple(_role_of(lin, _roles(p0, "n")) for lin in _get(p0.layouts, x))
    if any(r is None or r[0] not in ("b", "m", "key") for r in roles) or roles.count(("key", 0)) != 1 \
            or len(roles) != len(_shape(x)):
        raise CodegenError(c0, "the chain's input is not its lead's output tile, element for element")
    return Lead(p0, x, roles)


def check_lead(c0, x, c1, ops) -> str | None:
    """Why `c0`'s epilogue value `x` cannot lead the chain whose hidden product is `c1` (for the
    fusion pass), or None."""
    try:
        analyze_lead(c0, x, _plan(_as_op(c1)), ops)
    except CodegenError as err:
        return str(err)
    except (ValueError, KeyError, IndexError) as err:
        return f"{type(err).__name__}: {err}"
    return None


__all__ = ["LEAD", "LEAD_VALUE", "Lead", "analyze_lead", "check_lead", "lead_of"]
