"""A kernel binary's launch ABI, read from the text its compiler wrote, and uniorch's arguments
packed to it.

A bundle's cubin / hsaco is launched through the vendor driver, not through the Triton that built
it, so nothing here assumes what that Triton's launcher would have done: the parameter list comes
from the PTX `.entry` kept beside the cubin, or from the `amdhsa.kernels` metadata of the AMDGCN
kept beside the hsaco, and uniorch's runtime arguments (`sdk.tensor_args`) are matched to it kind
by kind and size by size when the kernel loads, so a mismatch is an error naming the kernel rather
than a kernel reading garbage.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Optional

from .sdk import BackendError

# What each Triton version's launcher passes after the kernel's own arguments (read in the
# make_launcher / launch code of Triton 3.6 and 3.9, NVIDIA and AMD alike): a global scratch
# buffer, then a profiler scratch buffer. Both are pointers in the kernel's parameter list.
TRAILING_PARAMS = {(3, 6): ("global_scratch", "profile_scratch"), (3, 7): ("global_scratch", "profile_scratch"),
                   (3, 8): ("global_scratch", "profile_scratch"), (3, 9): ("global_scratch", "profile_scratch")}

# Triton signature type -> (kind, bytes, struct code). Float arguments keep their own kind, since
# NVIDIA declares them apart from integers; AMD's `by_value` matches either.
_SCALARS = {"i1": ("int", 1, "B"), "i8": ("int", 1, "b"), "i16": ("int", 2, "h"), "i32": ("int", 4, "i"),
            "i64": ("int", 8, "q"), "u1": ("int", 1, "B"), "u8": ("int", 1, "B"), "u16": ("int", 2, "H"),
            "u32": ("int", 4, "I"), "u64": ("int", 8, "Q"), "fp16": ("float", 2, "e"), "fp32": ("float", 4, "f"),
            "fp64": ("float", 8, "d")}


@dataclass(frozen=True)
class Param:
    """One parameter as the binary declares it."""

    name: str
    kind: str  # "pointer" | "int" | "float" | "value" (AMD by_value: int or float) | "bytes" (aggregates)
    size: int
    offset: int  # in the kernel's argument buffer
    pointee_align: int = 1  # PTX `.ptr .align N`: the kernel assumes the address is a multiple of N

    def describe(self) -> str:
        return f"{self.kind}/{self.size}B"


@dataclass(frozen=True)
class ABI:
    """A kernel's parameters and block-size bound, from its PTX or AMDGCN."""

    kernel: str
    params: tuple[Param, ...]
    size: int  # bytes of the argument buffer the parameters span
    max_block: Optional[int] = None  # threads per block it allows at most
    exact_block: bool = False  # PTX `.reqntid`: the block must be exactly max_block
    marks_pointers: bool = True  # False for PTX that declares pointers as plain .u64


# -- NVIDIA: the PTX .entry ---------------------------------------------------------------------
_PTX_PARAM = re.compile(
    r"\.param\s+(?:\.align\s+(?P<align>\d+)\s+)?\.(?P<cls>[busf])(?P<bits>\d+)\s+"
    r"(?:(?P<ptr>\.ptr)(?:\s+\.(?:global|const|local|shared))?(?:\s+\.align\s+(?P<pointee>\d+))?\s+)?"
    r"(?P<name>[\w$]+)(?:\[(?P<count>\d+)\])?\s*$")


