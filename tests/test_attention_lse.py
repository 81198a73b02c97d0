"""The log-sum-exp a training forward saves for SDPA's backward, from the flash kernel itself
(capture/fused_attention.py computes it from the same scores as the softmax; passes/fuse_attention.py
matches it; codegen/attention.py stores m + log(l)). Before, it was a second q·kᵀ kernel writing the
T x T scores and a reduction reading them back: at gpt2_block_train's sizes (8 x 12 heads x 1024^2)
903 MB a step. Checked against eager on fresh inputs: the output and log-sum-exp of SDPA's CPU
kernel under causal, -inf (with a row masked whole) and additive masks and grouped-query heads,
all in one kernel; and a training step's gradients, its forward holding no other softmax kernel."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

import uniorch

aten = torch.ops.aten


def _flash(q, k, v, mask=None, causal=False):
    return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask)


def _case(name, g):
    q, k, v = (torch.randn(2, 4, 37, 16, generator=g) for _ in range(3))
    if name == "causal":
        return (q, k, v), dict(causal=True)
    if name == "masked":  # SDPA's boolean mask as the kernel takes it: 0 or -inf
        keep = torch.rand(2, 1, 37, 37, generator=g) > 0.3
        keep[:, :, 5] = False  # a query that sees no key: output 0, log-sum-exp 0 (the CPU kernel's)
        return (q, k, v, torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))), {}
    if name == "additive":
        return (q, k, v, torch.randn(1, 4, 37, 37, generator=g)), {}
    raise ValueError(name)


@pytest.mark.parametrize("name", ["causal", "masked", "additive"])
def test_output_and_log_sum_exp_from_one_flash_kernel(name):
    cm = None
    for seed in (0, 1):  # compiled on the first inputs, checked on fresh ones too
        args, kw = _case(name, torch.Generator().manual_seed(seed))
        fn = lambda *a: _flash(*a, **kw)  # noqa: E731
        cm = cm or uniorch.compile(fn, target="interpret")
        out, lse = cm(*args)
        ref_out, ref_lse = fn(*args)
        torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-5)
    rep = cm.explain(*args)
    assert [k.kind for k in rep.kernels] == ["attention"], [(k.name, k.kind) for k in rep.kernels]


class _Attention(nn.Module):
    def __init__(self, dim=32, heads=4, kv_heads=2):
        super().__init__()
        self.h, self.g, self.d = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.d)
        self.o = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.h, self.d).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.g, self.d).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(a.transpose(1, 2).reshape(b, t, -1))


def test_training_gradients_with_the_log_sum_exp_from_the_kernel():
    torch.manual_seed(0)
    model = _Attention()
    eager = _Attention()
    eager.load_state_dict(model.state_dict())
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        x = torch.randn(2, 24, 32)
        ct = torch.randn(2, 24, 32)
        (cm(x) * ct).sum().backward()
        (eager(x) * ct).sum().backward()
        for (n, p), e in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, e.grad, rtol=1e-4, atol=1e-5, msg=n)
            p.grad, e.grad = None, None
    with torch.enable_grad():
        rep = cm.explain(x)
    kinds = [k.kind for k in rep.kernels]
    assert kinds.count("attention") == 1 and "reduction" not in kinds, [(k.name, k.kind) for k in rep.kernels]


def test_a_16_bit_kernel_with_the_log_sum_exp_keeps_its_tensor_core_dots():
    """The log-sum-exp is float32 whatever the model's dtype; counted among the kernel's outputs it
    made a bf16 attention's P·v an FMA dot (255 registers and 1.3 KB spilled a thread on sm_90 with
    Triton 3.6's ptxas, against 121 and none without it). It now compiles as the inference kernel."""
    import re

    from uniorch.backends.cuda.ptxas import run_ptxas

    args = tuple(torch.randn(2, 12, 1024, 64, dtype=torch.bfloat16) for _ in range(3))
    with torch.no_grad():
        train = uniorch.compile_aot(lambda *a: _flash(*a, causal=True), args, "cuda:sm_90")
        infer = uniorch.compile_aot(lambda *a: F.scaled_dot_product_attention(*a, is_causal=True), args, "cuda:sm_90")
    (a,) = train.kernels
    (b,) = infer.kernels
    assert "tl.dot(p.to(tl.bfloat16)" in a.source.source and "tl.store(out1_ptr" in a.source.source

    def regs_spilled(k):
        run = run_ptxas((k.specialized or k).asm["ptx"], "sm_90", "-v")
        text = run.stdout + run.stderr
        spilled = sum(map(int, re.findall(r"(\d+) bytes spill stores", text)))
        return int(re.findall(r"Used (\d+) registers", text)[0]), spilled

    (ra, sa), (rb, sb) = regs_spilled(a), regs_spilled(b)
    assert sa <= sb and ra <= rb + 16, ((ra, sa), (rb, sb))


