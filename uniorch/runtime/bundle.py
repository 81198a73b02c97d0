"""The ahead-of-time bundle: a directory that runs a compiled model on its target, recompiling nothing.

    manifest.json                   format version, versions, target, input/output specs, regions,
                                    kernels and their stage files, fallbacks, sha256 of every file
    graph.json                      the program: placeholders, region calls, eager ATen ops (graph_json)
    weights.pt                      parameters, buffers, lifted constants by name (torch.save)
    regions/region_N/scheduled.mlir the region's launch plan, as `uniorch-schedule` left it
    regions/region_N/eager.json     the region's ATen ops, run if one of its kernels fails to launch
    kernel/<name>.<stage>           every stage's output ("triton", "ttir", …, "cubin" | "hsaco")
    kernel/<name>.json              the backend's metadata and how to launch the kernel

Loading parses MLIR and JSON, reads files and hands each kernel to `backend.load_compiled`; it
never imports the capture, the pass pipeline or codegen, nor Triton for a bundle of binaries (they
launch through the vendor driver, so the Triton that built them need not be the one here, if any).
Tensors load with `weights_only=True` and graphs are JSON, so a bundle carries no code except its
kernels.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import io
import json
import os
import re
import shutil
import tempfile
import warnings
from typing import Any, Optional

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from uniorch.errors import UniorchError

from .boundary import CheckFailed, as_complex, as_pair, bounded, int_rows, laid_out, verify
from .graph_json import GraphFormatError, dump_graph, load_graph
from .size_guards import SizeGuards
from .sizes import restore_sizes

FORMAT = "uniorch-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class BundleError(UniorchError):
    """A bundle is missing, corrupted, or from an incompatible version."""


class InputSpecError(UniorchError, TypeError):
    """A loaded model was called with inputs other than those it was compiled for."""


# Triton versions whose interpreter runs uniorch's generated source (what interpret bundles hold)
TRITON_SUPPORTED = ((3, 6), (3, 9))


def _triton_version() -> Optional[str]:
    """The installed Triton's version, or None. Only saving and interpret bundles ask: kernel
    binaries launch through the vendor driver, so loading them never imports Triton."""
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def _versions() -> dict[str, Optional[str]]:
    import uniorch

    return {"uniorch": uniorch.__version__, "torch": torch.__version__.split("+")[0], "triton": _triton_version()}


# -- saving ----------------------------------------------------------------------------------------
def save(art, path: str) -> str:
    from uniorch.targets import parse_target

    captured, program = art.captured, art.program
    files: dict[str, Any] = {"graph.json": _graph_json(program.module.graph)}
    regions = []
    for name, mod in program.module.named_children():
        base = f"regions/{name}"
        files[f"{base}/scheduled.mlir"] = str(mod.compiled.module)
        if mod.eager is not None:  # ONNX regions have no ATen ops to fall back on
            files[f"{base}/eager.json"] = _graph_json(mod.eager.graph)
        index = len(regions)
        regions.append({"name": name, "mlir": f"{base}/scheduled.mlir",
                        "eager": f"{base}/eager.json" if mod.eager is not None else None,
                        "kernels": [k.name for k in art.kernels if k.region == index]})
    kernels = []
    backend = parse_target(art.target).backend
    for k in art.kernels:
        # what a toolchain outside uniorch takes in (the Ascend hand-off), beside the stage files
        handoff = backend.handoff_files(k.compiled) if k.compiled is not None else {}
        for fname, text in handoff.items():
            files[f"handoff/{k.name}/{fname}"] = text
        entry = {"name": k.name, "func": k.func, "region": k.region, "kind": k.kind, "ops": k.ops,
                 **_kernel_files(files, k.name, k.asm, k.metadata, k.source)}
        if k.specialized is not None:  # backends/specialization.py: launched where the arguments match
            sk = k.specialized
            # only what its launch reads (the binary, the text its parameters come from, the
            # source): the intermediate IRs would double a bundle, which a GPU session carries
            keep = _launch_stages(backend)
            asm = {s: o for s, o in sk.asm.items() if s in keep} if keep else sk.asm
            entry["specialized"] = _kernel_files(files, f"{k.name}.specialized", asm, sk.metadata, sk.source)
        kernels.append(entry)
    compiled = [k.compiled for k in art.kernels if k.compiled is not None]
    for fname, text in backend.handoff_bundle_files(compiled).items():
        files[f"handoff/{fname}"] = text
    inputs = _input_specs(captured)
    for spec in inputs:
        if spec["kind"] != "user" and any(isinstance(d, str) for d in spec["shape"]):
            raise BundleError(f"{spec['kind']} {spec['target']} has symbolic sizes {spec['shape']}; only inputs may")
    kept, unread = captured.size_guards
    if unread and any(isinstance(d, str) for spec in inputs for d in spec["shape"]):
        raise BundleError(f"the capture assumed a relation of its symbolic sizes that bundles cannot check: {unread[0]}")
    buf = io.BytesIO()
    torch.save(_weights(captured), buf)
    files["weights.pt"] = buf.getvalue()
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "versions": _versions(),
        "target": art.target, "device_type": parse_target(art.target).backend.device_type,
        "name": captured.name, "signature": _signature(captured.module),
        "in_spec": _treespec(captured.in_spec, "input"), "out_spec": _treespec(captured.out_spec, "output"),
        "inputs": inputs, "symbols": _symbols(captured, inputs), "size_guards": [list(g) for g in kept],
        "outputs": [_output_spec(o, captured.inputs) for o in captured.outputs],
        "constant_args": [[i, _jsonable(v)] for i, v in captured.constant_args.items()],
        "graph": "graph.json", "weights": "weights.pt", "regions": regions, "kernels": kernels,
        "fallbacks": [dataclasses.asdict(f) for f in art.fallbacks],
        "op_schemas": True,  # every graph records its operators' schemas (checked at load, not the torch version)
        "files": {rel: _sha256(_bytes(data)) for rel, data in files.items()},
    }
    files[MANIFEST] = _json(manifest)
    _write_dir(path, files)
    return path


def _launch_stages(backend) -> set:
    """The stages a driver launch of `backend`'s binaries reads; empty where it launches otherwise."""
    from uniorch.backends.binary_launch import VENDORS

    v = VENDORS.get(backend.name)
    return {"triton", v.binary, v.abi_text} if v is not None else set()