def parse_ptx(ptx: str, kernel: str) -> ABI:
    """The parameters of `.entry <kernel>(...)`. PTX gives no offsets: each parameter sits at the
    next multiple of its alignment, as the CUDA driver lays out the parameter buffer."""
    m = re.search(r"\.entry\s+" + re.escape(kernel) + r"\s*\((?P<params>[^)]*)\)(?P<after>[^{]*)\{", ptx)
    if m is None:
        raise BackendError(f"kernel {kernel}: its PTX has no `.entry {kernel}(...)`")
    params, offset, end = [], 0, 0
    text = m.group("params").strip()
    for i, decl in enumerate(d.strip() for d in text.split(",") if text):
        p = _PTX_PARAM.match(decl)
        if p is None:
            raise BackendError(f"kernel {kernel}: cannot read PTX parameter {i}: {decl!r}")
        elem = int(p.group("bits")) // 8
        count = int(p.group("count") or 1)
        size = elem * count
        align = int(p.group("align") or elem)
        if p.group("ptr"):
            kind = "pointer"
        elif count > 1:
            kind = "bytes"
        else:
            kind = "float" if p.group("cls") == "f" else "int"
        offset = -(-offset // align) * align
        params.append(Param(p.group("name"), kind, size, offset, int(p.group("pointee") or 1)))
        offset += size
        end = offset
    after = m.group("after")
    req = re.search(r"\.reqntid\s+([\d\s,]+)", after)
    most = re.search(r"\.maxntid\s+([\d\s,]+)", after)
    bound, exact = None, False
    if req or most:
        dims = [int(d) for d in (req or most).group(1).replace(",", " ").split()]
        bound, exact = _product(dims), bool(req)
    marks = any(p.kind == "pointer" for p in params) or not params
    return ABI(kernel, tuple(params), end, bound, exact, marks)


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


# -- AMD: the amdhsa.kernels metadata in the AMDGCN ---------------------------------------------
def parse_amdgcn(amdgcn: str, kernel: str) -> ABI:
    """The explicit arguments of `kernel` in the code object metadata (YAML in the AMDGCN text, the
    same document the hsaco's note holds). Hidden arguments are left out: when the launch passes
    `kernelParams`, HIP fills them itself."""
    start = amdgcn.find("amdhsa.kernels:")
    if start < 0:
        raise BackendError(f"kernel {kernel}: its AMDGCN has no amdhsa.kernels metadata")
    end = amdgcn.find(".end_amdgpu_metadata", start)
    lines = amdgcn[start:end if end > 0 else len(amdgcn)].splitlines()[1:]
    for entry in _yaml_items(lines, top=True):
        fields, args = _kernel_fields(entry)
        if fields.get(".name") != kernel:
            continue
        params = []
        for i, arg in enumerate(args):
            vk = arg.get(".value_kind", "")
            if vk.startswith("hidden_"):
                continue
            kind = {"global_buffer": "pointer", "by_value": "value"}.get(vk, "bytes")
            try:
                params.append(Param(arg.get(".name", f"arg{i}"), kind, int(arg[".size"]), int(arg[".offset"])))
            except (KeyError, ValueError):
                raise BackendError(f"kernel {kernel}: argument {i} of its amdhsa metadata lacks .size or .offset: "
                                   f"{arg}") from None
        size = max((p.offset + p.size for p in params), default=0)
        bound = int(fields[".max_flat_workgroup_size"]) if ".max_flat_workgroup_size" in fields else None
        return ABI(kernel, tuple(params), size, bound, False, True)
    raise BackendError(f"kernel {kernel}: its AMDGCN's amdhsa.kernels metadata has no kernel named {kernel}")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _yaml_items(lines: list[str], top: bool = False) -> list[list[str]]:
    """The items of a YAML block sequence, each as its lines with the `- ` made an indent; for the
    top level, the sequence ends at the first line back at column 0 (`amdhsa.target:` follows)."""
    items: list[list[str]] = []
    dash = None
    for line in lines:
        if not line.strip():
            continue
        if top and _indent(line) == 0:
            break
        stripped = line.lstrip(" ")
        if stripped.startswith("- ") and (dash is None or _indent(line) == dash):
            dash = _indent(line)
            items.append([" " * (dash + 2) + stripped[2:]])
        elif items:
            items[-1].append(line)
    return items


def _kernel_fields(entry: list[str]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """A kernel's scalar fields at its own level, and its `.args` as one dict per argument."""
    base = _indent(entry[0])
    fields: dict[str, str] = {}
    args: list[dict[str, str]] = []
    i = 0
    while i < len(entry):
        line = entry[i]
        key, _, value = line.strip().partition(":")
        if _indent(line) == base and key == ".args":
            block = []
            i += 1
            while i < len(entry) and _indent(entry[i]) > base:
                block.append(entry[i])
                i += 1
            for item in _yaml_items(block):
                arg = {}
                for field_line in item:
                    k, _, v = field_line.strip().partition(":")
                    arg[k] = v.strip()
                args.append(arg)
            continue
        if _indent(line) == base:
            fields[key] = value.strip()
        i += 1
    return fields, args


# -- uniorch's arguments, matched to the binary's parameters ------------------------------------
def trailing_params(triton_version: str, kernel: str) -> tuple[str, ...]:
    """What the Triton that compiled the kernel appends to its parameters."""
    m = re.match(r"(\d+)\.(\d+)", str(triton_version or ""))
    if m is None:
        raise BackendError(f"kernel {kernel}: its metadata names no Triton version (\"triton_version\"), so the "
                           f"parameters Triton appended to it are unknown; compile it again with uniorch.compile_aot")
    version = (int(m.group(1)), int(m.group(2)))
    oldest, newest = min(TRAILING_PARAMS), max(TRAILING_PARAMS)
    if version < oldest:
        raise BackendError(f"kernel {kernel} was compiled by Triton {triton_version}, older than Triton "
                           f"{oldest[0]}.{oldest[1]}, the oldest whose launch ABI uniorch knows; compile it again")
    # a newer Triton is taken to append what the newest known one does; if it changed that, the
    # parameter check in `bind` names the difference
    return TRAILING_PARAMS.get(version, TRAILING_PARAMS[newest])


@dataclass(frozen=True)
class Slot:
    """One parameter and where its value comes from: a runtime argument (its index in
    `tensor_args`) or a Triton extra ("global_scratch", "profile_scratch")."""

    name: str
    type: str  # Triton signature type ("*fp32", "i64", ...)
    source: object  # int | str
    param: Param


@dataclass
class Binding:
    """uniorch's arguments mapped onto a binary's parameters: checked once, packed per launch."""

    kernel: str
    abi: ABI
    slots: list[Slot]
    fixed: dict[int, int] = field(default_factory=dict)  # runtime args compiled in: index -> value
    nargs: int = 0  # runtime arguments a launch passes (`tensor_args`)
    size: int = field(init=False, default=0)  # bytes of the packed argument buffer
    _format: str = field(init=False, default="", repr=False)

    def __post_init__(self):
        fmt, at = "<", 0
        for s in self.slots:
            fmt += "x" * (s.param.offset - at) + _code(s)
            at = s.param.offset + s.param.size
        self._format = fmt
        self.size = max(self.abi.size, at)

    @property
    def offsets(self) -> list[int]:
        return [s.param.offset for s in self.slots]

    def values(self, args: list, extras: dict[str, int]) -> list:
        """The value of every parameter, in order, from the runtime arguments (tensors given as
        their addresses) and Triton's extras."""
        if len(args) != self.nargs:
            raise BackendError(f"kernel {self.kernel}: launched with {len(args)} arguments, its launch contract "
                               f"has {self.nargs}")
        for i, want in self.fixed.items():
            if args[i] != want:
                raise BackendError(f"kernel {self.kernel}: argument {i} was compiled in as {want}, got {args[i]}")
        return [args[s.source] if isinstance(s.source, int) else extras[s.source] for s in self.slots]

    def pack(self, values: list) -> bytes:
        """The argument buffer: each value at its parameter's offset, at the size the binary declares."""
        for s, v in zip(self.slots, values):
            if s.param.pointee_align > 1 and v % s.param.pointee_align:
                raise BackendError(f"kernel {self.kernel}: {s.name} is at address {v:#x}, but the kernel was compiled "
                                   f"for {s.param.pointee_align}-byte aligned data")
        try:
            return struct.pack(self._format, *values)
        except struct.error as err:
            bad = next((s for s, v in zip(self.slots, values) if not _fits(s, v)), None)
            where = f" ({bad.name} as {_code(bad)!r})" if bad is not None else ""
            raise BackendError(f"kernel {self.kernel}: an argument does not fit its parameter{where}: {err}") from None


def _code(slot: Slot) -> str:
    if slot.type.startswith("*"):
        return {8: "Q", 4: "I"}[slot.param.size]
    return _SCALARS[slot.type][2]


def _fits(slot: Slot, value) -> bool:
    try:
        struct.pack("<" + _code(slot), value)
        return True
    except struct.error:
        return False


def _describe_type(ty: str) -> str:
    if ty.startswith("*"):
        return "pointer/8B"
    kind, size, _ = _SCALARS[ty]
    return f"{kind}/{size}B"


def _accepts(ty: str, param: Param, abi: ABI) -> bool:
    if ty.startswith("*"):
        if param.kind == "pointer":
            return param.size in (4, 8)
        return not abi.marks_pointers and param.kind == "int" and param.size == 8
    kind, size, _ = _SCALARS[ty]
    return param.size == size and param.kind in (kind, "value")


def bind(ks, metadata: dict, abi: ABI) -> Binding:
    """Matches a kernel's launch contract (`KernelSource`: pointer then strides per tensor, with the
    signature Triton compiled it for) plus the Triton extras onto the binary's parameters.

    Triton makes a parameter of every signature entry that is not `constexpr` (uniorch's block
    sizes are; a runtime argument would be too if a compile specialized it, and is then checked
    against its compiled value at each launch instead of passed)."""
    kernel = abi.kernel
    sig = ks.signature()
    names = ks.arg_names()
    slots_from: list[tuple[str, str, object]] = []
    fixed: dict[int, int] = {}
    compiled_in = ks.compile_constexprs() if hasattr(ks, "compile_constexprs") else ks.constexprs
    for i, name in enumerate(names):
        ty = sig[name]
        if ty == "constexpr":
            fixed[i] = compiled_in[name]
            continue
        if not ty.startswith("*") and ty not in _SCALARS:
            raise BackendError(f"kernel {kernel}: argument {name} has type {ty}, which the driver launcher cannot pass")
        slots_from.append((name, ty, i))
    for extra in trailing_params(metadata.get("triton_version"), kernel):
        slots_from.append((extra, "*i8", extra))
    want = [f"{n}:{_describe_type(t)}" for n, t, _ in slots_from]
    have = [f"{p.name}:{p.describe()}" for p in abi.params]
    if len(slots_from) != len(abi.params):
        raise BackendError(f"kernel {kernel}: the binary declares {len(abi.params)} parameters but uniorch passes "
                           f"{len(slots_from)}; expected [{', '.join(want)}], the binary has [{', '.join(have)}]")
    for (name, ty, _), param, w, h in zip(slots_from, abi.params, want, have):
        if not _accepts(ty, param, abi):
            raise BackendError(f"kernel {kernel}: parameter {param.name} of the binary is {param.describe()}, but "
                               f"uniorch passes {name} ({ty}) there; expected [{', '.join(want)}], the binary has "
                               f"[{', '.join(have)}]")
    slots = [Slot(n, t, src, p) for (n, t, src), p in zip(slots_from, abi.params)]
    return Binding(kernel, abi, slots, fixed, len(names))


__all__ = ["ABI", "Binding", "Param", "Slot", "TRAILING_PARAMS", "bind", "parse_amdgcn", "parse_ptx", "trailing_params"]