def test_fp32_attention_storing_its_output_twice_does_not_spill():
    """A training forward stores SDPA's output in the op's own layout (saved for the backward) and in
    the one the next matmul reads. In fp32 (FMA dots) at 128x64 tiles and 8 warps that spilled 1.3 KB
    a thread inside the key loop on sm_90 (Triton 3.6's ptxas: gpt2_block_train's forward); such a
    kernel takes 64x64 at 4 warps, while bf16 keeps its tiles, and so does the default 3xTF32 one
    (exact dots are what PyTorch's math backend computes). Spills are checked with the GPU
    machine's Triton (3.6, the compat run): Triton 3.9's code for these tiles spills at both."""
    import re

    import triton

    from uniorch.backends.cuda.ptxas import run_ptxas

    def fwd(q, k, v, w):
        out, lse = aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, True)[:2]
        # two outputs of the attention kernel: the returned output is a view of the matmul's input
        # (test_saved_attention_output_is_a_view_of_the_one_written_for_the_matmul), which the
        # matmul reads through its index map, so a second pointwise reader makes the second store
        h = out.transpose(1, 2).reshape(2, 1024, 256)
        return h @ w, h * 2.0, lse

    args = (*(torch.randn(2, 1024, 4, 64).transpose(1, 2) for _ in range(3)), torch.randn(256, 256))
    with torch.no_grad():
        with sdpa_kernel(SDPBackend.MATH):
            art = uniorch.compile_aot(fwd, args, "cuda:sm_90")
        x3 = uniorch.compile_aot(fwd, args, "cuda:sm_90")
        bf16 = uniorch.compile_aot(fwd, tuple(a.bfloat16() for a in args), "cuda:sm_90")
    (a,) = [k for k in art.kernels if k.kind == "attention"]
    (c,) = [k for k in x3.kernels if k.kind == "attention"]
    (b,) = [k for k in bf16.kernels if k.kind == "attention"]
    assert a.source.source.count("tl.store(") == 3  # two outputs, and the log-sum-exp
    assert (a.source.constexprs["BLOCK_M"], a.source.num_warps) == (64, 4)
    assert (b.source.constexprs["BLOCK_M"], b.source.num_warps) == (128, 8)
    assert (c.source.constexprs["BLOCK_M"], c.source.num_warps) == (128, 8)
    assert 'input_precision="tf32x3"' in c.source.source
    if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7):
        for k in (a, c):
            run = run_ptxas((k.specialized or k).asm["ptx"], "sm_90", "-v")
            assert not re.findall(r"[1-9]\d* bytes spill stores", run.stdout + run.stderr), run.stderr


def test_saved_attention_output_is_a_view_of_the_one_written_for_the_matmul():
    """PyTorch's fused attention returns its output (B, H, T, d) as a transpose of (B, T, H, d): a
    training forward saves it for the backward, and the out-projection reads it (B, T, H*d). One
    store (passes/returned_views.py `returned_values_as_views_of_their_copies`), the returned
    output a view with eager's strides, values as eager's."""
    def fwd(q, k, v, w):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(2, 40, 64) @ w, out

    gen = torch.Generator().manual_seed(3)
    args = (*(torch.randn(2, 40, 4, 16, generator=gen).transpose(1, 2) for _ in range(3)),
            torch.randn(64, 64, generator=gen))
    with torch.no_grad():
        (k,) = [k for k in uniorch.compile_aot(fwd, args, "cuda:sm_90").kernels if k.kind == "attention"]
        assert k.source.source.count("tl.store(") == 1, k.source.source
        want = fwd(*args)
        got = uniorch.compile(fwd, target="interpret", fallback="error")(*args)
    assert not want[1].is_contiguous() and got[1].stride() == want[1].stride()
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
