"""diffusers' models as Stable Diffusion and DiT pipelines call them, tiny random configs: the UNet
(timestep embedding, GroupNorm + SiLU convolutions, self- and cross-attention over the text
states, nearest upsampling), the VAE's decoder (its mid-block attention over pixels) and a DiT
(adaptive LayerNorm from the timestep and class). Compiled whole, against eager on fresh inputs,
each attention module one flash kernel. diffusers is not a test dependency: these run where it is
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
    return model, lambda: ((torch.randn(2, 4, 8, 8), torch.randint(0, 1000, (2,)), torch.randn(2, 7, 32)), {})


def _vae_decoder():
    model = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64), latent_channels=4, norm_num_groups=8,
        layers_per_block=1, sample_size=32).decoder
    return model, lambda: ((torch.randn(2, 4, 8, 8),), {})


def _dit():
    model = diffusers.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4, num_layers=2,
                                            sample_size=8, patch_size=2, num_embeds_ada_norm=10)
    return model, lambda: ((torch.randn(2, 4, 8, 8),), {"timestep": torch.randint(0, 10, (2,)),
                                                         "class_labels": torch.randint(0, 10, (2,))})


# The UNet's mid- and up-block cross-attentions were four kernels each, writing the probabilities:
# SDPA's keepdim max read their scores over the pixels merged and split again with a unit dim,
# which passes/sink_collapse.py could not compose (`_with_units`), so the softmax was two groups.
@pytest.mark.parametrize("make", [_unet, _vae_decoder, _dit], ids=["unet", "vae_decoder", "dit"])
def test_diffusers_model_compiles_whole(make):
    if not config.flag("UNIORCH_SLOW_TESTS"):
        pytest.skip("UNIORCH_SLOW_TESTS=1 runs these")
    torch.manual_seed(0)
    model, inputs = make()
    model.eval()
    attentions = sum(isinstance(m, diffusers.models.attention_processor.Attention) for m in model.modules())
    cm = uniorch.compile(model, target="interpret")
    with torch.no_grad():
        for _ in range(2):
            args, kwargs = inputs()
            got, want = cm(*args, **kwargs), model(*args, **kwargs)
            got, want = (getattr(o, "sample", o) for o in (got, want))
            assert ((got - want).abs().max() / want.abs().max()).item() <= 1e-5
        rep = cm.explain(*args, **kwargs)
    assert not rep.fallbacks and cm.cache_size == 1, str(rep)
    # each attention module one flash kernel (a GroupNorm's reduction may list `_softmax` among its
    # ops: a constant fill the two share after CSE carries the softmax's location)
    assert [k.kind for k in rep.kernels].count("attention") == attentions, str(rep)
