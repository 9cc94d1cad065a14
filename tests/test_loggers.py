"""The trackers people use (`trainer.loggers`): each run named by its id, its settings as
hyperparameters, its records and its final row logged; W&B in offline mode and MLflow on a local
file store."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest
import yaml
from test_e2e import TINY

from harness.__main__ import main

SUITE = {
    "name": "logged",
    "task": {"class_path": "test_e2e.PromptParityReward", "init_args": {"train_size": 100, "eval_size": 8}},
    "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 5, "batch_size": 8}},
    "algorithms": {
        "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}},
        "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}},
    },
    "seeds": [0],
    "schedule": {"steps": 2, "prompts_per_step": 2},
    "sampling": {"max_new_tokens": 6},
    "evaluation": {"every": 2},
    "trainer": {"loggers": ["csv", "wandb", "mlflow"]},
}


def wandb_records(path: Path):
    """The records of an offline W&B run file (`run-<id>.wandb`): a 7-byte header, then LevelDB's
    log format (32 KiB blocks of chunks: crc32, length, type; a record may span chunks)."""
    from wandb.proto import wandb_internal_pb2

    data, position, pending = path.read_bytes(), 7, b""
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # a block's tail too short for a header is padding
            position += 32768 - position % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 0:
            return
        if kind in (1, 4):  # a whole record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def write(tmp_path, spec):
    config = tmp_path / "logged.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    return config


@pytest.mark.slow
def test_wandb_offline_and_mlflow_file_store_get_every_run_by_its_id(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["run", str(write(tmp_path, SUITE)), "--results", str(tmp_path / "runs")]) == 0
    for algorithm in ("grpo", "hp_rlvr"):
        run_dir = tmp_path / "runs" / "logged" / f"{algorithm}-seed0"
        (offline,) = (run_dir / "wandb").glob("offline-run-*/*.wandb")  # one W&B run a harness run
        records = list(wandb_records(offline))
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        assert run.display_name == f"logged/{algorithm}-seed0" and run.run_group == "logged"
        config = {u.key: json.loads(u.value_json) for r in records if r.HasField("config") for u in r.config.update}
        assert config["seed"] == 0 and config["algorithm"]["class_path"].endswith(
            "GRPO" if algorithm == "grpo" else "HPRLVR"
        )
        updates = [u for r in records if r.HasField("summary") for u in r.summary.update]
        summary = {u.key or "/".join(u.nested_key): json.loads(u.value_json) for u in updates}
        info = json.loads((run_dir / "run.json").read_text())
        assert summary["final/accuracy_after"] == info["accuracy_after"] and "reward" in summary
        assert summary["final/rollouts"] > 0 and summary["final/accuracy_before"] == info["accuracy_before"]
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "logged"]
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"logged/grpo-seed0", "logged/hp_rlvr-seed0"}
    grpo = runs["logged/grpo-seed0"]
    assert grpo.data.params["seed"] == "0" and grpo.data.params["schedule/steps"] == "2"
    assert "reward" in grpo.data.metrics and "final/accuracy_after" in grpo.data.metrics


def test_an_unknown_or_missing_logger_is_one_line(tmp_path, capsys, monkeypatch):
    bad = {**SUITE, "trainer": {"loggers": ["csv", "neptune"]}}
    assert main(["run", str(write(tmp_path, bad)), "--list"]) == 2
    assert "suites[0].trainer.loggers: unknown logger 'neptune'" in capsys.readouterr().err
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else found(name, *a))
    assert main(["run", str(write(tmp_path, SUITE)), "--list"]) == 2
    assert 'suites[0].trainer.loggers: wandb is not installed (pip install -e ".[wandb]")' in capsys.readouterr().err
