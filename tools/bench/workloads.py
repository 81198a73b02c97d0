"""The workloads: a name, realistic GPU sizes, tiny CPU sizes, and how to build model and inputs.

GPU sizes follow the public models (GPT-2 small, LLaMA-7B width, BERT-base, ResNet-34 stage 1) at
batch sizes that keep an H100 busy; CPU sizes exist so the harness is exercised in CI (on the
`cpu` target, or the interpreter where Ascend's adapter is missing: its per-element cost makes
anything bigger take minutes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from . import models as M


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str                       # "block" (a model layer), "micro" (one fused pattern) or "train"
    gpu: dict[str, int]
    cpu: dict[str, int]
    build: Callable[[dict, Callable], tuple[Any, tuple]]   # (sizes, randn) -> (model or fn, args)
    dtypes: tuple[str, ...] = ("fp32", "bf16")   # training steps: fp32 weights and optimizer state only

    def make(self, device: str, dtype: torch.dtype, sizes: str | None = None):
        """Model/function and inputs on `device` in `dtype`; sizes default to the device's."""
        p = getattr(self, sizes or ("cpu" if device == "cpu" else "gpu"))

        def randn(*shape, scale: float = 1.0):
            return (torch.randn(*shape, device=device) * scale).to(dtype)

        fn, args = self.build(p, randn)
        if isinstance(fn, nn.Module):
            fn = fn.to(device=device, dtype=dtype)
            fn = fn.train() if self.kind == "train" else fn.eval()
        return fn, args


def _gpt2(p, randn):
    return M.GPT2Block(p["dim"], p["heads"]), (randn(p["b"], p["t"], p["dim"]),)


def _nanogpt(p, randn):
    return M.GPT2Block(p["dim"], p["heads"], flash=False, block=p["t"]), (randn(p["b"], p["t"], p["dim"]),)


def _llama(p, randn):
    return M.LlamaBlock(p["dim"], p["heads"], p["hidden"]), (randn(p["b"], p["t"], p["dim"]),)


def _bert(p, randn):
    mask = torch.zeros(p["b"], p["t"])
    mask[:, p["t"] - p["t"] // 4:] = -1e4          # the last quarter is padding
    x = randn(p["b"], p["t"], p["dim"])
    return M.BertLayer(p["dim"], p["heads"]), (x, mask.to(device=x.device, dtype=x.dtype))


def _resnet(p, randn):
    return M.resnet_stack(p["ch"], p["blocks"]), (randn(p["b"], p["ch"], p["hw"], p["hw"]),)


def _mlp(p, randn):
    return M.mlp([p["dim"], p["hidden"], p["hidden"], p["dim"]]), (randn(p["b"], p["dim"]),)


def _layernorm(p, randn):
    return nn.LayerNorm(p["n"]), (randn(p["m"], p["n"]),)


def _softmax(p, randn):
    return _Softmax(), (randn(p["m"], p["n"], scale=4.0),)


class _Softmax(nn.Module):
    def forward(self, x):
        return x.softmax(-1)


def _chain(p, randn):
    return M.gelu_silu_chain, (randn(p["m"], p["n"]), randn(p["m"], p["n"]))


def _attention(p, randn):
    shape = (p["b"], p["heads"], p["t"], p["d"])
    return M.manual_attention, (randn(*shape), randn(*shape), randn(*shape))


def _decode(p, randn):
    b, d = p["b"], p["d"]
    kv = (b, p["kv_heads"], p["t"], d)
    return M.decode_attention, (randn(b, p["heads"], 1, d), randn(*kv), randn(*kv))


def _mm_gelu(p, randn):
    k = p["k"]
    return M.matmul_bias_gelu, (randn(p["m"], k), randn(k, p["n"], scale=k ** -0.5), randn(p["n"]))


def _moe(p, randn):
    return M.MoEExperts(p["dim"], p["hidden"], p["experts"], p["k"]), (randn(p["b"], p["t"], p["dim"]),)


def _add_ln(p, randn):
    n = p["n"]
    return M.add_layernorm, (randn(p["m"], n), randn(p["m"], n), 1 + randn(n, scale=0.1), randn(n, scale=0.1))


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("gpt2_block", "block", dict(b=8, t=1024, dim=768, heads=12),
             dict(b=1, t=8, dim=32, heads=2), _gpt2),
    Workload("llama_block", "block", dict(b=2, t=1024, dim=4096, heads=32, hidden=11008),
             dict(b=1, t=8, dim=32, heads=2, hidden=64), _llama),
    Workload("bert_layer", "block", dict(b=16, t=512, dim=768, heads=12),
             dict(b=1, t=8, dim=32, heads=2), _bert),
    Workload("resnet_stack", "block", dict(b=32, ch=64, hw=56, blocks=3),
             dict(b=1, ch=4, hw=6, blocks=1), _resnet),
    Workload("mlp", "block", dict(b=8192, dim=1024, hidden=4096),
             dict(b=8, dim=16, hidden=32), _mlp),
    Workload("layernorm", "micro", dict(m=16384, n=4096), dict(m=8, n=64), _layernorm),
    Workload("softmax", "micro", dict(m=16384, n=4096), dict(m=8, n=64), _softmax),
    Workload("gelu_silu_chain", "micro", dict(m=16384, n=4096), dict(m=8, n=64), _chain),
    Workload("attention", "micro", dict(b=8, heads=16, t=1024, d=64),
             dict(b=1, heads=2, t=8, d=16), _attention),
    Workload("matmul_bias_gelu", "micro", dict(m=8192, k=4096, n=4096), dict(m=16, k=32, n=32), _mm_gelu),
    Workload("add_layernorm", "micro", dict(m=16384, n=4096), dict(m=8, n=64), _add_ln),
    # a decode step's attention at Llama-3-8B's heads: memory-bound on the 4096-token cache
    Workload("decode_attention", "micro", dict(b=4, heads=32, kv_heads=8, t=4096, d=128),
             dict(b=1, heads=4, kv_heads=2, t=8, d=16), _decode),
    # one training step each (tools/bench/training.py): forward, backward, AdamW
    Workload("gpt2_block_train", "train", dict(b=8, t=1024, dim=768, heads=12),
             dict(b=1, t=8, dim=32, heads=2), _gpt2, ("fp32",)),
    # nanoGPT's block without flash attention (written out, a tril buffer as mask)
    Workload("nanogpt_block_train", "train", dict(b=8, t=1024, dim=768, heads=12),
             dict(b=1, t=8, dim=32, heads=2), _nanogpt, ("fp32",)),
    Workload("llama_block_train", "train", dict(b=1, t=1024, dim=4096, heads=32, hidden=11008),
             dict(b=1, t=8, dim=32, heads=2, hidden=64), _llama, ("fp32",)),
    Workload("resnet_stack_train", "train", dict(b=32, ch=64, hw=56, blocks=3),
             dict(b=1, ch=4, hw=6, blocks=1), _resnet, ("fp32",)),
    Workload("mlp_train", "train", dict(b=8192, dim=1024, hidden=4096),
             dict(b=8, dim=16, hidden=32), _mlp, ("fp32",)),
    # last: a GPU run that reaches its deadline drops it first. bf16 only: CUDA's _grouped_mm is
    # bf16 (transformers runs fp32 experts through its own loop over experts)
    Workload("moe_experts", "block", dict(b=1, t=4096, dim=2048, hidden=1408, experts=8, k=2),
             dict(b=1, t=16, dim=32, hidden=32, experts=4, k=2), _moe, ("bf16",)),
]}
