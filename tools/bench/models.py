"""The benchmark's models, in plain torch so the suite needs no model zoo package.

Each block mirrors the public architecture it is named after (layer order, activations, norms),
not its weights; sizes come from `workloads.py`.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    """GPT-2's attention: one fused qkv projection, causal SDPA, output projection. Without
    `flash`, nanoGPT's other path: softmax(q·kᵀ / sqrt(d)) masked by a lower-triangular buffer,
    written out."""

    def __init__(self, dim: int, heads: int, flash: bool = True, block: int = 1024):
        super().__init__()
        self.h, self.flash = heads, flash
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        if not flash:
            self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class GPT2Block(nn.Module):
    """Pre-LayerNorm block with a tanh-GELU MLP of 4x width."""

    def __init__(self, dim: int, heads: int, flash: bool = True, block: int = 1024):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, flash, block)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # LLaMA normalises in fp32 and casts back, so bf16 runs keep the same numerics
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    """RMSNorm, rotary embeddings, causal SDPA, SwiGLU MLP; no biases."""

    def __init__(self, dim: int, heads: int, hidden: int, base: float = 10000.0):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, self.d, 2).float() / self.d)),
                             persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        h = self.attn_norm(x)
        q, k, v = (w(h).view(b, t, self.h, self.d).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        freqs = torch.outer(torch.arange(t, device=x.device, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, c))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class BertLayer(nn.Module):
    """Post-LayerNorm encoder layer with an additive padding mask and erf-GELU, as in BERT."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(dim, eps=1e-12), nn.LayerNorm(dim, eps=1e-12)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x, mask):
        b, t, c = x.shape
        d = c // self.h
        q, k, v = (p(x).view(b, t, self.h, d).transpose(1, 2) for p in (self.q, self.k, self.v))
        s = q @ k.transpose(-1, -2) / math.sqrt(d) + mask[:, None, None, :]
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = self.ln1(x + self.o(a))
        return self.ln2(x + self.out(F.gelu(self.fc(x))))


class BasicBlock(nn.Module):
    """ResNet's 3x3-3x3 residual block, batch norm in eval mode (inference)."""

    def __init__(self, ch: int):
        super().__init__()
        self.c1, self.c2 = (nn.Conv2d(ch, ch, 3, padding=1, bias=False) for _ in range(2))
        self.b1, self.b2 = nn.BatchNorm2d(ch), nn.BatchNorm2d(ch)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


def resnet_stack(ch: int, blocks: int) -> nn.Module:
    m = nn.Sequential(*(BasicBlock(ch) for _ in range(blocks)))
    with torch.no_grad():  # non-trivial running stats, so folding batch norm is actually checked
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    return m.eval()


def mlp(dims: list[int]) -> nn.Module:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


# -- microbenchmarks: functions, so the captured graph is exactly the ops named ----------------------
def gelu_silu_chain(x, y):
    return F.silu(F.gelu(x) * y) + x


def manual_attention(q, k, v):
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    return s.softmax(-1) @ v


def decode_attention(q, k, v):
    """One new token per sequence against its cache, grouped-query heads (k and v have fewer)."""
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def matmul_bias_gelu(x, w, b):
    return F.gelu(x @ w + b)


def add_layernorm(x, r, weight, bias):
    return F.layer_norm(x + r, x.shape[-1:], weight, bias)


class MoEExperts(nn.Module):
    """A mixture of experts' FFN as transformers runs it (integrations/moe.py, `grouped_mm`):
    softmax router, top-k, rows sorted by expert, gated up-projection and down-projection as grouped
    matmuls over each expert's rows, outputs weighted and summed back per token (Mixtral, Qwen-MoE)."""

    def __init__(self, dim: int, hidden: int, experts: int, top_k: int):
        super().__init__()
        self.k, self.experts = top_k, experts
        self.router = nn.Linear(dim, experts, bias=False)
        self.gate_up = nn.Parameter(torch.randn(experts, dim, 2 * hidden) / math.sqrt(dim))
        self.down = nn.Parameter(torch.randn(experts, hidden, dim) / math.sqrt(hidden))

    def forward(self, x):
        b, t, d = x.shape
        h = x.reshape(-1, d)
        weights, chosen = torch.topk(self.router(h).softmax(-1, dtype=torch.float32), self.k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype).reshape(-1)
        expert, order = torch.sort(chosen.reshape(-1))
        ends = torch.histc(expert.float(), bins=self.experts, min=0, max=self.experts - 1).cumsum(0).to(torch.int32)
        gate, up = torch._grouped_mm(h[order // self.k], self.gate_up, offs=ends).chunk(2, dim=-1)
        out = torch._grouped_mm(F.silu(gate) * up, self.down, offs=ends) * weights[order, None]
        back = torch.empty_like(order)
        back[order] = torch.arange(order.numel(), device=order.device)
        return out[back].reshape(b * t, self.k, d).sum(1).reshape(b, t, d)
