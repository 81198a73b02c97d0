"""PyTorch's fused attention kernels as ATen math: the CPU one and its backward, and the CUDA ones.

On a GPU, `F.scaled_dot_product_attention` dispatches to cuDNN's, the memory-efficient or the flash
kernel (`_scaled_dot_product_cudnn_attention`, `..._efficient_attention`, `..._flash_attention`),
which torch-mlir lowers no more than the CPU one: the first H200 run left every SDPA model's
attention to PyTorch. Their outputs are the same attention; each is the math here, laid out in
memory as the kernel lays its own (a later `view` of the model's may depend on it), with
log-sum-exp outputs of the kernel's shapes (for inference they are dead code). Their backward ops
are not decomposed: a training graph recording one keeps it in PyTorch.

AOTAutograd records `_scaled_dot_product_flash_attention_for_cpu` in the forward and its backward
op in the backward graph; torch-mlir lowers neither. PyTorch's decomposition of the forward returns
the attention probabilities where the op returns the rows' log-sum-exp (its second output, unused
at inference), and it has none of the backward: a backward reading that output was silently wrong.
Here the output and the forward's log-sum-exp come from one S (ATen's math, written out), so the
flash kernel returns both (passes/fuse_attention.py); a row of only -inf scores gets 0, as the CPU
kernel returns. From it and the output the gradients are FlashAttention's backward: P = exp(S -
lse) with S = scale QKᵀ (+ mask), dS = P (dO Vᵀ - rowsum(dO∘O)), dQ = scale dS K; and dV = PᵀdO,
dK = scale dSᵀ Q with Pᵀ and dSᵀ computed from the transposed scores Sᵀ = scale K Qᵀ, so that each
product's first factor is a product of its own that uniorch-fuse-chain keeps in registers (no
T x T tensor is written: docs/design.md, training). Key/value heads fewer than the query's
(grouped-query) sum their groups' gradients. Dropout is not recomputable here: with p > 0 the op
stays in PyTorch.
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten


def _scores(query, key, is_causal, attn_mask, scale, acc, transposed=False):
    """S = scale QKᵀ with the causal and given masks applied, in the accumulation type. With
    `transposed`, Sᵀ: `query` and `key` are then the keys and the queries."""
    s = (query.to(acc) @ key.to(acc).transpose(-2, -1)) * scale
    if transposed and attn_mask is not None:
        attn_mask = attn_mask.reshape((1,) * max(0, 2 - attn_mask.dim()) + tuple(attn_mask.shape)).transpose(-2, -1)
    if is_causal:
        lq, lk = s.shape[-2:] if not transposed else reversed(s.shape[-2:])
        keep = torch.ones(lq, lk, dtype=torch.bool, device=s.device).tril(lk - lq)
        keep = keep.t() if transposed else keep
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask.to(acc)
    return s


def _acc(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _flash_cpu(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    """PyTorch's decomposition for the output (what inference has always used: its flash-kernel
    fusion and its masked-row and grouped-query handling), and the log-sum-exp computed here, in
    the op's layout; unused at inference, it is dead code there. With dropout the op stays whole."""
    if dropout_p:
        return NotImplemented
    out, lse = _math(query, key, value, is_causal, attn_mask, scale)
    return out, lse.transpose(1, 2).contiguous().transpose(1, 2)  # (batch, length, heads) in memory


def _flash_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None,
                        scale=None):
    if dropout_p:
        return NotImplemented
    e = query.shape[-1]
    scale = scale if scale is not None else 1.0 / math.sqrt(e)
    hq, hk = query.shape[-3], key.shape[-3]
    k, v = key, value
    if hq != hk:  # grouped-query: each key/value head serves hq // hk query heads
        rep = hq // hk
        k = key.repeat_interleave(rep, dim=-3)
        v = value.repeat_interleave(rep, dim=-3)
    acc = _acc(query.dtype)
    q32, k32, v32, do32, o32 = (t.to(acc) for t in (query, k, v, grad_out, out))
    from uniorch.passes.recompute_hidden import recomputes_scores

    lse, rows = logsumexp.to(acc), (do32 * o32).sum(-1)
    p = torch.exp(_scores(q32, k32, is_causal, attn_mask, scale, acc) - lse.unsqueeze(-1))
    ds = p * (do32 @ v32.transpose(-2, -1) - rows.unsqueeze(-1))
    dq = (ds @ k32) * scale
    if recomputes_scores(query.shape[-2], key.shape[-2], e):
        # dK and dV from the transposed scores (keys x queries): each product's first factor is
        # then computed by its own k·qᵀ, which uniorch-fuse-chain keeps in registers
        # (passes/recompute_hidden.py), where Pᵀ and dSᵀ as views of P and dS would be written out
        pt = torch.exp(_scores(k32, q32, is_causal, attn_mask, scale, acc, transposed=True) - lse.unsqueeze(-2))
        dv = pt @ do32
        dk = (pt * (v32 @ do32.transpose(-2, -1) - rows.unsqueeze(-2)) @ q32) * scale
    else:  # too few keys for the chains: one S, P and dS, read transposed
        dv = p.transpose(-2, -1) @ do32
        dk = (ds.transpose(-2, -1) @ q32) * scale
    if hq != hk:
        shape = list(dk.shape[:-3]) + [hk, hq // hk] + list(dk.shape[-2:])
        dk, dv = dk.reshape(shape).sum(-3), dv.reshape(shape).sum(-3)
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)


