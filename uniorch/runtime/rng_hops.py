"""Activation checkpointing's RNG wrappers around ops that draw nothing, unwrapped.

Why: with activation checkpointing (transformers' `gradient_checkpointing_enable()`,
`torch.utils.checkpoint`), AOTAutograd recomputes the checkpointed ops in the backward, and wraps
every op tagged as seeded in `run_and_save_rng_state` (forward) and `run_with_rng_state`
(backward), so the recomputation draws the numbers the forward drew. SDPA is tagged so for its
dropout, also at `dropout_p=0`. Neither higher-order op can be traced or imported into MLIR: the
forward graph of a checkpointed Llama ran entirely in PyTorch, and each recomputed attention too.

An op whose dropout probability is 0 draws nothing: the wrappers go, the op stays, and the saved
generator state becomes an empty byte tensor (the backward no longer reads it). Ops that do draw
(dropout above 0) are saved for the backward instead of recomputed (`save_drawn_random_ops`,
before the partitioner): no wrapper is made for them, and the backward reads the forward's mask.
A wrapper still left keeps its graph in PyTorch, as `explain` reports.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx


def _hops():
    hop = getattr(torch.ops, "higher_order", None)
    return (getattr(hop, "run_and_save_rng_state", None), getattr(hop, "run_with_rng_state", None))


def _draws_nothing(op, args: tuple, kwargs: dict) -> bool:
    """Whether `op` has a dropout probability argument, and it is 0 in this call."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return False
    for i, arg in enumerate(schema.arguments):
        if arg.name == "dropout_p":
            value = kwargs.get("dropout_p", args[i] if i < len(args) else arg.default_value)
            return isinstance(value, (int, float)) and value == 0
    return False


def save_drawn_random_ops(joint: fx.GraphModule) -> int:
    """Marks the checkpointed ops that do draw random numbers (dropout above 0) to be saved for
    the backward rather than recomputed: their recomputation would need the forward's draws
    replayed, which the RNG wrappers do and no compile takes. Costs their outputs' memory (a
    dropout's result and mask), as without checkpointing; how many it marked."""
    from torch.utils.checkpoint import CheckpointPolicy

    marked = 0
    for n in joint.graph.nodes:
        tags = getattr(n.target, "tags", ())
        if n.op != "call_function" or torch.Tag.nondeterministic_seeded not in tags:
            continue
        if n.meta.get("recompute") not in (CheckpointPolicy.MUST_RECOMPUTE, CheckpointPolicy.PREFER_RECOMPUTE):
            continue
        if _draws_nothing(n.target, n.args, dict(n.kwargs)):
            continue
        if isinstance(n.meta.get("val"), (tuple, list)):  # a tuple is saved as its tensors (dropout's
            n.meta["recompute"] = CheckpointPolicy.PREFER_SAVE  # result and mask): "must" would conflict
            for user in n.users:
                if user.target is operator.getitem:
                    user.meta["recompute"] = CheckpointPolicy.MUST_SAVE
        else:
            n.meta["recompute"] = CheckpointPolicy.MUST_SAVE
        marked += 1
    return marked


def unwrap_seedless(gm: fx.GraphModule) -> int:
    """Replaces the RNG wrappers of ops that draw nothing by the ops; how many it replaced."""
    save, replay = _hops()
    if save is None or replay is None:
        return 0
    graph, done = gm.graph, 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in (save, replay):
            continue
        op, args = (n.args[0], n.args[1:]) if n.target is save else (n.args[1], n.args[2:])
        if not _draws_nothing(op, args, dict(n.kwargs)):
            continue
        with graph.inserting_before(n):
            call = graph.call_function(op, tuple(args), dict(n.kwargs))
        call.meta = dict(n.meta)  # the partitioner's wrappers carry no "val"; the getitems may
        if n.target is replay:
            n.replace_all_uses_with(call)
        else:  # (state, result): the state as an empty byte tensor, which the backward never reads now
            # on the op's device: the backward takes it as an input, checked against its target's device
            device = next((a.meta["val"].device for a in args if isinstance(a, fx.Node)
                           and isinstance(a.meta.get("val"), torch.Tensor)), torch.device("cpu"))
            with graph.inserting_before(n):
                state = graph.call_function(torch.ops.aten.empty.memory_format, ([0],),
                                            {"dtype": torch.uint8, "device": device})
            for user in list(n.users):  # getitems only: the wrapper returns a pair
                if user.args[1] == 1 and "val" in user.meta:
                    call.meta["val"] = user.meta["val"]
                user.replace_all_uses_with(state if user.args[1] == 0 else call)
                graph.erase_node(user)
        graph.erase_node(n)
        done += 1
    if done:
        graph.lint()
        gm.recompile()
    return done
