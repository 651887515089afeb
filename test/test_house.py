"""The package's structure, enforced: layers (bottom to top) never import upward, no import circles, the core
(engine, model, plan and the bottom modules) never imports ROS, no pickle, and files and functions stay short."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hybrid_vla_ros"
# Bottom to top. A module may import its own layer and those below; the bottom modules are importable by all.
LAYERS = ["bottom", "route", "sim", "model", "engine", "plan", "learn", "convert", "ros", "bench", "cli"]
BOTTOM = {"types", "errors", "stop", "report", "context"}
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
           if layer_of(name) in ("bottom", "model", "engine", "plan") for target in imported(name, tree) if is_ros(target)]
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
