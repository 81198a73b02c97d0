"""The CUDA driver API through ctypes: the few calls that load a cubin and launch it.

Every call's CUresult is checked; a failure raises BackendError naming the call and the driver's
own name and text for the error (cuGetErrorName / cuGetErrorString). Modules load into the
device's primary context, the one torch's runtime uses, so tensors' addresses are valid there.
"""
from __future__ import annotations

import ctypes
import functools
from ctypes import POINTER, byref, c_char, c_char_p, c_int, c_uint, c_uint64, c_void_p
from dataclasses import dataclass

from .sdk import BackendError
from .shared_library import BoundCalls, open_library

# enum values from cuda.h (tests compare the structures below with the header)
CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
CU_CLUSTER_SCHEDULING_POLICY_SPREAD = 1
# dynamic shared memory above this needs the function's opt-in (cuFuncSetAttribute)
DEFAULT_SHARED_LIMIT = 48 * 1024


class ClusterDim(ctypes.Structure):
    _fields_ = [("x", c_uint), ("y", c_uint), ("z", c_uint)]


class LaunchAttributeValue(ctypes.Union):
    _fields_ = [("pad", c_char * 64), ("cooperative", c_int), ("clusterDim", ClusterDim),
                ("clusterSchedulingPolicyPreference", c_int), ("programmaticStreamSerializationAllowed", c_int),
                ("_align", c_uint64)]  # the header's union holds pointers: 8-byte aligned


class LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", c_int), ("pad", c_char * 4), ("value", LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", c_uint), ("gridDimY", c_uint), ("gridDimZ", c_uint), ("blockDimX", c_uint),
                ("blockDimY", c_uint), ("blockDimZ", c_uint), ("sharedMemBytes", c_uint), ("hStream", c_void_p),
                ("attrs", POINTER(LaunchAttribute)), ("numAttrs", c_uint)]


_PROTOTYPES = {
    "cuInit": [c_uint],
    "cuGetErrorName": [c_int, POINTER(c_char_p)],
    "cuGetErrorString": [c_int, POINTER(c_char_p)],
    "cuDeviceGet": [POINTER(c_int), c_int],
    "cuDeviceGetAttribute": [POINTER(c_int), c_int, c_int],
    "cuDevicePrimaryCtxRetain": [POINTER(c_void_p), c_int],
    "cuCtxGetCurrent": [POINTER(c_void_p)],
    "cuCtxPushCurrent_v2": [c_void_p],
    "cuCtxPopCurrent_v2": [POINTER(c_void_p)],
    "cuModuleLoadData": [POINTER(c_void_p), c_char_p],
    "cuModuleGetFunction": [POINTER(c_void_p), c_void_p, c_char_p],
    "cuFuncGetAttribute": [POINTER(c_int), c_int, c_void_p],
    "cuFuncSetAttribute": [c_void_p, c_int, c_int],
    "cuLaunchKernel": [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p, POINTER(c_void_p),
                       POINTER(c_void_p)],
    "cuLaunchKernelEx": [POINTER(LaunchConfig), c_void_p, POINTER(c_void_p), POINTER(c_void_p)],
}


@dataclass
class Function:
    """A loaded kernel: its module, function and the context they belong to."""

    module: int
    function: int
    context: int
    device: int


