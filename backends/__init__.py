"""Vendor backends (cuda, rocm, cann, interpret) and the plugin SDK live here (DESIGN.md).

None is built yet: this version stops at the hardware-independent linalg graph, and nothing here
claims otherwise. `uniorch-opt --emit` names the later stages and says they are not available.
"""