def _kernel_files(files: dict, name: str, asm: dict, metadata: dict, source) -> dict:
    """One compiled kernel's stage files and launch description, added to `files`; its manifest entry."""
    stages = {}
    for stage, out in asm.items():
        stages[stage] = files_key = f"kernel/{name}.{stage}"
        files[files_key] = out
    launch = dataclasses.asdict(source)
    launch.pop("source")  # it is the "triton" stage's file
    launch["grid"] = [g if isinstance(g, int) else str(g) for g in launch["grid"]]  # sizes: expressions
    files[f"kernel/{name}.json"] = _json({"metadata": metadata, "launch": launch})
    return {"stages": stages, "binary": [s for s, o in asm.items() if isinstance(o, bytes)],
            "info": f"kernel/{name}.json"}


def _json(obj) -> str:
    return json.dumps(obj, indent=1, allow_nan=False)


def _graph_json(graph) -> str:
    """One node per line: readable, and a diff of two bundles shows which ops changed."""
    nodes = dump_graph(graph)["nodes"]
    return '{"nodes": [\n' + ",\n".join(json.dumps(n, allow_nan=False) for n in nodes) + "\n]}\n"


def _bytes(data) -> bytes:
    return data if isinstance(data, bytes) else data.encode()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _name_return_types() -> None:
    """Gives ATen's named result tuples (torch.return_types.topk, .sort, ...) serialized names.

    PyTorch registers them as pytree nodes without one, so a model returning `torch.topk(...)`
    could not be bundled. Their context is None, so loading resolves a name, never runs code."""
    import torch.return_types as rt

    for name in dir(rt):
        cls = getattr(rt, name)
        if not (isinstance(cls, type) and pytree.is_structseq_class(cls)):
            continue
        key = f"torch.return_types.{name}"
        node = pytree.SUPPORTED_SERIALIZED_TYPES.get(cls)
        if cls in pytree.SUPPORTED_NODES and (node is None or node.serialized_type_name == pytree.NO_SERIALIZED_TYPE_NAME_FOUND):
            pytree.SUPPORTED_SERIALIZED_TYPES[cls] = pytree._SerializeNodeDef(cls, key, None, None)
            pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[key] = cls


