"""`python -m harness run CONFIG --slurm`: one job a run, with --list's selection, submitted through
submitit (here its local executor: the same jobs as processes on this machine)."""

from __future__ import annotations

import json
import os
import time

import pytest
import yaml
from harness_cli import TESTS
from test_e2e import TINY

from harness.__main__ import main
from harness.slurm import parse_params

SUITE = {
    "name": "jobs",
    "task": {"class_path": "test_e2e.PromptParityReward", "init_args": {"train_size": 100, "eval_size": 8}},
    "model": {"preset": "tiny", "tiny": TINY, "warm_start": {"steps": 5, "batch_size": 8}},
    "algorithms": {
        "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}},
        "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}},
        "ppo": {"class_path": "algorithms.ppo.PPO", "init_args": {}},
    },
    "seeds": [0],
    "schedule": {"steps": 2, "prompts_per_step": 2},
    "sampling": {"max_new_tokens": 6},
    "evaluation": {"every": 2},
}


@pytest.mark.slow
def test_each_selected_run_is_a_job_and_they_share_one_results_folder(tmp_path, capsys, monkeypatch):
    pytest.importorskip("submitit")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(TESTS.parent)]))  # the jobs import test_e2e
    config = tmp_path / "jobs.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [SUITE]}))
    results = tmp_path / "runs"
    chosen = ["--algorithm", "grpo", "--algorithm", "hp_rlvr"]
    assert main(["run", str(config), "--results", str(results), "--slurm", "--cluster", "local", *chosen]) == 0
    out = capsys.readouterr().out
    assert "jobs/grpo-seed0: job" in out and "jobs/hp_rlvr-seed0: job" in out and "ppo" not in out
    assert "submitted 2 jobs" in out
    finished = [results / "jobs" / f"{a}-seed0" / "run.json" for a in ("grpo", "hp_rlvr")]
    deadline = time.monotonic() + 300
    while len(list((results / "slurm").glob("*_result.pkl"))) < 2 and time.monotonic() < deadline:
        time.sleep(1)  # each job leaves its result when it ends, passed or failed
    logs = "".join(f.read_text()[-2000:] for f in (results / "slurm").glob("*_log.err"))
    assert all(f.exists() for f in finished), logs
    assert not (results / "jobs" / "ppo-seed0").exists()
    # one starting weights for both, built by whichever job came first
    starts = {json.loads(f.read_text())["model"] for f in finished}
    assert len(starts) == 1 and len(list((tmp_path / "cache" / "policies").glob("*/recipe.json"))) == 1
    assert list((results / "slurm").glob("*_log.out"))  # each job's log


def test_job_parameters_are_checked():
    assert parse_params(["timeout_min=90", "slurm_partition=gpu", "mem_gb=31.5"]) == {
        "timeout_min": 90,
        "slurm_partition": "gpu",
        "mem_gb": 31.5,
    }
    for bad, match in (("timeout_min", "KEY=VALUE"), ("timeout_min=soon", "takes a number"), ("queue=x", "unknown")):
        with pytest.raises(ValueError, match=match):
            parse_params([bad])


def test_under_slurm_a_run_asks_for_a_task_a_device_on_each_of_its_nodes(tmp_path, monkeypatch):
    """Lightning joins SLURM's tasks: a run of 4 devices on 2 nodes is 4 tasks a node, 2 nodes
    (the local executor gets 1 and 1: there Lightning starts its own processes)."""
    import sys
    from contextlib import nullcontext
    from types import ModuleType, SimpleNamespace

    from harness.slurm import submit

    asked = []

    class Executor:
        def __init__(self, folder, cluster):
            self.parameters = {}

        def update_parameters(self, **parameters):
            self.parameters |= parameters

        def batch(self):
            asked.append(dict(self.parameters))
            return nullcontext()

        def submit(self, function):
            return SimpleNamespace(job_id="1")

    submitit = ModuleType("submitit")
    submitit.AutoExecutor = Executor
    helpers = ModuleType("submitit.helpers")
    helpers.CommandFunction = lambda command, cwd: (command, cwd)
    monkeypatch.setitem(sys.modules, "submitit", submitit)
    monkeypatch.setitem(sys.modules, "submitit.helpers", helpers)
    run = SimpleNamespace(id="s/grpo-seed0", suite=SimpleNamespace(trainer=SimpleNamespace(devices=4, num_nodes=2)))
    for cluster, shape in (("slurm", (4, 2)), ("local", (1, 1))):
        asked.clear()
        submit(tmp_path / "b.yaml", [run], tmp_path / "runs", cluster, {}, tmp_path / "logs")
        assert (asked[0]["tasks_per_node"], asked[0]["nodes"]) == shape, cluster
