"""Starting weights shipped with the project: the default benchmark's, checked byte for byte
before use, and the ones its config builds today."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from harness import shipped

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_benchmarks_starting_weights_ship_and_are_the_ones_its_config_builds():
    spec = importlib.util.spec_from_file_location("ship_weights", ROOT / "maintenance" / "ship_weights.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ship_weights"] = module
    spec.loader.exec_module(module)
    assert module.problems(ROOT / "benchmarks.yaml") == []
    assert len(module.keys(ROOT / "benchmarks.yaml")) == 3  # math, code, ALFWorld


def entry(tmp_path: Path) -> Path:
    made = tmp_path / "cache" / "policies" / "0123456789abcdef"
    made.mkdir(parents=True)
    (made / "recipe.json").write_text(json.dumps({"version": 4}))
    (made / "model.safetensors").write_bytes(b"weights")
    return made


def test_a_shipped_folder_is_copied_whole_and_refused_when_a_byte_changed(tmp_path, monkeypatch):
    folder = shipped.ship(entry(tmp_path), into=tmp_path / "weights")
    monkeypatch.setattr(shipped, "SHIPPED", tmp_path / "weights")
    assert shipped.shipped(folder.name) == folder
    shipped.copy_into(folder, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["model.safetensors", "recipe.json"]
    (folder / "model.safetensors").write_bytes(b"weightz")
    with pytest.raises(ValueError, match=r"changed since they were shipped \(model.safetensors\)"):
        shipped.copy_into(folder, tmp_path / "again")
    monkeypatch.setenv("HARNESS_BUILD_WEIGHTS", "1")  # build here instead
    assert shipped.shipped(folder.name) is None