def _treespec(spec, what: str) -> str:
    _name_return_types()
    try:
        return pytree.treespec_dumps(spec)
    except Exception as err:  # noqa: BLE001 - custom pytree nodes without a serialized name
        raise BundleError(f"the model's {what} structure cannot be stored in a bundle: {err}") from None


def _jsonable(value):
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return {"repr": repr(value)}  # recorded, not checked at call time


def _signature(module) -> list:
    from uniorch.capture.trace import _FunctionModule

    fn = module.fn if isinstance(module, _FunctionModule) else module.forward  # a plain function is wrapped
    try:
        return [[p.name, p.kind.name] for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return []


def _input_specs(captured) -> list[dict]:
    """Per graph input: kind, name, dtype and shape, each dim an int or, where the capture kept it
    symbolic, its size expression over the symbols (`"s0"`, `"2*s0"`)."""
    from .guards import _sym_expr

    vals = {n.name: n.meta.get("val") for n in captured.graph_module.graph.nodes if n.op == "placeholder"}
    specs = []
    for inp in captured.inputs:
        val = vals.get(inp.name)
        if not isinstance(val, torch.Tensor):
            raise BundleError(f"input {inp.name} has no tensor shape; bundles need its dims (static or symbolic)")
        shape, dtype = [_dim_json(_sym_expr(d)) for d in val.shape], val.dtype
        if inp.complex_dtype is not None:  # the graph takes its real pairs; callers pass the complex tensor
            shape, dtype = shape[:-1], inp.complex_dtype
        specs.append({"kind": inp.kind, "name": inp.name, "target": inp.target, "shape": shape,
                      "dtype": str(dtype).removeprefix("torch."), "pairs": inp.complex_dtype is not None})
        if inp.int_rows:  # an int argument, fed as the rows of an (n, 0) tensor (capture/int_sizes.py)
            specs[-1]["int_rows"] = True
    return specs


def _dim_json(size):
    return size if isinstance(size, int) else str(size)


def _symbols(captured, inputs: list[dict]) -> dict:
    """Each symbol an input dim is alone: the flat input and dim it is first read from, and
    export's range (`[2, null]`: 2 and up)."""
    out = {}
    for spec in inputs:
        if spec["kind"] != "user":
            continue
        for d, size in enumerate(spec["shape"]):
            if isinstance(size, str) and re.fullmatch(r"[a-z]+[0-9]+", size) and size not in out:
                lo, hi = captured.symbol_ranges.get(size, (2, None))
                out[size] = {"input": spec["target"], "dim": d, "range": [lo, hi]}
    return out


def _output_spec(o, inputs: list) -> dict:
    spec = {"kind": o.kind, "target": o.target}
    if o.view_of is not None and all(i in inputs for i in o.view_of[0]):  # capture/input_views.py
        spec["view_of"] = {"inputs": [inputs.index(i) for i in o.view_of[0]], "graph": dump_graph(o.view_of[1].graph)}
    if o.read is not None:
        spec["read"] = o.read
    if o.complex_dtype is not None:
        spec["complex"] = str(o.complex_dtype).removeprefix("torch.")
    if o.layout is not None:
        spec["layout"] = [list(o.layout[0]), o.layout[1]]
    return spec


def _weights(captured) -> dict[str, torch.Tensor]:
    params = dict(captured.module.named_parameters(remove_duplicate=False))
    buffers = dict(captured.module.named_buffers(remove_duplicate=False))
    out = {}
    for inp in captured.inputs:
        table = {"parameter": params, "buffer": buffers, "constant": captured.constants}.get(inp.kind)
        if table is not None:
            out[inp.target] = table[inp.target].detach()  # detach keeps tied weights one storage
    return out


def _write_dir(path: str, files: dict[str, Any]) -> None:
    """All files into a fresh sibling directory, then swapped in: a reader never sees half a bundle."""
    path = os.path.abspath(path)
    if os.path.exists(path) and os.listdir(path) and not os.path.exists(os.path.join(path, MANIFEST)):
        raise BundleError(f"{path} exists and is not a uniorch bundle; refusing to overwrite it")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".bundle-", dir=parent)
    for rel, data in files.items():
        full = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(_bytes(data))
    if os.path.exists(path):
        shutil.rmtree(path)
    os.replace(tmp, path)


