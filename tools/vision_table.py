"""Vision models as users build them (torchvision's and timm's constructors, random weights, eval
mode): per model, kernels, share of captured ops compiled, error against eager on two fresh
batches, bytes moved against the minimum and, with `--vs-inductor`, against torch.compile's.

    python -m uniorch.tools.vision_table [--models tv:resnet50@224,timm:vit_tiny_patch16_224@224]
                                         [--vs-inductor] [--out docs/perf/vision_models.md]

Needs torchvision (and timm for `timm:` models) importable; neither is a dependency of uniorch.
Compiles for the default target of the machine it runs on. A classifier head that its
constructor zero-fills (torchvision's ViT, timm's Hiera) is drawn at random first, so the logits
compared are not all zero.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings

import torch

DEFAULT = (
    "tv:resnet50@224", "tv:resnext50_32x4d@224", "tv:mobilenet_v3_small@224", "tv:efficientnet_b0@224",
    "tv:regnet_y_400mf@224", "tv:shufflenet_v2_x0_5@224", "tv:densenet121@224", "tv:googlenet@224",
    "tv:convnext_tiny@224", "tv:swin_t@224", "tv:vit_b_16@224", "tv:maxvit_t@224",
    "timm:convmixer_768_32@224", "timm:ghostnet_100@224", "timm:repvgg_a0@224", "timm:hrnet_w18_small@224",
    "timm:nfnet_l0@224", "timm:mobilenetv4_conv_small@224", "timm:efficientvit_b0@224", "timm:fastvit_t8@224",
    "timm:mobilevitv2_050@256", "timm:vit_tiny_patch16_224@224", "timm:eva02_tiny_patch14_224@224",
    "timm:levit_128s@224", "timm:xcit_nano_12_p16_224@224", "timm:swin_tiny_patch4_window7_224@224",
    "timm:maxvit_nano_rw_256@256", "timm:hiera_tiny_224@224", "timm:vit_base_patch16_siglip_224@224",
)


def build(spec: str):
    """(model in eval mode, its input size) for `tv:name@size` or `timm:name@size`."""
    name, size = spec.rsplit("@", 1)
    source, _, arch = name.partition(":")
    torch.manual_seed(0)
    if source == "tv":
        import torchvision.models as tvm

        model = getattr(tvm, arch)(num_classes=10)
    elif source == "timm":
        import timm

        model = timm.create_model(arch, pretrained=False, num_classes=10)
    else:
        raise ValueError(f"{spec!r}: models are tv:<torchvision name>@<size> or timm:<timm name>@<size>")
    draw_zero_heads(model, 10)
    return model.eval(), int(size)


def draw_zero_heads(model: torch.nn.Module, classes: int) -> None:
    """A classifier head the constructor zero-filled gets random weights: logits all zero would
    match whatever a wrong compile computed before the head."""
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and m.out_features == classes and not m.weight.any():
            torch.nn.init.normal_(m.weight, std=m.in_features ** -0.5)


def row(spec: str, vs_inductor: bool) -> str:
    import uniorch

    model, size = build(spec)
    start = time.perf_counter()
    cm = uniorch.compile(model)
    err = 0.0
    with torch.no_grad():
        for seed in (1, 2):
            x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(seed))
            got, want = cm(x), model(x)
            err = max(err, float((got - want).abs().max() / want.abs().max().clamp_min(1e-30)))
    seconds = time.perf_counter() - start
    rep = cm.explain(x)
    moved = rep.bytes_moved
    cells = [spec.rsplit("@", 1)[0], str(size), str(len(rep.kernels)),
             f"{rep.compiled_ops}/{rep.captured_ops}", f"{err:.1e}", f"{moved / 1e6:.1f}",
             f"{moved / max(1, rep.bytes_minimum):.2f}x"]
    if vs_inductor:
        from uniorch.tools.inductor_bytes import inductor_bytes

        with torch.no_grad():
            ind = inductor_bytes(model, (x,))
        cells.append(f"{moved / ind.bytes_moved:.2f}x")
    cells.append(f"{seconds:.0f} s")
    return "| " + " | ".join(cells) + " |"


def header(vs_inductor: bool) -> str:
    """The written table's title and how it was made."""
    import datetime

    from uniorch.targets import parse_target

    versions = [f"torch {torch.__version__}"]
    for lib in ("torchvision", "timm"):
        try:
            versions.append(f"{lib} {__import__(lib).__version__}")
        except ImportError:
            pass
    target = parse_target("auto")
    return (
        "# Vision models as torchvision and timm build them\n\n"
        "Random weights, eval mode, batch 2, float32; `uniorch.compile(model)` on the default target "
        f"(`{target}`). Error: largest difference from eager over the logits of two fresh batches, divided "
        "by the largest logit. MB moved: `explain`'s bytes; the minimum reads each input the graph reads "
        "once and writes each output once (weights, image, logits: activations are not in it, so "
        "activation-heavy models at 224 px sit far above it)"
        + ("; vs torch.compile: the same count by Inductor (`tools/inductor_bytes.py`)" if vs_inductor else "")
        + f". Time: compile and two calls, on this machine's CPU.\n{', '.join(versions)}; "
        f"{datetime.date.today().isoformat()}. Written by `python -m uniorch.tools.vision_table"
        + (" --vs-inductor" if vs_inductor else "") + " --models ... --out docs/perf/vision_models.md`.\n\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT))
    parser.add_argument("--vs-inductor", action="store_true", help="also count torch.compile's bytes")
    parser.add_argument("--out", help="write the markdown table here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    head = ["model", "image", "kernels", "ATen ops compiled", "max error / max logit", "MB moved",
            "vs minimum"] + (["vs torch.compile"] if args.vs_inductor else []) + ["compile + 2 calls"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 1 else "---:" for i in range(len(head))) + "|"]
    print("\n".join(lines), flush=True)
    failed = 0
    for spec in args.models.split(","):
        try:
            line = row(spec.strip(), args.vs_inductor)
        except Exception as err:  # noqa: BLE001 - a table of what works: a failure is a row
            failed += 1
            line = f"| {spec} | failed: {type(err).__name__}: {str(err).splitlines()[0][:160]} |"
        print(line, flush=True)
        lines.append(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write(header(args.vs_inductor) + "\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
