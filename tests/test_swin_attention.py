"""Swin's window attention is one flash kernel per stage (passes/collapse_contraction.py): upstream's
reshape folding leaves q·kᵀ over each window's rows and columns as separate dims, collapsed after
it for the relative position bias and the softmax; the collapse now folds into the contraction.
transformers' SwinModel at a tiny config, against eager on fresh inputs."""
import pytest
import torch

import uniorch

transformers = pytest.importorskip("transformers")


def _swin(dtype):
    torch.manual_seed(0)
    config = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                                     window_size=4)
    return transformers.SwinModel(config).eval().to(dtype)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_swin_window_attention_is_one_flash_kernel_per_stage(dtype, tol):
    assert_two_flash_stages_match_eager(_swin(dtype), dtype, tol)


def assert_two_flash_stages_match_eager(model, dtype, tol):
    """A two-stage vision model on 2 x 3 x 32 x 32 images: two attention kernels, no softmax outside
    them, the last hidden state against eager on two fresh inputs (also test_segformer_attention)."""
    cm = uniorch.compile(model, target="interpret")
    x = torch.randn(2, 3, 32, 32, dtype=dtype)
    rep = cm.explain(x)
    assert not rep.fallbacks, str(rep)
    kinds = [k.kind for k in rep.kernels]
    assert kinds.count("attention") == 2, str(rep)
    softmax = [k for k in rep.kernels if any("softmax" in op for op, _ in k.ops)]
    assert softmax and all(k.kind == "attention" for k in softmax), str(rep)
    for _ in range(2):
        x = torch.randn(2, 3, 32, 32, dtype=dtype)
        got = cm(x).last_hidden_state
        with torch.no_grad():
            want = model(x).last_hidden_state
        err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
        assert err <= tol, err