# -- loading ---------------------------------------------------------------------------------------
def read_manifest(path: str, check_versions: bool = True) -> dict:
    """The bundle's manifest, after checking its format, versions and every file's checksum."""
    full = os.path.join(path, MANIFEST)
    if not os.path.isfile(full):
        raise BundleError(f"{path} is not a uniorch bundle: it has no {MANIFEST}")
    try:
        with open(full) as f:
            manifest = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BundleError(f"{full} is corrupted: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{full} is not a uniorch bundle manifest (no \"format\": \"{FORMAT}\")")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise BundleError(f"{path} has bundle format version {manifest.get('format_version')!r}; this uniorch "
                          f"reads version {FORMAT_VERSION}; compile it again with uniorch.compile_aot")
    missing = [k for k in ("versions", "target", "inputs", "outputs", "in_spec", "out_spec", "regions",
                           "kernels", "files", "graph", "weights") if k not in manifest]
    if missing:
        raise BundleError(f"{full} is corrupted: it lacks {', '.join(missing)}")
    if check_versions:
        _check_versions(path, manifest)
    for rel, digest in manifest["files"].items():
        try:
            with open(os.path.join(path, rel), "rb") as f:
                ok = _sha256(f.read()) == digest
        except OSError:
            raise BundleError(f"{path} is incomplete: {rel} is missing") from None
        if not ok:
            raise BundleError(f"{path} is corrupted: {rel} does not match its checksum in {MANIFEST}")
    return manifest


def _check_versions(path: str, manifest: dict) -> None:
    """The graph's ATen operators belong to the torch that captured it. Bundles record each
    operator's schema, checked one by one as the graphs load, so any torch that agrees on them runs
    the bundle (a laptop's 2.13 bundle on a GPU machine's 2.11); older bundles, without schemas,
    need the same torch major.minor. Kernel binaries need no particular Triton (they launch through the
    vendor driver, which checks each binary's arch and launch ABI as it loads); kernels kept as
    Triton source (interpret bundles) need a Triton whose interpreter uniorch supports."""
    saved = manifest["versions"]
    a, b = str(saved.get("torch")), torch.__version__.split("+")[0]
    if not manifest.get("op_schemas") and a.split(".")[:2] != b.split(".")[:2]:
        raise BundleError(f"{path} was built with torch {a}, but this process has torch {b}; compile it again "
                          f"with uniorch.compile_aot here, or load with check_versions=False at your own risk")
    kernels = manifest["kernels"]
    if not kernels or any(k.get("binary") for k in kernels):
        return
    have = _triton_version()
    lo, hi = (".".join(map(str, v)) for v in TRITON_SUPPORTED)
    if have is None:
        raise BundleError(f"{path} runs its kernels from their Triton source (target {manifest['target']}), which "
                          f"needs triton {lo} to {hi}; triton is not installed here")
    if not TRITON_SUPPORTED[0] <= _major_minor(have) <= TRITON_SUPPORTED[1]:
        raise BundleError(f"{path} runs its kernels from their Triton source (built with triton {saved.get('triton')}), "
                          f"which needs triton {lo} to {hi}; this process has triton {have}")


