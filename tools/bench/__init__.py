"""GPU benchmark harness: eager vs torch.compile vs uniorch on realistic workloads (README.md here).

`python -m uniorch.tools.bench --device cuda` on a GPU machine; `--device cpu` times the `cpu`
target at tiny sizes, the smoke mode CI runs (tests/test_bench_smoke.py).
"""
