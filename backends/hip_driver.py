"""The HIP module API through ctypes: the few calls that load an hsaco and launch it.

Every call's hipError_t is checked; a failure raises BackendError naming the call and HIP's own
name and text for the error. HIP has no contexts to manage: a module belongs to the device current
when it loads, so loads and launches run with the kernel's device made current.
"""
from __future__ import annotations

import functools
from ctypes import POINTER, byref, c_char_p, c_int, c_uint, c_void_p
from dataclasses import dataclass

from .sdk import BackendError
from .shared_library import BoundCalls, open_library

HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0  # hipFunction_attribute, from hip/driver_types.h

_PROTOTYPES = {
    "hipGetErrorName": ([c_int], c_char_p),
    "hipGetErrorString": ([c_int], c_char_p),
    "hipGetDevice": ([POINTER(c_int)], c_int),
    "hipSetDevice": ([c_int], c_int),
    "hipModuleLoadData": ([POINTER(c_void_p), c_char_p], c_int),
    "hipModuleGetFunction": ([POINTER(c_void_p), c_void_p, c_char_p], c_int),
    "hipFuncGetAttribute": ([POINTER(c_int), c_int, c_void_p], c_int),
    "hipModuleLaunchKernel": ([c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                               POINTER(c_void_p), POINTER(c_void_p)], c_int),
    "hipModuleLaunchCooperativeKernel": ([c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                                          POINTER(c_void_p)], c_int),
}


@dataclass
class Function:
    module: int
    function: int
    device: int


class HipDriver:
    vendor = "rocm"

    def __init__(self, names: tuple[str, ...] = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6")):
        self.lib = open_library(names, "the HIP runtime library, through which hsaco code objects are loaded and "
                                       "launched")
        self._call = BoundCalls(self.lib, _PROTOTYPES, "the HIP runtime library", "update ROCm")

    def error_text(self, result: int) -> str:
        name = self._call("hipGetErrorName")(result) or b"hipErrorUnknown"
        text = self._call("hipGetErrorString")(result) or b"unknown error"
        return f"{name.decode()} ({result}): {text.decode()}"

    def check(self, call: str, result: int) -> None:
        if result != 0:
            raise BackendError(f"{call} failed: {self.error_text(result)}")

    def _enter(self, device: int) -> int:
        """Makes `device` current; returns the device to restore (or -1 for none)."""
        current = c_int()
        self.check("hipGetDevice", self._call("hipGetDevice")(byref(current)))
        if current.value == device:
            return -1
        self.check("hipSetDevice", self._call("hipSetDevice")(device))
        return current.value

    def _leave(self, previous: int) -> None:
        if previous >= 0:
            self.check("hipSetDevice", self._call("hipSetDevice")(previous))

    def load(self, image: bytes, name: str, device: int, block: int, shared: int, num_ctas: int = 1) -> Function:
        if num_ctas != 1:
            raise BackendError(f"kernel {name} was compiled for clusters of {num_ctas} workgroups, which the HIP "
                               f"launcher does not start")
        previous = self._enter(device)
        try:
            module, function = c_void_p(), c_void_p()
            self.check("hipModuleLoadData", self._call("hipModuleLoadData")(byref(module), image))
            self.check(f"hipModuleGetFunction({name})",
                       self._call("hipModuleGetFunction")(byref(function), module, name.encode()))
            most = c_int()
            self.check("hipFuncGetAttribute", self._call("hipFuncGetAttribute")(
                byref(most), HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function))
            if block > most.value:
                raise BackendError(f"kernel {name} needs {block} threads per workgroup, but on this device the loaded "
                                   f"function allows at most {most.value}")
        finally:
            self._leave(previous)
        return Function(module.value, function.value, device)

    def launch(self, fn: Function, grid: tuple[int, int, int], block: int, shared: int, stream: int, params,
               *, num_ctas: int = 1, cooperative: bool = False, pdl: bool = False) -> None:
        previous = self._enter(fn.device)
        try:
            if cooperative:
                self.check("hipModuleLaunchCooperativeKernel", self._call("hipModuleLaunchCooperativeKernel")(
                    fn.function, grid[0], grid[1], grid[2], block, 1, 1, shared, stream, params))
            else:
                self.check("hipModuleLaunchKernel", self._call("hipModuleLaunchKernel")(
                    fn.function, grid[0], grid[1], grid[2], block, 1, 1, shared, stream, params, None))
        finally:
            self._leave(previous)


@functools.lru_cache(maxsize=None)
def driver() -> HipDriver:
    """The process's one binding of the HIP runtime (opened on first use)."""
    return HipDriver()


__all__ = ["Function", "HipDriver", "driver"]