class CudaDriver:
    vendor = "cuda"

    def __init__(self, names: tuple[str, ...] = ("libcuda.so.1", "libcuda.so")):
        self.lib = open_library(names, "the NVIDIA driver library, through which cubins are loaded and launched")
        # every driver call returns a CUresult
        self._call = BoundCalls(self.lib, {k: (v, c_int) for k, v in _PROTOTYPES.items()},
                                "the NVIDIA driver library", "update the NVIDIA driver")
        self._contexts: dict[int, int] = {}
        self.check("cuInit", self._call("cuInit")(0))

    def error_text(self, result: int) -> str:
        name, text = c_char_p(), c_char_p()
        self._call("cuGetErrorName")(result, byref(name))
        self._call("cuGetErrorString")(result, byref(text))
        return f"{(name.value or b'CUDA_ERROR_UNKNOWN').decode()} ({result}): {(text.value or b'unknown error').decode()}"

    def check(self, call: str, result: int) -> None:
        if result != 0:
            raise BackendError(f"{call} failed: {self.error_text(result)}")

    def _int(self, call: str, *args) -> int:
        out = c_int()
        self.check(call, self._call(call)(byref(out), *args))
        return out.value

    def primary_context(self, device: int) -> int:
        ctx = self._contexts.get(device)
        if ctx is None:
            handle = c_void_p()
            self.check("cuDevicePrimaryCtxRetain",
                       self._call("cuDevicePrimaryCtxRetain")(byref(handle), self._int("cuDeviceGet", device)))
            ctx = self._contexts[device] = handle.value
        return ctx

    def _enter(self, ctx: int) -> bool:
        """Makes `ctx` current unless it is; True when it was pushed (and must be popped)."""
        current = c_void_p()
        self.check("cuCtxGetCurrent", self._call("cuCtxGetCurrent")(byref(current)))
        if current.value == ctx:
            return False
        self.check("cuCtxPushCurrent", self._call("cuCtxPushCurrent_v2")(ctx))
        return True

    def _leave(self, pushed: bool) -> None:
        if pushed:
            self.check("cuCtxPopCurrent", self._call("cuCtxPopCurrent_v2")(byref(c_void_p())))

    def load(self, image: bytes, name: str, device: int, block: int, shared: int, num_ctas: int = 1) -> Function:
        ctx = self.primary_context(device)
        pushed = self._enter(ctx)
        try:
            module, function = c_void_p(), c_void_p()
            self.check("cuModuleLoadData", self._call("cuModuleLoadData")(byref(module), image))
            self.check(f"cuModuleGetFunction({name})",
                       self._call("cuModuleGetFunction")(byref(function), module, name.encode()))
            most = self._int("cuFuncGetAttribute", CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function)
            if block > most:
                raise BackendError(f"kernel {name} needs {block} threads per block, but on this device the loaded "
                                   f"function allows at most {most}")
            if shared > DEFAULT_SHARED_LIMIT:
                optin = self._int("cuDeviceGetAttribute", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                  self._int("cuDeviceGet", device))
                static = self._int("cuFuncGetAttribute", CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function)
                if shared + static > optin:
                    raise BackendError(f"kernel {name} needs {shared + static} bytes of shared memory per block; this "
                                       f"device allows {optin}")
                self.check("cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                           self._call("cuFuncSetAttribute")(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                            shared))
            if num_ctas == 16:  # a cluster of 16 is past the portable 8 (Hopper and Blackwell run it)
                self.check("cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED)",
                           self._call("cuFuncSetAttribute")(function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                                            1))
        finally:
            self._leave(pushed)
        return Function(module.value, function.value, ctx, device)

    def launch(self, fn: Function, grid: tuple[int, int, int], block: int, shared: int, stream: int, params,
               *, num_ctas: int = 1, cooperative: bool = False, pdl: bool = False) -> None:
        """One launch of `fn` on `stream`; `params` is a `void*[]` of pointers to each argument."""
        pushed = self._enter(fn.context)
        try:
            if num_ctas == 1 and not cooperative and not pdl:
                self.check("cuLaunchKernel", self._call("cuLaunchKernel")(
                    fn.function, grid[0], grid[1], grid[2], block, 1, 1, shared, stream, params, None))
                return
            config, attrs = launch_config(grid, block, shared, stream, num_ctas=num_ctas, cooperative=cooperative,
                                          pdl=pdl)
            self.check("cuLaunchKernelEx", self._call("cuLaunchKernelEx")(byref(config), fn.function, params, None))
            del attrs
        finally:
            self._leave(pushed)


def launch_config(grid, block: int, shared: int, stream: int, *, num_ctas: int = 1, cooperative: bool = False,
                  pdl: bool = False) -> tuple[LaunchConfig, ctypes.Array]:
    """cuLaunchKernelEx's config for a launch with clusters / cooperative / PDL attributes, as
    Triton's own launcher builds it: the grid's x counts clusters, so it is scaled by their size.
    The attribute array is returned too: the config points into it."""
    chosen = []
    if pdl:
        a = LaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
        a.value.programmaticStreamSerializationAllowed = 1
        chosen.append(a)
    if cooperative:
        a = LaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
        a.value.cooperative = 1
        chosen.append(a)
    if num_ctas != 1:
        a = LaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        a.value.clusterDim = ClusterDim(num_ctas, 1, 1)
        chosen.append(a)
        a = LaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
        a.value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD
        chosen.append(a)
    attrs = (LaunchAttribute * max(1, len(chosen)))(*chosen)
    config = LaunchConfig(grid[0] * num_ctas, grid[1], grid[2], block, 1, 1, shared, stream,
                          ctypes.cast(attrs, POINTER(LaunchAttribute)), len(chosen))
    return config, attrs


@functools.lru_cache(maxsize=None)
def driver() -> CudaDriver:
    """The process's one binding of libcuda (opened on first use: loading a bundle never needs it)."""
    return CudaDriver()


__all__ = ["CudaDriver", "Function", "LaunchAttribute", "LaunchConfig", "driver", "launch_config"]
