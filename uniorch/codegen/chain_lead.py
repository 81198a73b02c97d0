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

A depthwise convolution leads too (ConvNeXt: 7x7 depthwise, then LayerNorm and the MLP over each
pixel's channels). Its plan has the channels as its one batch dim, no M, the pixels as N and the
window as K: `x[pixel, c] = bias[c] + sum_tap w[c, tap] * in[pixel, c, tap]`. There is no
product of tiles to take, and computing it per channel (a program per channel, as the standalone
kernel does) would not give a row tile. In the chain it is one loop over the window's taps, each a
[rows, channels] multiply-add of the gathered input by one row of weights (`depthwise_lines`):
x's rows are the convolution's N dims and its columns the batch dim. Every input element is read
once per tap it is under (49 for a 7x7 window) from the cache, never a written activation.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from .attention_plan import MAX_HEAD_DIM, _plan, _role_of, _roles, differing_rows, score_chain
from uniorch.ir import dims

from .contraction_ir import _TL, _as_op, _elem, _shape
from .contraction_plan import _get, _known, _Plan, epilogue_layouts
from .source import CodegenError

LEAD, LEAD_VALUE = "uniorch.chain_lead", "uniorch.chain_lead_value"


@dataclass
class Lead:
    plan: _Plan      # the lead product; results = [x]
    x: object        # the value of its epilogue the chain reads
    roles: tuple     # x's dims as roles of the lead's loops ("m"/"b" by position, "key" its columns)
    depthwise: bool = False  # a per-channel window (module doc): columns its batch dim, rows its N

    @property
    def ty(self) -> str:
        return _elem(self.x)

    @property
    def width(self):
        """x's columns: the lead's N, or a depthwise lead's channels."""
        return self.plan.B if self.depthwise else self.plan.N

    def read_at(self, p: _Plan, idx: tuple, key_class: str) -> bool:
        """Whether a part with plan `p` reads x at the positions of the held tile: rows as the
        chain's, columns along its `key_class` dim, of x's width."""
        keys = p.order[key_class]
        if len(keys) != 1 or p.sizes[keys[0]] != self.width:
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
    if not p0.order["m"] and len(p0.order["b"]) == 1 and p0.order["n"]:
        return _depthwise(c0, x, p0, p1, ops)
    if len(p0.order["n"]) != 1 or not isinstance(p0.N, int) or p0.N > MAX_HEAD_DIM:
        raise CodegenError(c0, f"a chain lead's output is held whole: one dim of at most {MAX_HEAD_DIM} columns")
    if len(p1.order["k"]) != 1 or p1.K != p0.N:
        raise CodegenError(c0, f"the chain's input width {p1.K} is not its lead's {p0.N}")
    rows = differing_rows(p0, p1)
    if rows is not None and rows[0] != "batch" and _rows_as_x(p0, x, ops):
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


def _rows_as_x(p0: _Plan, x, ops) -> bool:
    """Put the lead's row dims in the order x holds them, when x permutes them: the chain's rows are
    x's, and nn.MultiheadAttention's out-projection runs over (token, batch) rows that its result
    transposes to (batch, token). Each row is still one element of every tile: only the order in
    which a row tile's index splits into the dims changes. Whether anything changed."""
    layouts = epilogue_layouts(p0, score_chain(p0.gen, x, ops))
    if not _known(layouts, x):
        return False
    ms = set(p0.order["m"])
    held = [lin.terms[0][0] for lin in _get(layouts, x)
            if len(lin.terms) == 1 and lin.terms[0][1] == 1 and not lin.const and lin.terms[0][0] in ms]
    if sorted(held) != sorted(ms) or held == p0.order["m"]:
        return False
    p0.order["m"] = held
    return True


def _depthwise(c0, x, p0: _Plan, p1: _Plan, ops) -> Lead:
    """A depthwise convolution's lead (module doc), or CodegenError."""
    (ch,) = p0.order["b"]
    width = p0.sizes[ch]
    if not isinstance(width, int) or width > MAX_HEAD_DIM:
        raise CodegenError(c0, f"a depthwise lead's channels are held whole: at most {MAX_HEAD_DIM}")
    if not isinstance(p0.K, int):
        raise CodegenError(c0, "a depthwise lead with a symbolic window")
    if len(p1.order["k"]) != 1 or p1.K != width:
        raise CodegenError(c0, f"the chain's input width {p1.K} is not its lead's {width} channels")
    rows = [p0.sizes[d] for d in p0.order["n"]]
    if p1.order["b"] or rows != [p1.sizes[d] for d in p1.order["m"]]:
        raise CodegenError(c0, f"the depthwise lead's pixels {rows} are not the chain's rows")
    p0.layouts = epilogue_layouts(p0, score_chain(c0, x, ops))
    if p0.window is not None or p0.siblings or p0.tile_stats or p0.channels_last is not None:
        raise CodegenError(c0, "a chain lead with a pooling, sibling products or tile statistics")
    if not _known(p0.layouts, x):
        raise CodegenError(c0, "the chain's input is not computed over its lead's output")
    roles = {d: ("m", i) for i, d in enumerate(p0.order["n"])}
    roles[ch] = ("key", 0)
    out = tuple(_role_of(lin, roles) for lin in _get(p0.layouts, x))
    if any(r is None or r[0] not in ("m", "key") for r in out) or out.count(("key", 0)) != 1 \
            or len(out) != len(_shape(x)):
        raise CodegenError(c0, "the chain's input is not its depthwise lead's output, element for element")
    return Lead(p0, x, out, depthwise=True)


def depthwise_product(e0, acc_ty: str) -> str:
    """The tap loop's line of a depthwise lead's part `e0` (attention._Part): one row of weights
    times the gathered input tile, accumulated in `acc_ty`."""
    terms = []
    for side in ("a", "b"):
        v = e0.operand(side, tile=False)
        terms.append(v.text if v.ty == acc_ty or v.const is not None else f"{v.text}.to({_TL[acc_ty]})")
    return f"acc = acc + {terms[0]} * {terms[1]}"


def depthwise_lines(e0, lead: Lead, defined: set, pre: list, loop: list, post: list) -> list[str]:
    """A depthwise lead's section of the chain kernel: its channels along x's columns (clamped to
    the last one past the width: every load in bounds, those columns zeroed after), its pixels
    along the chain's rows, then its accumulator, the loop over the window's taps and the epilogue."""
    p0 = lead.plan
    lines = [e0.rename_text(ln) for ln in e0.index_defs("b", f"tl.minimum(offs_d[None, :], {lead.width - 1})")]
    lines += [e0.rename_text(ln) for ln in e0.index_defs("n", "offs_m[:, None]")]
    lines.append(f"mask_dn = offs_d[None, :] < {lead.width}")
    if "mask_n" in e0.need and "mask_m" not in defined:
        lines.append(f"mask_m = offs_m[:, None] < {dims.code(p0.N)}")
    lines += e0.text(pre)
    lines.append(f"for tap in range({p0.K}):")
    inner = [e0.rename_text(ln) for ctx in ("a", "b") for ln in e0.index_defs("k", "tap", ctx=ctx)]
    lines += ["    " + ln for ln in inner + e0.text(loop)]
    return lines + e0.text(post)


DEPTHWISE_RENAME = {"acc": "lacc", "n": "lr", "mask_n": "mask_m", "bt": "lc", "ka": "ta", "kb": "tb",
                    "BLOCK_N": "BLOCK_D", "BLOCK_K": "1"}


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


__all__ = ["DEPTHWISE_RENAME", "LEAD", "LEAD_VALUE", "Lead", "analyze_lead", "check_lead", "depthwise_lines",
           "depthwise_product", "lead_of"]
