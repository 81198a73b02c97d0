"""The Ascend (CANN) backend: a stub that writes the hand-off an Ascend toolchain takes in."""
from __future__ import annotations

from ..sdk import Backend


class CannBackend(Backend):
    name = "cann"
    archs = ("ascend910b",)
    warp_size = 32
    device_type = "npu"

    @classmethod
    def is_available(cls) -> bool:
        return False

    @classmethod
    def unavailable_reason(cls) -> str:
        return "the CANN toolkit and torch_npu are not installed"
