"""Source locations of captured ops: the module path and the user's `file:line` of each ATen op."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

import torch

_FRAME = re.compile(r'File "([^"]+)", line ([0-9]+), in (\S+)')

# Frames inside these trees are plumbing, not the user's model: the op's location is the innermost
# frame outside them (for nn.Linear that is the line calling the layer, not torch's linear.py).
_TORCH = os.path.dirname(torch.__file__) + os.sep
_UNIORCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@dataclass(frozen=True)
class SourceLoc:
    module_path: str  # "" for the root module; "layers.0.attn" for a submodule
    module_type: str  # "torch.nn.modules.linear.Linear"
    file: Optional[str]
    line: Optional[int]
    frames: tuple = ()  # ((file, line, func), ...) user frames, outermost first

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else "<unknown>"
        return f"{self.module_path or '<root>'} @ {where}"


def user_frames(stack_trace: Optional[str]) -> list[tuple[str, int, str]]:
    frames = [(f, int(l), fn) for f, l, fn in _FRAME.findall(stack_trace or "")]
    frames = [fr for fr in frames if not fr[0].startswith(_UNIORCH)]  # our own wrappers: never
    user = [fr for fr in frames if not fr[0].startswith(_TORCH)]
    # nn.Sequential and friends have no forward of the user's: torch.nn's line is the best we have
    return user or frames


def node_source_loc(node: torch.fx.Node) -> SourceLoc:
    stack = node.meta.get("nn_module_stack") or {}
    path, mtype = "", ""
    if stack:
        path, mtype = list(stack.values())[-1]
        mtype = mtype if isinstance(mtype, str) else f"{mtype.__module__}.{mtype.__qualname__}"
    # export names the root "" and nested paths like "L__self__.layers.0"; keep the plain dotted path.
    path = re.sub(r"^L__self__\.?", "", path or "")
    frames = user_frames(node.meta.get("stack_trace"))
    file, line = (frames[-1][0], frames[-1][1]) if frames else (None, None)
    return SourceLoc(path, mtype, file, line, tuple(frames))
