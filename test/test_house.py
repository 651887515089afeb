"""The package's structure, enforced: layers (bottom to top) never import upward, no import circles, the core
(engine, model, plan and the bottom modules) never imports ROS, no pickle, and files and functions stay short."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hybrid_vla_ros"
# Bottom to top. A module may import its own layer and those below; the bottom modules are importable by all.
LAYERS = ["bottom", "route", "model", "engine", "plan", "sim", "learn", "convert", "ros", "bench", "cli"]
BOTTOM = {"types", "errors", "stop", "report", "context", "lazy"}
ROS_ROOTS = ("rclpy", "rosidl", "launch", "launch_ros", "ament_index_python", "rosbags")
MAX_FILE_LINES, MAX_FUNCTION_LINES = 300, 60


def modules(package: Path = PACKAGE) -> dict[str, ast.AST]:
    return {".".join(p.relative_to(package.parent).with_suffix("").parts): ast.parse(p.read_text())
            for p in package.rglob("*.py")}


def imported(name: str, tree: ast.AST) -> set[str]:
    """Absolute names of everything a module imports: its import statements (relative ones resolved) and the
    imports done at run time that can be read from the source (dynamic_imports)."""
    return static_imports(name, tree) | dynamic_imports(name, tree)


def static_imports(name: str, tree: ast.AST) -> set[str]:
    base = name.split(".")[:-1]
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


# 'package.module:Attribute' (or '.module:Attribute', relative): an entry of a table resolved on first use
# (model/registry.py, hybrid_vla_ros/lazy.py)
WHERE = re.compile(r"(\.+|[A-Za-z_]\w*\.)[\w.]*:[A-Za-z_][\w.]*")


def dynamic_imports(name: str, tree: ast.AST) -> set[str]:
    """`import_module(...)` calls whose target the source fixes (a literal; an f-string or sum over literals,
    module-level string constants and the values of a module-level dict of strings; relative to `__name__`,
    `__package__` or a literal), and every 'module:Attribute' string naming a module of this package."""
    package = name.removesuffix(".__init__") if name.endswith("__init__") else name.rpartition(".")[0]
    here = {"__name__": {name.removesuffix(".__init__")}, "__package__": {package}, **_module_strings(tree)}
    root = name.split(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "import_module":
            targets = _candidates(node.args[0], here) if node.args else None
            anchors = _candidates(node.args[1], here) if len(node.args) > 1 else {package}
            out.update(_resolve(t, a) for t in targets or () for a in anchors or () if a or not t.startswith("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and WHERE.fullmatch(node.value):
            module, _, attribute = node.value.partition(":")
            target = _resolve(module, package)
            if target.split(".")[0] == root:
                out.update({target, f"{target}.{attribute.split('.')[0]}"})
    return out


def _module_strings(tree: ast.AST) -> dict[str, set[str]]:
    """Module-level names bound to a string, or to a dict whose values are all strings -> those strings."""
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            values = value.values if isinstance(value, ast.Dict) else [value]
            if all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in values):
                out.update({t.id: {v.value for v in values} for t in targets if isinstance(t, ast.Name)})
    return out


def _candidates(node: ast.AST, here: dict) -> set[str] | None:
    """Every string `node` can evaluate to, as far as the source fixes it; None where it does not."""
    if isinstance(node, ast.Constant):
        return {node.value} if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return here.get(node.id)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):   # TABLE[key]: any of its values
        return here.get(node.value.id)
    if isinstance(node, ast.FormattedValue):
        return _candidates(node.value, here)
    parts = node.values if isinstance(node, ast.JoinedStr) else \
        [node.left, node.right] if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) else None
    if parts is None:
        return None
    out = {""}
    for part in parts:
        found = _candidates(part, here)
        if found is None:
            return None
        out = {a + b for a in out for b in found}
    return out


def _resolve(target: str, package: str) -> str:
    """importlib's resolution of a relative module name ('.x', '..x') against a package."""
    level = len(target) - len(target.lstrip("."))
    if not level:
        return target
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{target[level:]}" if target[level:] else base


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
           if layer_of(name) in ("bottom", "model", "engine", "plan") for target in imported(name, tree) if is_ros(target)]
    assert not bad, "\n".join(bad)