def _major_minor(version: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _bundle_target(path: str, text: str):
    """The bundle's target; a vendor no installed backend provides is named as a missing plugin."""
    from uniorch.backends import registry
    from uniorch.targets import TargetError, parse_target

    vendor = str(text).partition(":")[0]
    if vendor not in registry.backends():
        raise TargetError(f"bundle {path} is compiled for target '{text}', and no installed backend provides "
                          f"'{vendor}': install the backend plugin that registers it (entry point group "
                          f"'{registry.GROUP}')")
    return parse_target(text)


def load(path: str, model: Optional[torch.nn.Module] = None, check_versions: bool = True) -> "LoadedModel":
    from uniorch.backends.sdk import BackendError, availability, torch_device
    from uniorch.targets import parse_target

    path = os.fspath(path)
    manifest = read_manifest(path, check_versions)
    target = _bundle_target(path, manifest["target"])
    backend = target.backend
    ok, why = availability(type(backend))
    if not ok:
        raise BackendError(f"bundle {path} is compiled for target '{target}', which cannot run here: {why}")
    device = torch_device(backend)
    kernels = {k["name"]: k for k in manifest["kernels"]}
    root = torch.nn.Module()
    try:
        for reg in manifest["regions"]:
            entries = [kernels[n] for n in reg["kernels"]]
            root.add_module(reg["name"], _load_region(path, reg, entries, backend, str(target), device, check_versions))
        gm = fx.GraphModule(root, load_graph(_read_json(path, manifest["graph"]), device, check_versions))
    except GraphFormatError as err:
        raise BundleError(f"{path}: {err}") from None
    except (KeyError, TypeError) as err:  # a manifest that names what is not there
        raise BundleError(f"{path} is corrupted: {MANIFEST} is malformed ({type(err).__name__}: {err})") from None
    weights = {}
    if model is not None:
        _check_live_weights(manifest, model)
    if model is None or any(s["kind"] == "constant" for s in manifest["inputs"]):
        with open(os.path.join(path, manifest["weights"]), "rb") as f:
            weights = torch.load(f, weights_only=True, map_location=device)
    return LoadedModel(manifest, gm, weights, model, device)


def _read_json(path: str, rel: str):
    with open(os.path.join(path, rel)) as f:
        return json.load(f)


def _load_region(path: str, reg: dict, entries: list[dict], backend, target: str, device,
                 check_schemas: bool = True) -> "_LoadedRegion":
    from torch_mlir import ir

    from uniorch.backends.sdk import CompiledKernel
    from uniorch.codegen.source import KernelSource
    from uniorch.ir import make_context, parse_module

    from .plan import Kernel, build_plan, inplace_of

    with open(os.path.join(path, reg["mlir"])) as f:
        module = parse_module(f.read(), make_context())
    funcs = {}
    main = None
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            funcs[name] = op
            main = op if name == "main" else main
    if main is None:
        raise BundleError(f"{path}: {reg['mlir']} has no func.func @main")
    kernels = {}
    def compiled(func: str, e: dict) -> CompiledKernel:
        asm = {}
        for stage, rel in e["stages"].items():
            with open(os.path.join(path, rel), "rb" if stage in e["binary"] else "r") as f:
                asm[stage] = f.read()
        info = _read_json(path, e["info"])
        launch = dict(info["launch"], grid=tuple(info["launch"]["grid"]), source=asm["triton"])
        return CompiledKernel(func, target, KernelSource(**launch), asm, info["metadata"])

    for e in entries:
        ck = compiled(e["func"], e)
        if e.get("specialized") and backend.specializes_aot:
            fn = backend.load_compiled(ck, specialized=compiled(e["func"], e["specialized"]))
        else:
            fn = backend.load_compiled(ck)
        kernels[e["func"]] = Kernel(e["func"], ck.source, fn, inplace_of(funcs[e["func"]]), funcs[e["func"]])
    from uniorch.ir import dims

    with dims.ranges_of(main):  # the sizes' ranges and relations, as when compiled (a slice's clamp)
        plan = build_plan(module, main, kernels, lambda kernel, ins, outs, sizes=None: kernel.fn(ins, outs)
                          if sizes is None else kernel.fn(ins, outs, sizes))
    plan.device = device  # a region whose inputs are all CPU scalars, or none, still runs on the target
    eager = None
    if reg.get("eager"):
        eager = fx.GraphModule(torch.nn.Module(), load_graph(_read_json(path, reg["eager"]), device, check_schemas))
    return _LoadedRegion(reg["name"], plan, eager)


class _LoadedRegion(torch.nn.Module):
    """A region's launch plan; if a kernel fails at its first launch on this device, the region
    runs its ATen ops eagerly from then on (kernels write only their own buffers, so a retry is
    safe), with a warning, since a loaded bundle has no `explain` to report it."""

    def __init__(self, name: str, plan, eager: Optional[fx.GraphModule]):
        super().__init__()
        self.name, self.plan, self.eager = name, plan, eager
        self.failure: Optional[str] = None

    def forward(self, *inputs):
        if self.failure is None:
            try:
                return tuple(self.plan(list(inputs)))
            except Exception as err:  # noqa: BLE001 - any launch failure means: not these kernels
                if self.eager is None:
                    raise BundleError(f"{self.name} of the loaded bundle failed to launch, and it has no eager "
                                      f"fallback (compiled from ONNX): {type(err).__name__}: {err}") from err
                self.failure = f"{type(err).__name__}: {err}"
                warnings.warn(f"uniorch: {self.name} of the loaded bundle failed to launch and runs eagerly "
                              f"from now on: {self.failure}", RuntimeWarning, stacklevel=2)
        return self.eager(*inputs)


def _check_live_weights(manifest: dict, model: torch.nn.Module) -> None:
    """Weights read from `model` at every call must have the names, shapes and dtypes compiled for
    (lifted constants are not module state: they still come from the bundle)."""
    tables = {"parameter": dict(model.named_parameters(remove_duplicate=False)),
              "buffer": dict(model.named_buffers(remove_duplicate=False))}
    for spec in manifest["inputs"]:
        if spec["kind"] in tables:
            t = tables[spec["kind"]].get(spec["target"])
            if t is None:
                raise BundleError(f"model has no {spec['kind']} '{spec['target']}', which the bundle was compiled with")
            if list(t.shape) != spec["shape"] or str(t.dtype).removeprefix("torch.") != spec["dtype"]:
                raise BundleError(f"model's {spec['kind']} '{spec['target']}' is {_describe_tensor(t)}, but the bundle "
                                  f"was compiled for {spec['dtype']}{spec['shape']}")


def _where(args: tuple, kwargs: dict, index: int) -> str:
    """The flat argument `index` as the caller wrote it: `args[0]`, `kwargs['k']`, `args[1][2]`."""
    path, _ = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))[0][index]
    return ("args", "kwargs")[path[0].idx] + pytree.keystr(path[1:])


