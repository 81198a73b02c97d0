"""Which device a launch plan allocates on and launches for (runtime/plan.py `device_of`): the first
input off the CPU, since a 0-d CPU tensor may come first in a GPU call (PyTorch lets such scalars
join GPU ops); without one, the device the capture recorded for the region's results. Meta tensors
stand in for a GPU's here."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from uniorch.runtime.compiler import compile_graph
from uniorch.runtime.plan import device_of
from uniorch.targets import parse_target


def test_a_cpu_scalar_first_does_not_decide():
    scale, x = torch.tensor(0.5), torch.empty(4, 8, device="meta")
    assert device_of([scale, x]) == torch.device("meta")


def test_cpu_inputs_and_no_inputs():
    assert device_of([torch.ones(2), torch.ones(3)]) == torch.device("cpu")
    assert device_of([], torch.device("meta")) == torch.device("meta")
    assert device_of([]) == torch.device("cpu")
    assert device_of([3, torch.ones(1)]) == torch.device("cpu")  # a size argument among them


def test_cpu_scalars_alone_defer_to_the_recorded_device():
    # the first H200 runs: a causal mask built from aranges and a 0-d CPU tensor was allocated
    # on the CPU, and the next op mixing it with GPU tensors failed ("found at least two devices")
    assert device_of([torch.tensor(2.0)], torch.device("meta")) == torch.device("meta")
    assert device_of([torch.tensor(2.0), torch.ones(2)], torch.device("meta")) == torch.device("cpu")


def test_a_region_of_loop_indices_alone_runs_where_the_capture_ran():
    def causal_mask(limit):
        rows = torch.arange(16, device="meta")
        return ((rows[None, :] - rows[:, None]) <= 0) & (rows[:, None] < limit.to("meta"))

    gm = make_fx(causal_mask)(torch.tensor(9))
    compiled = compile_graph(gm, parse_target("interpret"), run=False)
    assert compiled.plan.device == torch.device("meta")
