"""The stage packages' interfaces, loaded on first use (PEP 562): each package's
`__init__` maps its public names to their private modules, and importing the package loads
none of them, so a light command (`sweep status`, `sweep validate`) pays only for what it
uses."""

from __future__ import annotations

from importlib import import_module


def lazy_getattr(package: str, home: dict[str, str]):
    """The module `__getattr__` of `package`: a public name, imported from the private
    module `home` names for it."""

    def __getattr__(name: str):
        if name in home:
            return getattr(import_module(f"{package}.{home[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
