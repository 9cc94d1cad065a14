"""The packages stand on one another in one order: harness (the application) -> algorithms ->
tasks -> rollout (the lowest layer). Every import in the project's own code, function-level and
type-checking ones included, must point down that order or stay inside its own package."""

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
LAYERS = ["rollout", "tasks", "algorithms", "harness"]  # lowest first


def imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
    return out


def test_every_import_points_down_the_layers():
    upward = []
    for layer, package in enumerate(LAYERS):
        for path in sorted((ROOT / package).rglob("*.py")):
            for module in imports(path):
                top = module.split(".")[0]
                if top in LAYERS and LAYERS.index(top) > layer:
                    upward.append(f"{path.relative_to(ROOT)} imports {module}")
    assert upward == []


def test_the_check_sees_an_upward_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from harness.driver import plan\nimport tasks.base\n")
    assert sorted(imports(sample)) == ["harness.driver", "tasks.base"]


def module_graph(root: Path, packages: list[str]) -> dict[str, set[str]]:
    """{module: the project's modules it imports}, function-level imports included, `from a import
    b` counted as an import of the module a.b where there is one."""
    paths = {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for package in packages
        for p in (root / package).rglob("*.py")
    }
    graph = {name: set() for name in paths}
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in paths and t != name}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph`, or None."""
    import graphlib

    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return error.args[1]
    return None


def test_no_module_imports_itself_round_a_circle():
    assert circle(module_graph(ROOT, LAYERS)) is None


def test_the_check_sees_a_circle(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import x\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from pkg import a\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    assert sorted(set(circle(module_graph(tmp_path, ["pkg"])))) == ["pkg.a", "pkg.b"]