def import_graph(mods: dict[str, ast.AST], edges=imported) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package named by its own name, not `__init__`)."""
    names = {m.removesuffix(".__init__") for m in mods}
    graph = {}
    for name, tree in mods.items():
        me = name.removesuffix(".__init__")
        graph[me] = {t for t in edges(name, tree) if t in names and t != me}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    seen, cycles = set(), []

    def visit(node, path):
        if node in path:
            cycles.append(path[path.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, path + [node])

    for node in sorted(graph):
        visit(node, [])
    return cycles


def test_no_import_circles_between_modules():
    cycles = import_cycles(import_graph(modules()))
    assert not cycles, cycles[:3]


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "pkg"


def test_the_import_graph_follows_import_module_and_table_entries(tmp_path):
    """The circles only run-time imports close: a package's lazy __getattr__ over a dict of its modules (the
    old checkpoint -> vla -> plugins -> alpamayo -> release -> checkpoint), a literal import_module, and a
    registry table entry 'module:Attribute' whose module imports the registry back."""
    lazy = ('from importlib import import_module\n_WHERE = {"load": "release"}\n\n\ndef __getattr__(name):\n'
            '    return getattr(import_module(f".{_WHERE[name]}", __name__), name)\n')
    package = write_package(tmp_path, {
        "pkg/__init__.py": "", "pkg/checkpoint.py": "from .plugins import load\n_read = 1\n",
        "pkg/plugins/__init__.py": lazy, "pkg/plugins/release.py": "from ..checkpoint import _read\n",
        "pkg/engine.py": "import importlib\n\n\ndef f():\n    return importlib.import_module('pkg.' + 'stage')\n",
        "pkg/stage.py": "from .engine import f\n",
        "pkg/registry.py": 'TABLE = {"x": "pkg.family:XFamily"}\n', "pkg/family.py": "from .registry import TABLE\n"})
    mods = modules(package)
    assert not import_cycles(import_graph(mods, static_imports))   # import statements alone show none of them
    cycles = {tuple(sorted(set(c))) for c in import_cycles(import_graph(mods))}
    assert cycles == {("pkg.checkpoint", "pkg.plugins", "pkg.plugins.release"), ("pkg.engine", "pkg.stage"),
                      ("pkg.family", "pkg.registry")}
    assert dynamic_imports("pkg.lazy", ast.parse('import_module(f"{prefix}.x")')) == set()   # not fixed: no edge


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


MAX_FOLDER_MODULES = 12
ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".zip", ".egg", ".tar", ".7z")


def test_no_package_folder_is_crowded():
    """A folder's name says what lives in it: past a dozen modules it holds more than one concept."""
    crowded = []
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists())]:
        count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
        if count > MAX_FOLDER_MODULES:
            crowded.append(f"{folder.relative_to(PACKAGE.parent)}/ holds {count} modules (> {MAX_FOLDER_MODULES})")
    assert not crowded, "\n".join(crowded)


def test_no_binary_archive_is_tracked():
    """In a git checkout: what git tracks; elsewhere (an sdist, a colcon copy): every file of the source tree
    outside the virtual environments and build folders."""
    import subprocess
    root = PACKAGE.parent
    if (root / ".git").exists():
        tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                                 check=True).stdout.split()
    else:
        skip = {".venv", ".venv-jazzy", "build", "install", "log", "out", "dist", ".pytest_cache"}
        tracked = [str(f.relative_to(root)) for f in root.rglob("*")
                   if f.is_file() and not skip & set(f.relative_to(root).parts)]
    archives = [name for name in tracked if name.lower().endswith(ARCHIVE_SUFFIXES)]
    assert not archives, f"archives tracked in git (build artefacts stay out: .gitignore): {archives}"


def test_only_the_families_folder_knows_family_names():
    """The engine, loader and prompt ask the family interface (model/families/base.py), never compare names."""
    families = PACKAGE / "model" / "families"
    names = {p.stem for p in families.glob("*.py")} - {"__init__", "base"}
    bad = []
    for path in PACKAGE.rglob("*.py"):
        if families in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                consts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if any(c in names for c in consts):
                    bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} compares with a family name")
    assert not bad, "\n".join(bad)
