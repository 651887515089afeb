"""The package's structure, enforced: layers (bottom to top) never import upward, no import circles, the core
(engine, model and the bottom modules) never imports ROS, no pickle, and files and functions stay short."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hybrid_vla_ros"
# Bottom to top. A module may import its own layer and those below; the bottom modules are importable by all.
LAYERS = ["bottom", "sim", "model", "engine", "learn", "ros", "bench", "cli"]
BOTTOM = {"types", "errors", "stop", "report"}
ROS_ROOTS = ("rclpy", "rosidl", "launch", "launch_ros", "ament_index_python", "rosbags")
MAX_FILE_LINES, MAX_FUNCTION_LINES = 300, 60


def modules() -> dict[str, ast.AST]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): ast.parse(p.read_text())
            for p in PACKAGE.rglob("*.py")}


def imported(name: str, tree: ast.AST) -> set[str]:
    """Absolute names of everything a module imports (relative imports resolved)."""
    is_pkg = name.endswith("__init__")
    base = name.split(".")[:-1] if not is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            root = base[:len(base) - node.level + 1] if node.level else []
            target = ".".join(root + ([node.module] if node.module else []))
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
    return out


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "hybrid_vla_ros":
        return None
    head = parts[1]
    if head in BOTTOM or head == "__init__":
        return "bottom"
    return head if head in LAYERS else None


def is_ros(name: str) -> bool:
    root = name.split(".")[0]
    return root in ROS_ROOTS or root.endswith("_msgs") or root.endswith("_srvs")


def test_no_module_imports_a_layer_above_its_own():
    bad = []
    for name, tree in modules().items():
        own = LAYERS.index(layer_of(name))
        for target in imported(name, tree):
            layer = layer_of(target)
            if layer is not None and LAYERS.index(layer) > own:
                bad.append(f"{name} imports {target} ({layer} is above {layer_of(name)})")
    assert not bad, "\n".join(sorted(set(bad)))


def test_the_core_never_imports_ros():
    bad = [f"{name} imports {target}" for name, tree in modules().items()
           if layer_of(name) in ("bottom", "model", "engine") for target in imported(name, tree) if is_ros(target)]
    assert not bad, "\n".join(bad)


def test_no_import_circles_between_modules():
    mods = modules()
    names = {m.removesuffix(".__init__") for m in mods}
    graph = {}
    for name, tree in mods.items():
        me = name.removesuffix(".__init__")
        graph[me] = {t for t in imported(name, tree) if t in names and t != me}
    seen, stack, cycles = set(), [], []

    def visit(node, path):
        if node in path:
            cycles.append(path[path.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        for nxt in graph.get(node, ()):
            visit(nxt, path + [node])

    for node in graph:
        visit(node, [])
    assert not cycles, cycles[:3]


def test_no_pickle_anywhere_in_the_package():
    """Nothing that unpickles: no pickle/dill/shelve/marshal imports, no torch.load, no numpy allow_pickle."""
    for name, tree in modules().items():
        for target in imported(name, tree):
            assert target.split(".")[0] not in ("pickle", "dill", "shelve", "marshal", "cloudpickle"), (name, target)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "load" and getattr(node.value, "id", "") == "torch":
                raise AssertionError(f"{name}: torch.load unpickles")
            if isinstance(node, ast.keyword) and node.arg == "allow_pickle":
                raise AssertionError(f"{name}: allow_pickle")


def test_files_and_functions_stay_short():
    long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if len(text.splitlines()) > MAX_FILE_LINES:
            long.append(f"{path.relative_to(PACKAGE)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)
