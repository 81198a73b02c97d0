"""A tiny GPT-2 trained on one fixed batch, compiled (model and AdamW) and eagerly, side by side.

    python -m uniorch.tools.train_lm [--steps 50] [--target interpret] [--dropout 0.1] [--fallback-random]
        [--json out.json]

transformers' GPT2LMHeadModel in its default settings (SDPA attention, its dropout probabilities
unless --dropout says otherwise), vocab 96, 2 layers of width 32, batch 4 x 16 tokens. Both runs
start from the same weights and minimise the model's own cross-entropy (`labels=input_ids`) on the
same batch; the report gives both loss curves and the final losses' relative difference. With
dropout the compiled graph draws its masks from its own stream, so the curves agree in trend, not
in value, unless `--fallback-random` (UNIORCH_FALLBACK_RANDOM=1) leaves the draws to PyTorch as eager
makes them; at dropout 0 they agree to rounding.
"""
from __future__ import annotations

import argparse
import copy
import json
import time
import warnings

import torch

import uniorch


def make_model(dropout: float | None):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    extra = {} if dropout is None else dict(resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    config = GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=1,
                        eos_token_id=2, **extra)
    return GPT2LMHeadModel(config).train()


def train(steps: int, target: str, dropout: float | None, lr: float = 3e-3) -> dict:
    model = make_model(dropout)
    ref = copy.deepcopy(model)
    batch = torch.randint(0, 96, (4, 16), generator=torch.Generator().manual_seed(1))
    runs = {"eager": (ref, torch.optim.AdamW(ref.parameters(), lr=lr)),
            "uniorch": (uniorch.compile(model, target), uniorch.compile(torch.optim.AdamW(model.parameters(), lr=lr), target))}
    losses: dict[str, list[float]] = {name: [] for name in runs}
    seconds: dict[str, float] = {}
    first = None
    for name, (m, opt) in runs.items():
        torch.manual_seed(2)  # the same dropout stream for both runs (drawn in different orders)
        t0 = time.perf_counter()
        for step in range(steps):
            opt.zero_grad()
            loss = m(batch, labels=batch).loss
            loss.backward()
            opt.step()
            losses[name].append(float(loss))
            if name == "uniorch" and step == 0:
                first = time.perf_counter() - t0
        seconds[name] = time.perf_counter() - t0
    cm = runs["uniorch"][0]
    rep = cm.explain(batch, labels=batch)
    final = {name: v[-1] for name, v in losses.items()}
    from uniorch.config import flag

    return dict(steps=steps, target=target, dropout=dropout if dropout is not None else "default (0.1)",
                fallback_random=flag("UNIORCH_FALLBACK_RANDOM"),
                losses=losses, final=final, rel_diff=abs(final["uniorch"] - final["eager"]) / final["eager"],
                first_step_s=round(first, 2), seconds={k: round(v, 1) for k, v in seconds.items()},
                fw_kernels=len(rep.kernels), bw_kernels=len(rep.backward.kernels) if rep.backward else 0,
                fallbacks=len(rep.fallbacks) + (len(rep.backward.fallbacks) if rep.backward else 0),
                optimizer_eager=list(dict.fromkeys(runs["uniorch"][1].eager_steps)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--target", default="interpret")
    p.add_argument("--dropout", type=float, default=None, help="all of GPT-2's dropout probabilities (default: 0.1)")
    p.add_argument("--fallback-random", action="store_true",
                   help="dropout's masks drawn by PyTorch as eager draws them (UNIORCH_FALLBACK_RANDOM=1)")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    if a.fallback_random:
        import os

        os.environ["UNIORCH_FALLBACK_RANDOM"] = "1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = train(a.steps, a.target, a.dropout)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    e, u = r["losses"]["eager"], r["losses"]["uniorch"]
    for i in sorted({0, len(e) // 4, len(e) // 2, 3 * len(e) // 4, len(e) - 1}):
        print(f"step {i + 1:3d}: eager {e[i]:.4f}  uniorch {u[i]:.4f}")
    print(f"final loss: eager {r['final']['eager']:.4f}, uniorch {r['final']['uniorch']:.4f} "
          f"({100 * r['rel_diff']:.3f} % apart); kernels: forward {r['fw_kernels']}, backward {r['bw_kernels']}, "
          f"fallbacks {r['fallbacks']}; first step {r['first_step_s']} s; {r['seconds']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
