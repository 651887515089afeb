"""Names resolved on first use from 'module.path:Attribute' strings, the one loader behind the model registry
(model/registry.py) and the packages whose names are imported when first asked for (convert/,
model/plugins/alpamayo/). test/test_house.py reads every such string as an import edge, so a table entry is
checked for layers and circles like an import statement."""

from __future__ import annotations

from importlib import import_module


def load(where: str, package: str | None = None):
    """'package.module:Attribute' -> the attribute (dotted: an attribute's attribute), its module imported now;
    '.module:Attribute' is relative to `package`. ImportError / AttributeError as Python raises them."""
    module_name, _, attribute = where.partition(":")
    found = import_module(module_name, package)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def lazy_attributes(package: str, table: dict[str, str]):
    """A package's module-level `__getattr__` over `table` (name -> '.module:Attribute', relative to the package):
    each name imported from its module on first use."""
    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return load(table[name], package)
    return __getattr__
