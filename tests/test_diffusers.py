"""diffusers' models as Stable Diffusion and DiT pipelines call them, tiny random configs: the UNet
(timestep embedding, GroupNorm + SiLU convolutions, self- and cross-attention over the text
states, nearest upsampling), the VAE's decoder (its mid-block attention over pixels) and a DiT
(adaptive LayerNorm from the timestep and class). Compiled whole, against eager on fresh inputs,
every softmax in a flash kernel. diffusers is not a test dependency: these run where it is
installed, with UNIORCH_SLOW_TESTS=1 (the UNet alone takes 25 s on the interpreter)."""
import pytest
import torch

import uniorch
from uniorch import config

diffusers = pytest.importorskip("diffusers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")


def _unet():
    model = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
    return model, lambda: ((torch.randn(2, 4, 8, 8), torch.randint(0, 1000, (2,)), torch.randn(2, 7, 32)), {}), 8


def _vae_decoder():
    model = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64), latent_channels=4, norm_num_groups=8,
        layers_per_block=1, sample_size=32).decoder
    return model, lambda: ((torch.randn(2, 4, 8, 8),), {}), 1


def _dit():
    model = diffusers.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4, num_layers=2,
                                            sample_size=8, patch_size=2, num_embeds_ada_norm=10)
    return model, lambda: ((torch.randn(2, 4, 8, 8),), {"timestep": torch.randint(0, 10, (2,)),
                                                         "class_labels": torch.randint(0, 10, (2,))}), 2


# The UNet's mid- and up-block attentions (over 4 x 4 and 8 x 8 latents) are still three kernels:
# their scores keep the query pixels as two dims (rows, columns) and the softmax is split across
# groups that uniorch-fuse-attention does not match; the down block's are flash kernels.
@pytest.mark.parametrize("make", [
    pytest.param(_unet, marks=pytest.mark.xfail(strict=True, reason="mid/up-block attention not flash yet")),
    _vae_decoder, _dit], ids=["unet", "vae_decoder", "dit"])
def test_diffusers_model_compiles_whole(make):
    if not config.flag("UNIORCH_SLOW_TESTS"):
        pytest.skip("UNIORCH_SLOW_TESTS=1 runs these")
    torch.manual_seed(0)
    model, inputs, attentions = make()
    model.eval()
    cm = uniorch.compile(model, target="interpret")
    with torch.no_grad():
        for _ in range(2):
            args, kwargs = inputs()
            got, want = cm(*args, **kwargs), model(*args, **kwargs)
            got, want = (getattr(o, "sample", o) for o in (got, want))
            assert ((got - want).abs().max() / want.abs().max()).item() <= 1e-5
        rep = cm.explain(*args, **kwargs)
    assert not rep.fallbacks and cm.cache_size == 1, str(rep)  # the UNet gets this far (numerics, no fallback)
    assert [k.kind for k in rep.kernels].count("attention") == attentions, str(rep)
    assert all(k.kind == "attention" for k in rep.kernels if any("softmax" in op for op, _ in k.ops)), str(rep)
