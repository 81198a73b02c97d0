"""Test kits shipped with uniorch for people who extend it.

`python -m uniorch.testing.conformance --target NAME` checks a backend plugin against the SDK's
contract and, where its device is present, runs uniorch's standard kernel set on it against eager
PyTorch (docs/backend_guide.md). `kernels.CASES` is that kernel set.
"""