class _Leaf:
    def __repr__(self) -> str:
        return "_"


def _describe_spec(spec) -> str:
    """`args (_, [_, _]) kwargs {'k': _}` rather than a TreeSpec's nested repr."""
    args, kwargs = pytree.tree_unflatten([_Leaf()] * spec.num_leaves, spec)
    return f"args {tuple(args)!r} kwargs {dict(kwargs)!r}"


def _shape_text(shape: list) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _describe_tensor(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)} on {t.device}"


class LoadedModel:
    """A bundle ready to run: called like the model it was compiled from, on the target's device."""

    def __init__(self, manifest: dict, gm: fx.GraphModule, weights: dict, model, device: torch.device):
        self.manifest = manifest
        self.target = manifest["target"]
        self.program = gm
        self._weights, self._model, self._device = weights, model, device
        self._inputs = manifest["inputs"]
        self._symbols = manifest.get("symbols", {})
        guards = manifest.get("size_guards")
        self._relations = SizeGuards(guards) if guards else None  # runtime/size_guards.py
        _name_return_types()
        if "transformers." in manifest["in_spec"] + manifest["out_spec"]:  # a cache or output class
            from .library_pytrees import register_known

            register_known()
        self._in_spec = pytree.treespec_loads(manifest["in_spec"])
        self._out_spec = pytree.treespec_loads(manifest["out_spec"])
        self._constants = {int(i): v for i, v in manifest.get("constant_args", [])}
        params = [inspect.Parameter(n, getattr(inspect.Parameter, k)) for n, k in manifest.get("signature", [])]
        try:
            self.__signature__ = inspect.Signature(params)
        except ValueError:
            pass

    @property
    def fallbacks(self) -> list[dict]:
        """ATen ops that run eagerly: those that did not compile, and regions that failed to launch."""
        failed = [{"op": r.name, "stage": "launch", "why": r.failure} for r in self.program.children()
                  if isinstance(r, _LoadedRegion) and r.failure]
        return list(self.manifest.get("fallbacks", [])) + failed

    def __call__(self, *args, **kwargs):
        flat = self._flatten(args, kwargs)
        if self._model is not None:
            tables = {"parameter": dict(self._model.named_parameters(remove_duplicate=False)),
                      "buffer": dict(self._model.named_buffers(remove_duplicate=False))}
        else:
            tables = {"parameter": self._weights, "buffer": self._weights}
        values = []
        for spec in self._inputs:
            if spec["kind"] == "user":
                values.append(flat[spec["target"]])
            elif spec["kind"] == "constant":
                values.append(self._weights[spec["target"]])
            else:
                values.append(tables[spec["kind"]][spec["target"]])
            if spec.get("pairs"):
                values[-1] = as_pair(values[-1])
        outs = list(self.program(*values))
        try:
            return self._finish(flat, tables["buffer"], tables["parameter"], outs, values)
        except CheckFailed as failed:  # a rewrite's run-time condition did not hold: eager answers
            if self._model is None:
                raise BundleError(f"run-time check failed ({failed}); this call needs eager PyTorch: load the "
                                  f"bundle with model=... to run such calls eagerly") from failed
            return self._model(*args, **kwargs)

    def _flatten(self, args: tuple, kwargs: dict) -> list:
        from torch.export._tree_utils import reorder_kwargs

        try:
            kwargs = reorder_kwargs(kwargs, self._in_spec) if kwargs else {}
        except Exception:  # noqa: BLE001 - other keyword names than compiled: the spec check says so
            pass
        flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        if spec != self._in_spec:
            raise InputSpecError(f"{self.manifest.get('name', 'model')}: called with {_describe_spec(spec)}, "
                                 f"but the bundle was compiled for {_describe_spec(self._in_spec)}")
        bound: dict[str, int] = {}
        later = []
        for spec in self._inputs:
            if spec["kind"] != "user":
                continue
            value, want = flat[spec["target"]], f"{spec['dtype']}{_shape_text(spec['shape'])} on {self._device.type}"
            where = _where(args, kwargs, spec["target"])
            if spec.get("int_rows"):  # an int the bundle takes as a symbolic size
                if type(value) is not int or value < 0:
                    raise InputSpecError(f"{where}: expected an int of at least 0 (a size the bundle was compiled "
                                         f"for as {spec['shape'][0]}), got {value!r}")
                value = flat[spec["target"]] = int_rows(value, self._device)
            if not isinstance(value, torch.Tensor):
                raise InputSpecError(f"{where}: expected a tensor {want}, got {type(value).__name__}")
            if (value.dim() != len(spec["shape"]) or str(value.dtype).removeprefix("torch.") != spec["dtype"]
                    or value.device.type != self._device.type):
                raise InputSpecError(f"{where}: the bundle was compiled for {want}, got {_describe_tensor(value)}")
            for d, (size, n) in enumerate(zip(spec["shape"], value.shape)):
                if isinstance(size, int) and size != n or size in bound and bound[size] != n:
                    raise InputSpecError(f"{where}: the bundle was compiled for {want}, got {_describe_tensor(value)}"
                                         + (f" ({size} = {bound[size]} from another input)" if size in bound else ""))
                if size in self._symbols:
                    bound[size] = int(n)
                elif isinstance(size, str):
                    later.append((where, d, size, int(n), want, value))
        for sym, n in bound.items():
            lo, hi = self._symbols[sym]["range"]
            if n < lo or (hi is not None and n > hi):
                raise InputSpecError(f"{self._symbol_source(args, kwargs, sym)} is {n}, outside the range [{lo}, "
                                     f"{'inf' if hi is None else hi}] the bundle was compiled for (symbol {sym})")
        where = {s: self._symbol_source(args, kwargs, s) for s in self._symbols}
        failed = self._relations.failed(bound, where) if self._relations is not None else None
        if failed:
            raise InputSpecError(f"{self.manifest.get('name', 'model')}: {failed}; the bundle's symbolic sizes "
                                 f"were compiled on that assumption")
        if later:
            from uniorch.ir import dims
        for where, d, size, n, want, value in later:  # dims that are expressions of others (a concat's)
            try:
                ok = dims.evaluate(dims.parse(size), bound) == n
            except TypeError:  # a symbol no input dim gives alone
                ok = False
            if not ok:
                raise InputSpecError(f"{where}: the bundle was compiled for {want}, got {_describe_tensor(value)}")
        for i, value in self._constants.items():
            if not (isinstance(value, dict) and "repr" in value) and flat[i] != value:
                raise InputSpecError(f"{_where(args, kwargs, i)} was the constant {value!r} when compiled, "
                                     f"got {flat[i]!r}; compile another bundle for that value")
        return flat

    def _symbol_source(self, args, kwargs, sym: str) -> str:
        """Where the call gives a symbol: `args[0] dim 1`, or `args[1]` for an int argument."""
        info = self._symbols[sym]
        ints = {spec["target"] for spec in self._inputs if spec.get("int_rows")}
        return _where(args, kwargs, info["input"]) + ("" if info["input"] in ints else f" dim {info['dim']}")

    def _input_view(self, k: int, spec: dict, value, inputs: list):
        """Eager's view of program inputs (capture/input_views.py), replayed on the caller's
        tensors; None where it does not give the computed value's shape and dtype."""
        replays = self.__dict__.setdefault("_replays", {})
        if k not in replays:
            replays[k] = fx.GraphModule(torch.nn.Module(), load_graph(spec["view_of"]["graph"], self._device))
        view = replays[k](*[inputs[i] for i in spec["view_of"]["inputs"]])
        if not isinstance(view, torch.Tensor) or view.shape != value.shape or view.dtype != value.dtype:
            return None
        return view

    def _finish(self, flat: list, buffers: dict, parameters: dict, outs: list, inputs: list):
        for spec, value in zip(self.manifest["outputs"], outs):  # before any state changes
            if spec["kind"] == "check":
                verify(spec["target"], value)
        outs = bounded(self.manifest["outputs"], [as_complex(v) if "complex" in spec else v
                                                  for spec, v in zip(self.manifest["outputs"], outs)])
        user_out, views = [], []
        with torch.no_grad():
            for k, (spec, value) in enumerate(zip(self.manifest["outputs"], outs)):
                if spec["kind"] == "buffer_mutation":
                    buffers[spec["target"]].copy_(value)
                elif spec["kind"] == "parameter_mutation":
                    parameters[spec["target"]].copy_(value)
                elif spec["kind"] == "user_input_mutation":
                    flat[spec["target"]].copy_(value)
                elif spec["kind"] == "user":
                    if "view_of" in spec:  # made after the writes, in the caller's grad mode
                        views.append((len(user_out), k))
                    user_out.append(laid_out(value, spec["layout"]) if "layout" in spec else value)
        for j, k in views:
            view = self._input_view(k, self.manifest["outputs"][k], user_out[j], inputs)
            user_out[j] = user_out[j] if view is None else view
        return restore_sizes(pytree.tree_unflatten(user_out, self._out_spec), self._out_spec)

    def __repr__(self) -> str:
        return (f"<uniorch bundle {self.manifest.get('name', '')} for {self.target}: "
                f"{len(self.manifest['kernels'])} kernels, {len(self.manifest.get('fallbacks', []))} eager fallbacks>")


__all__ = ["BundleError", "InputSpecError", "LoadedModel", "FORMAT_VERSION", "load", "read_manifest", "save"]
