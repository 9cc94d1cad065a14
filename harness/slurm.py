"""`python -m harness run CONFIG --slurm`: one job a run, submitted through submitit, with the
same selection as `--list`. Each job runs `python -m harness run CONFIG --run <id>` in this
folder, so jobs share caches and results as the file locks already allow (docs/cluster.md); a
run of several processes gets them as SLURM tasks (`trainer.devices` a node, `num_nodes`
nodes), which Lightning reads from SLURM's environment. `--cluster local` runs the same jobs as
local processes (submitit's local executor), to try a submission without a scheduler.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from itertools import groupby
from pathlib import Path

from harness.plan import PlannedRun

PARAMETERS = {"timeout_min": int, "cpus_per_task": int, "gpus_per_node": int, "mem_gb": float}
"""What `--slurm-param` may set besides `slurm_*` (any of submitit's SLURM parameters: partition,
account, qos, constraint...), by submitit's names."""


def parse_params(pairs: list[str]) -> dict:
    """`KEY=VALUE` pairs as submitit's parameters; ValueError naming the pair otherwise."""
    params: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not value:
            raise ValueError(f"--slurm-param: expected KEY=VALUE, got {pair!r}")
        if key in PARAMETERS:
            try:
                params[key] = PARAMETERS[key](value)
            except ValueError:
                raise ValueError(f"--slurm-param: {key} takes a number, got {value!r}") from None
        elif key.startswith("slurm_"):
            params[key] = value
        else:
            raise ValueError(f"--slurm-param: unknown {key!r} (use {', '.join(PARAMETERS)} or slurm_<sbatch option>)")
    return params


def submit(
    config: Path,
    runs: list[PlannedRun],
    results: Path,
    cluster: str,
    params: dict,
    logs: Path,
    overrides: Sequence[str] = (),
) -> list[tuple[PlannedRun, object]]:
    """Submit one job a run (a job array a shape of run: processes a node, nodes); (run, its job)
    each. Each job reads the config with the same `overrides`."""
    try:
        import submitit
    except ModuleNotFoundError:
        raise ModuleNotFoundError('--slurm needs submitit: pip install -e ".[slurm]"') from None
    from submitit.helpers import CommandFunction

    executor = submitit.AutoExecutor(folder=logs, cluster=cluster)
    executor.update_parameters(name="rlvr", **params)
    jobs = []
    shape = lambda r: (r.suite.trainer.devices, r.suite.trainer.num_nodes)  # noqa: E731
    for (devices, nodes), group in groupby(sorted(runs, key=shape), key=shape):
        group = list(group)
        # under SLURM each process is a task that Lightning joins; locally Lightning starts its own
        tasks = devices if cluster != "local" else 1
        executor.update_parameters(tasks_per_node=tasks, nodes=nodes if cluster != "local" else 1)
        command = [sys.executable, "-m", "harness", "run", str(config.resolve()), *overrides]
        command += ["--results", str(results.resolve())]
        with executor.batch():
            submitted = [executor.submit(CommandFunction(command + ["--run", r.id], cwd=os.getcwd())) for r in group]
        jobs += list(zip(group, submitted))
    return jobs
