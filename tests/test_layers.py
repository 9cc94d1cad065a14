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
