"""Docs that cannot drift from the code (issue 52, item 4): docs/LAYOUT.md names every folder and module of
hybrid_vla_ros/ and nothing that is not there, and its generated part is what scripts/layout_doc.py makes of the
tree; its layer line is test_house's; docs/CHECKPOINTS.md's table of shipped mappings, the mapping files and
`hybrid-vla convert --help` name the same mappings; every repository path README.md, docs/USAGE.md and
docs/LAYOUT.md name exists."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import yaml

from test_house import BOTTOM, LAYERS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hybrid_vla_ros"
LAYOUT = ROOT / "docs" / "LAYOUT.md"
CHECKPOINTS = ROOT / "docs" / "CHECKPOINTS.md"
MAPPINGS = PACKAGE / "convert" / "mappings"


def _layout_script():
    spec = importlib.util.spec_from_file_location("layout_doc", ROOT / "scripts" / "layout_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree() -> tuple[set[str], set[str]]:
    """Every folder under hybrid_vla_ros/ (the package's own included) and every module, as repository paths."""
    skip = lambda p: "__pycache__" in p.parts
    folders = {PACKAGE.relative_to(ROOT).as_posix() + "/"}
    folders |= {p.relative_to(ROOT).as_posix() + "/" for p in PACKAGE.rglob("*") if p.is_dir() and not skip(p)}
    modules = {p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py") if not skip(p)}
    return folders, modules


def _named_in_layout() -> tuple[set[str], set[str]]:
    """The folders and modules the layout doc's list names: a folder line `- \\`path/\\``, its modules indented
    under it as `  - \\`name.py\\`` (an `__init__.py` goes with its folder line)."""
    folders, modules, current = set(), set(), None
    for line in LAYOUT.read_text().splitlines():
        folder = re.match(r"^- `(hybrid_vla_ros/[^`]*)`", line)
        module = re.match(r"^  - `([^`/]+\.py)`", line)
        if folder:
            current = folder.group(1)
            folders.add(current)
            if (ROOT / current / "__init__.py").exists():
                modules.add(current + "__init__.py")
        elif module and current:
            modules.add(current + module.group(1))
    return folders, modules


def test_the_layout_doc_names_every_folder_and_module_and_nothing_else():
    folders, modules = _tree()
    named_folders, named_modules = _named_in_layout()
    assert named_folders, "docs/LAYOUT.md lists no folder at all"
    missing = sorted((folders - named_folders) | (modules - named_modules))
    extra = sorted((named_folders - folders) | (named_modules - modules))
    fix = " (run python scripts/layout_doc.py)"
    assert not missing, "docs/LAYOUT.md misses " + ", ".join(missing) + fix
    assert not extra, "docs/LAYOUT.md names what is not in the tree: " + ", ".join(extra) + fix


def test_the_layout_docs_generated_part_is_what_the_tree_gives():
    script = _layout_script()
    text = LAYOUT.read_text()
    assert script.BEGIN in text and script.END in text, "docs/LAYOUT.md lost its generated part's markers"
    assert script.rewritten(text) == text, "docs/LAYOUT.md is out of date: run python scripts/layout_doc.py"


def test_the_layout_generator_takes_a_modules_first_sentence_and_sees_a_new_module(tmp_path, monkeypatch):
    script = _layout_script()
    module = tmp_path / "hybrid_vla_ros" / "room" / "thing.py"
    module.parent.mkdir(parents=True)
    (module.parent / "__init__.py").write_text('"""A room. More about it."""\n')
    module.write_text('"""Holds one thing, e.g. a chair. Not two.\n\nDetails."""\n')
    monkeypatch.setattr(script, "ROOT", tmp_path)
    monkeypatch.setattr(script, "PACKAGE", tmp_path / "hybrid_vla_ros")
    lines = script.generated().splitlines()
    assert "- `hybrid_vla_ros/room/`: A room." in lines
    assert "  - `thing.py`: Holds one thing, e.g. a chair." in lines
    assert script.rewritten("# by hand\n") != "# by hand\n"


def test_the_layout_docs_layers_are_test_houses():
    line = next(l for l in LAYOUT.read_text().splitlines() if l.startswith("Layers, bottom to top:"))
    assert re.findall(r"`([a-z_]+)`", line) == LAYERS
    bottom = re.search(r"The bottom is the package's top-level modules \(([^)]*)\)", LAYOUT.read_text())
    assert bottom and set(re.findall(r"`([a-z_]+)\.py`", bottom.group(1))) == BOTTOM


def _shipped_table() -> list[list[str]]:
    """The rows of CHECKPOINTS' "Shipped mappings" table (from its header to the first blank line), cells stripped."""
    section = CHECKPOINTS.read_text().split("### Shipped mappings", 1)[1]
    table = section[section.index("| mapping |"):].split("\n\n", 1)[0].splitlines()[2:]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table]


def _help_mappings() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "convert", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    found = re.search(r"a shipped one:\s*([a-z0-9_,\s]+?)\s*(?:--|$)", " ".join(out.stdout.split()))
    assert found, out.stdout
    return [name.strip() for name in found.group(1).split(",")]


def test_the_shipped_mappings_table_agrees_with_the_files_and_convert_help():
    rows = _shipped_table()
    in_table = [row[0].strip("`") for row in rows]
    files = {p.stem: yaml.safe_load(p.read_text()) for p in MAPPINGS.glob("*.yaml")}
    assert sorted(in_table) == sorted(files), "CHECKPOINTS' table vs convert/mappings/*.yaml"
    assert sorted(_help_mappings()) == sorted(files), "convert --help vs convert/mappings/*.yaml"
    assert all(body["name"] == stem for stem, body in files.items()), "a mapping file's name is not its file's"
    assert all(body.get("verified") is False for body in files.values()), \
        "a mapping now says verified: true, CHECKPOINTS says none has converted a real release"


def test_the_shipped_mappings_table_points_at_sections_and_tests_that_exist():
    text = CHECKPOINTS.read_text()
    headings = {l.lstrip("#").strip() for l in text.splitlines() if l.startswith("#")}
    for row in _shipped_table():
        name, tests, section = row[0], row[3], row[4].strip("*")
        assert section in headings, f"{name}: no section '{section}' in docs/CHECKPOINTS.md"
        for test in re.findall(r"`(test/[^`]+)`", tests):
            assert (ROOT / test).exists(), f"{name}: {test} does not exist"
            assert name.strip("`") in (ROOT / test).read_text(), f"{name}: {test} never names it"


def test_every_mapping_the_docs_name_as_shipped_is_shipped():
    shipped = {p.stem for p in MAPPINGS.glob("*.yaml")}
    text = CHECKPOINTS.read_text()
    named = set(re.findall(r"shipped `([a-z0-9_]+)` mapping", text))
    named |= {m for m in re.findall(r"--mapping ([a-z0-9_]+)\b", text)}
    assert named and named <= shipped, f"named as shipped but not shipped: {sorted(named - shipped)}"
    usage = (ROOT / "docs" / "USAGE.md").read_text()
    listed = re.search(r"shipped mappings: ([^;)]*)", usage)
    assert listed and sorted(re.findall(r"`([a-z0-9_]+)`", listed.group(1))) == sorted(shipped)


REPO_PATH = re.compile(r"`((?:hybrid_vla_ros|test|docs|scripts|config|launch|schema|msgs)/[^`\s*<>]*)`")
LINK = re.compile(r"\]\(([^)#\s]+)")


def test_every_repository_path_the_front_page_and_its_docs_name_exists():
    missing = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "USAGE.md", LAYOUT):
        text = doc.read_text()
        for named in REPO_PATH.findall(text):
            path, _, test = named.partition("::")
            if not (ROOT / path).exists():
                missing.append(f"{doc.name}: `{path}`")
            elif test and f"def {test}(" not in (ROOT / path).read_text():
                missing.append(f"{doc.name}: `{named}` (no such test)")
        for link in LINK.findall(text):
            if not link.startswith("http") and not (doc.parent / link).exists():
                missing.append(f"{doc.name}: link {link}")
    assert not missing, "\n".join(missing)


