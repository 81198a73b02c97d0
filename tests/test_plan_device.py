"""Which device a launch plan allocates on and launches for (runtime/plan.py `device_of`): the first
input off the CPU, since a 0-d CPU tensor may come first in a GPU call (PyTorch lets such scalars
join GPU ops). Meta tensors stand in for a GPU's here."""
import torch

from uniorch.runtime.plan import device_of


def test_a_cpu_scalar_first_does_not_decide():
    scale, x = torch.tensor(0.5), torch.empty(4, 8, device="meta")
    assert device_of([scale, x]) == torch.device("meta")


def test_cpu_inputs_and_no_inputs():
    assert device_of([torch.ones(2), torch.ones(3)]) == torch.device("cpu")
    assert device_of([], torch.device("meta")) == torch.device("meta")
    assert device_of([]) == torch.device("cpu")
    assert device_of([3, torch.ones(1)]) == torch.device("cpu")  # a size argument among them
