"""bf16 in the LLVM dialect as i16: after `arith-expand{include-bf16=true}` a kernel only loads,
stores, copies and bit-casts bf16 values (its arithmetic is f32), so the 16-bit integer type
carries them bit for bit.

Why: LLVM's x86 backend, without AVX512-BF16, legalizes some bf16 loads and stores (AVX-512
vectorized copies on an Intel Xeon without it) through f32 and a call to compiler-rt's
__truncsfbf2, which the JIT does not link: the kernel failed to load ("Symbols not found") and ran on
Triton's interpreter. Integers are never converted. An op that computes on bf16 would not verify on
i16: the lowering then fails loudly and the kernel takes the interpreter, as before.
"""
from __future__ import annotations

import re

_SCALAR_CONSTANT = re.compile(r"llvm\.mlir\.constant\(([-+0-9.eEinfatxXA-F]+) : bf16\) : bf16")


def _bits(literal: str) -> int:
    """A bf16 constant's bits as a signed i16 (MLIR prints them as a float or as hex)."""
    if literal.lower().startswith("0x"):
        bits = int(literal, 16)
    else:
        import torch

        bits = int(torch.tensor(float(literal)).to(torch.bfloat16).view(torch.int16).item()) & 0xFFFF
    return bits - 0x10000 if bits >= 0x8000 else bits


def bf16_as_i16(llvm_text: str) -> str:
    if "bf16" not in llvm_text:
        return llvm_text
    text = _SCALAR_CONSTANT.sub(lambda m: f"llvm.mlir.constant({_bits(m.group(1))} : i16) : i16", llvm_text)
    return re.sub(r"\bbf16\b", "i16", text)  # bitcasts to and from i16 become no-ops
