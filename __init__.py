"""Not the uniorch package: the checkout's top folder (the package is `uniorch/` inside it).

Python imports a folder named like a package from the current directory before installed ones.
Run from the folder holding a checkout named `uniorch`, `import uniorch` used to find this folder
as an empty namespace package and fail later with "no attribute 'compile'". This file makes that
import fail at once, saying why and what to do. Imported under any other name (pytest collecting
the checkout), it does nothing.
"""
if __name__ == "uniorch":
    import os as _os

    _here = _os.path.dirname(_os.path.abspath(__file__))
    raise ImportError(
        f"`import uniorch` found the uniorch checkout {_here} (the folder holding pyproject.toml), not the "
        f"package inside it: Python imports a folder of that name from the current directory first. Run "
        f"from another folder (or from inside the checkout), or install it: pip install -e {_here}")
