"""Counts ops, by op name or by the model submodule that produced them (from `loc("path"(...))`).

Engineers use it to see where a model's ops come from before and after fusion, e.g.
`uniorch-opt model.py:make -p 'uniorch-op-stats{group-by=module}'`. Leaves the IR unchanged.
"""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass

from torch_mlir import ir

from uniorch.errors import PipelineError

from .base import Pass, PassContext

_NAME_LOC = re.compile(r'^loc\("((?:[^"\\]|\\.)*)"\(')


@dataclass(frozen=True)
class OpStats(Pass):
    name = "uniorch-op-stats"
    summary = "print op counts (group-by=op|module|dialect) to stderr; IR unchanged"
    group_by: str = "op"

    def __post_init__(self):
        # checked when the pipeline text is parsed, so a typo fails before any input is read or lowered
        if self.group_by not in ("op", "module", "dialect"):
            raise PipelineError(f"pass '{self.name}' option 'group-by' must be op, module or dialect, not '{self.group_by}'")

    def run(self, module, pctx: PassContext) -> None:
        counts: collections.Counter = collections.Counter()
        top = module.operation

        def visit(op):
            if op == top or op.name in ("func.func", "func.return") or op.parent and op.parent.name.startswith("linalg."):
                return ir.WalkResult.ADVANCE
            counts[self._key(op)] += 1
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        width = max((len(k) for k in counts), default=10)
        print(f"// uniorch-op-stats (group-by={self.group_by})", file=pctx.out)
        for key, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"//   {key:<{width}}  {n}", file=pctx.out)

    def _key(self, op) -> str:
        if self.group_by == "dialect":
            return op.name.split(".", 1)[0]
        if self.group_by == "module":
            m = _NAME_LOC.match(str(op.location))
            return m.group(1) if m else "<root>"
        return op.name
