"""Every zoo model runs wherever its inputs are: no tensor made inside `forward` is left on the CPU.

The first GPU run skipped four zoo models because their forward built `torch.arange(t)` or a mask
on the CPU beside CUDA inputs (eager itself failed). Running each model with its weights and inputs
on the "meta" device finds such a tensor without a GPU: mixing it with meta tensors raises.
A model that reads a value (`.item()`: transformers' mask helpers) cannot run on meta; for those,
reaching that read is as far as this check goes."""
import copy

import pytest
import torch
import torch.utils._pytree as pytree

from uniorch.testing import zoo


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_model_keeps_tensors_on_the_inputs_device(name):
    model, args, kwargs = zoo.load(name)
    model = copy.deepcopy(model).to("meta")
    meta = lambda a: a.to("meta") if isinstance(a, torch.Tensor) else a  # noqa: E731
    try:
        model(*pytree.tree_map(meta, args), **pytree.tree_map(meta, kwargs))
    except RuntimeError as e:
        if "cannot be called on meta tensors" not in str(e):
            raise