def _math(query, key, value, is_causal, attn_mask, scale):
    """(output, log-sum-exp over keys in float32), both (batch, heads, queries[, ...]), from one
    tensor of scores: ATen's `_scaled_dot_product_attention_math` (what PyTorch's decomposition of
    its CPU kernel calls, written out here), whose scores also give the log-sum-exp. One scores
    tensor with both readers is what lets uniorch-fuse-attention return the log-sum-exp from the
    flash kernel's own running max and sum (a training forward saves it for the backward); as two
    computations it was a second q·kᵀ and a T x T tensor written and read."""
    mask, causal = attn_mask, is_causal
    lq, lk = query.shape[-2], key.shape[-2]
    if attn_mask is not None and is_causal:  # the kernels take both; the math one or the other
        keep = torch.ones(lq, lk, dtype=torch.bool, device=query.device).tril(lk - lq)
        mask = (attn_mask & keep) if attn_mask.dtype == torch.bool else \
            attn_mask.masked_fill(~keep, float("-inf"))
        causal = False
    acc = _acc(query.dtype)
    q, k, v = (t.to(acc) for t in (query, key, value))  # 16-bit inputs kept in float32, as ATen's
    # q and k each scaled by sqrt(scale) before the product, for stability (ATen's order)
    negative = scale is not None and scale < 0
    factor = math.sqrt(abs(scale) if scale is not None else 1.0 / math.sqrt(query.shape[-1]))
    q = q * (-factor if negative else factor)
    if causal:
        mask = torch.ones(lq, lk, dtype=torch.bool, device=query.device).tril()
    if mask is not None and mask.dtype == torch.bool:
        # where(mask, 0, -inf), without a logical_not: the causal bound (codegen/causal_bound.py)
        # reads the mask's comparison as the kernel's score lines write it
        mask = torch.full_like(mask, float("-inf"), dtype=q.dtype).masked_fill(mask, 0.0)
    hq, hk = query.shape[-3], key.shape[-3]
    if hq != hk:  # grouped-query: each key/value head serves hq // hk query heads
        k = k.repeat_interleave(hq // hk, dim=-3)
        v = v.repeat_interleave(hq // hk, dim=-3)
    s = q @ (k.transpose(-2, -1) * factor)
    if mask is not None:
        s = s + mask
    out = (aten._safe_softmax.default(s, -1) @ v).to(query.dtype)
    # a query that sees no key: 0, as PyTorch's CPU kernel returns (a backward's exp(s - lse) is
    # then 0 there, where logsumexp's -inf would make it NaN)
    lse = torch.logsumexp(s, -1)
    lse = lse.masked_fill(lse == float("-inf"), 0.0)
    return out, lse.to(torch.float32 if query.dtype != torch.float64 else query.dtype)


def _like(out, ref):
    """`out` with the memory order of `ref`'s dims (the kernels allocate their output like q)."""
    order = sorted(range(ref.dim()), key=lambda d: (-ref.stride(d), d))
    inverse = [order.index(d) for d in range(ref.dim())]
    return out.permute(order).contiguous().permute(inverse)


def _seed():
    return torch.empty((), dtype=torch.int64), torch.empty((), dtype=torch.int64)


def _flash_cuda(query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    if dropout_p or return_debug_mask:
        return NotImplemented
    out, lse = _math(query, key, value, is_causal, None, scale)
    seed, offset = _seed()
    return (_like(out, query), lse, None, None, query.shape[2], key.shape[2], seed, offset,
            torch.empty(0, dtype=query.dtype, device=query.device))


def _efficient_cuda(query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *,
                    scale=None):
    if dropout_p:
        return NotImplemented
    out, lse = _math(query, key, value, is_causal, attn_bias, scale)
    pad = (-lse.shape[-1]) % 32  # the kernel's log-sum-exp rows are padded to 32 queries
    lse = torch.nn.functional.pad(lse, (0, pad)) if compute_log_sumexp else lse[..., :0]
    seed, offset = _seed()
    return out.transpose(1, 2).contiguous().transpose(1, 2), lse, seed, offset   # (batch, queries, heads) in memory


def _cudnn_cuda(query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                return_debug_mask=False, *, scale=None):
    if dropout_p or return_debug_mask:
        return NotImplemented
    out, lse = _math(query, key, value, is_causal, attn_bias, scale)
    seed, offset = _seed()
    return (_like(out, query), lse.unsqueeze(-1), None, None, query.shape[2], key.shape[2], seed, offset, None)


TABLE = {aten._scaled_dot_product_flash_attention_for_cpu.default: _flash_cpu,
         aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _flash_cpu_backward,
         aten._scaled_dot_product_flash_attention.default: _flash_cuda,
         aten._scaled_dot_product_efficient_attention.default: _efficient_cuda,
         aten._scaled_dot_product_cudnn_attention.default: _cudnn_cuda}
