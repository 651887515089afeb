"""Stand-ins for the third-party modules the authors' code imports but whose classes hold no weights (image I/O,
plotting, dataset SDKs, compiled CUDA ops, schedulers): every stubbed module is recorded, with each name read from
it, so the manifest lists exactly what was not the real thing. Used by extract_manifest.py only (never at test
time, never by the package)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

STUBBED: dict[str, set] = {}


class _Stub(type):
    """A stand-in class: subclassable, callable (an instance), every attribute another stand-in."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        return super().__call__()

    def __mro_entries__(cls, bases):
        return (object,)


def _stub_class(name: str):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _stub_class(f"{name}.{attr}")()
    return _Stub(name.rsplit(".", 1)[-1], (), {"__getattr__": __getattr__, "__call__": lambda self, *a, **k: None,
                                                "__iter__": lambda self: iter(()), "__bool__": lambda self: False})


class StubModule(types.ModuleType):
    def __init__(self, name: str):
        super().__init__(name)
        self.__path__ = []                       # a package: its submodules are stubbed too
        STUBBED.setdefault(name, set())

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        STUBBED[self.__name__].add(attr)
        value = _stub_class(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stubs the top-level packages in `roots` only when they are not installed (a real one is always used)."""

    def __init__(self, roots, force=(), compiled=()):
        self.roots, self.force, self.compiled = set(roots), set(force), tuple(compiled)

    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        leaf = fullname.rsplit(".", 1)[-1]
        if fullname in self.force or top in self.force or (top == "mmcv" and leaf.endswith(self.compiled)):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if top not in self.roots:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, StubFinder):      # another stub finder: not an installed module
                continue
            try:
                spec = finder.find_spec(fullname, path, target)
            except (ImportError, AttributeError, ValueError):
                spec = None
            if spec is not None:
                return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return StubModule(spec.name)

    def exec_module(self, module):
        pass


def install(roots, force=(), compiled=("_cuda", "_ext")) -> StubFinder:
    """roots: stubbed when not installed; force: stubbed always; compiled: the authors' tree's compiled extension
    modules (mmcv.*<suffix>), never built here."""
    finder = StubFinder(roots, force, compiled)
    sys.meta_path.insert(0, finder)
    return finder


def stubbed() -> dict:
    return {name: sorted(attrs) for name, attrs in sorted(STUBBED.items())}