def test_every_test_the_feature_table_names_exists_and_its_count_matches_the_table():
    """docs/INTERFACES.md, "Every feature for every model": each `file::test` it cites is a test of that file, and
    each `::test` one of the file named last before it (a name cut short with `...` matches its start); the
    summary line counts the table's cells."""
    text = (ROOT / "docs" / "INTERFACES.md").read_text()
    section = text[text.index("## Every feature for every model"):]
    section = section[:section.index("\n## ", 3)]
    missing, file = [], None
    # `file::test`, or `::test` of the file named last before it
    for named, name, cut in re.findall(r"`(test_[a-z0-9_]+\.py)?::(test_[a-z0-9_]*[a-z0-9])(_\.\.\.)?", section):
        file = named or file
        source = ROOT / "test" / (file or "?")
        if not source.exists() or not re.search(rf"def {name}{'' if cut else '[(]'}", source.read_text()):
            missing.append(f"{file}::{name}")
    assert not missing, missing
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    cells = [cell.strip().split(" (")[0] for row in rows for cell in row.strip().strip("|").split("|")[1:]]
    count = {mark: cells.count(mark) for mark in ("✓", "✓ᴿ", "reason", "◐", "gap")}
    summary = re.search(r"(\d+) cells: (\d+) tested \((\d+) of them ✓ᴿ\), (\d+) with a reason, (\d+) partly tested "
                        r"\(◐\), (\d+) gaps", section)
    assert summary, "the summary line under the table"
    assert [int(n) for n in summary.groups()] == [len(cells), count["✓"] + count["✓ᴿ"], count["✓ᴿ"],
                                                  count["reason"], count["◐"], count["gap"]], count
