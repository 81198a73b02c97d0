"""Capture a PyTorch model or function into a functional, decomposed ATen graph."""
from .graph import CapturedGraph, CapturedOp, GraphInput, GraphOutput
from .locations import SourceLoc
from .trace import capture

__all__ = ["capture", "CapturedGraph", "CapturedOp", "GraphInput", "GraphOutput", "SourceLoc"]
