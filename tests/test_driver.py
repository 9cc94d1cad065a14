"""The driver as a researcher with many jobs uses it: selecting runs, listing them, reruns when
settings change, several processes on one results folder, and publishing compact records."""

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import polars as pl
import pytest
import yaml
from test_e2e import suite

from harness.__main__ import main
from harness.config import SETTINGS, load_benchmark
from harness.plan import plan
from harness.resume import changed_settings
from harness.time_left import Progress

TESTS = Path(__file__).parent


def write_config(path: Path, suites: list[dict], cache: Path) -> Path:
    path.write_text(yaml.safe_dump({"cache_dir": str(cache), "suites": suites}))
    return path


def two_suites() -> list[dict]:
    first = suite("math", "tasks.math.MathTask", steps=2)
    first["algorithms"]["hp_rlvr"] = {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}}
    first["seeds"] = [0, 1]
    second = suite("other", "tasks.math.MathTask", steps=2)
    second["task"]["init_args"]["train_size"] = 150  # starting weights of its own
    return [first, second]


def test_list_prints_one_run_id_a_line_and_filters_select(tmp_path, capsys):
    config = write_config(tmp_path / "b.yaml", two_suites(), tmp_path / "cache")
    assert main(["run", str(config), "--list"]) == 0
    assert capsys.readouterr().out.split() == [
        "math/grpo-seed0",
        "math/hp_rlvr-seed0",
        "math/grpo-seed1",
        "math/hp_rlvr-seed1",
        "other/grpo-seed0",
    ]
    assert main(["run", str(config), "--list", "--suite", "math", "--algorithm", "hp_rlvr"]) == 0
    assert capsys.readouterr().out.split() == ["math/hp_rlvr-seed0", "math/hp_rlvr-seed1"]
    assert (
        main(["run", str(config), "--list", "--seed", "1", "--run", "math/grpo-seed1", "--run", "other/grpo-seed0"])
        == 0
    )
    assert capsys.readouterr().out.split() == ["math/grpo-seed1"]
    assert not (tmp_path / "cache").exists()  # listing builds nothing


@pytest.mark.parametrize(
    "option, expected",
    [
        (["--suite", "maths"], "--suite: maths not in this benchmark (it has: math, other)"),
        (["--algorithm", "ppo"], "--algorithm: ppo not in this benchmark (it has: grpo, hp_rlvr)"),
        (["--seed", "7"], "--seed: 7 not in this benchmark (it has: 0, 1)"),
        (["--run", "math/grpo-seed9"], "--run: math/grpo-seed9 not in this benchmark"),
        (["--suite", "other", "--algorithm", "hp_rlvr"], "no run of this benchmark matches all of them"),
    ],
)
def test_a_filter_that_matches_nothing_is_one_line_and_exit_2(tmp_path, capsys, option, expected):
    config = write_config(tmp_path / "b.yaml", two_suites(), tmp_path / "cache")
    assert main(["run", str(config), *option]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_progress_counts_every_run_and_estimates_runs_and_warm_starts_apart(tmp_path):
    config = write_config(tmp_path / "b.yaml", two_suites(), tmp_path / "cache")
    runs = plan(load_benchmark(config))  # 4 runs of math, then 1 of other: two sets of starting weights
    progress = Progress(runs, tmp_path / "cache")
    assert progress.label() == "(1/5)"  # nothing finished yet: no estimate
    assert progress.needs_weights(runs[0]) and progress.needs_weights(runs[0]) != progress.needs_weights(runs[4])
    progress.done(None, 0.0)  # not run here: counts, but says nothing of the pace
    assert progress.label() == "(2/5)"

    def build(planned):
        entry = tmp_path / "cache" / "policies" / progress.needs_weights(planned)
        entry.mkdir(parents=True)
        (entry / "recipe.json").write_text("{}")

    build(runs[1])
    progress.done(130.0, 100.0)  # 30 s of training after 100 s building the math suite's weights
    # 3 runs left at 30 s, and the other suite's weights still to build at 100 s
    assert progress.label() == "(3/5), about 3 min left"
    build(runs[4])
    progress.done(50.0, 0.0)  # a run of 50 s on weights already built; the other suite's are built now
    assert progress.label() == "(4/5), about 80 s left"  # 2 runs at a mean of 40 s, nothing to build


def test_changed_settings_are_named_by_their_path():
    before = {"optim": {"lr": 1e-5, "warmup_steps": 10}, "seed": 0}
    now = {"optim": {"lr": 2e-5, "warmup_steps": 10}, "seed": 0, "new": 1}
    assert changed_settings(before, now) == ["new: (unset) -> 1", "optim.lr: 1e-05 -> 2e-05"]


# Fields whose other value cannot be made up from their type alone
OTHER_VALUES = {"trainer.loggers": ["csv"], "model.warm_start.teach": {"algorithms.hp_rlvr.HPRLVR": {"fraction": 0.3}}}


def another_value(dotted: str, owner: type, name: str, value):
    """A value of field `name` of dataclass `owner` other than `value`, that its checks accept."""
    if dotted in OTHER_VALUES:
        return OTHER_VALUES[dotted]
    hint = typing.get_type_hints(owner)[name]  # Annotated ranges stripped
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] if value is None else [hint]
    kind, origin = kinds[0], typing.get_origin(kinds[0])
    if origin is typing.Literal:
        return next(option for option in typing.get_args(kind) if option != value)
    if value is None:
        if kind in (int, float):
            return kind(2)
        if kind is str:
            return "elsewhere"
        if dataclasses.is_dataclass(kind):
            return kind()
    elif isinstance(value, bool):
        return not value
    elif isinstance(value, int):
        return value + 1
    elif isinstance(value, float):
        return value / 2 if value else 0.5
    elif isinstance(value, str):
        return value + "-other"
    elif isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value + [max(value, default=0) + 1]
    pytest.fail(f"{dotted}: no other value known for {value!r} ({hint}); add one to OTHER_VALUES")


def setting_leaves(value, path: tuple[str, ...]):
    """(dotted path, owner class, field name, value) of every field, nested dataclasses walked."""
    for f in dataclasses.fields(value):
        inner = getattr(value, f.name)
        if dataclasses.is_dataclass(inner):
            yield from setting_leaves(inner, (*path, f.name))
        else:
            yield (*path, f.name), type(value), f.name, inner


def replaced(value, path: tuple[str, ...], new):
    """A copy of dataclass `value` with the field at `path` set to `new` (no other field touched)."""
    head, *rest = path
    out = copy.copy(value)  # frozen ones too (the tiny model's config)
    object.__setattr__(out, head, new if not rest else replaced(getattr(value, head), tuple(rest), new))
    return out


# What a run's records do not depend on: a resumed run may differ here and still resume.
NOT_COMPARED = {"trainer.checkpoint_every_s", "trainer.completions", "trainer.loggers", "trainer.keep_policy"}


def test_a_resumed_run_whose_any_one_setting_changed_starts_again(tmp_path):
    """Every field of the suite's settings (schedule, sampling, optim, update, evaluation), its
    trainer and its model, walked from the dataclasses themselves so that a new field is covered
    too: changed alone, an interrupted run is moved aside and started again, never resumed."""
    from harness.resume import prepare, run_spec

    config = write_config(tmp_path / "b.yaml", [suite("math", "tasks.math.MathTask")], tmp_path / "cache")
    (base,) = load_benchmark(config).suites
    groups = {**{name: base.settings[name] for name in SETTINGS}, "trainer": base.trainer, "model": base.model}
    checked = []
    for group, value in groups.items():
        for path, owner, name, old in setting_leaves(value, (group,)):
            dotted = ".".join(path)
            changed = copy.copy(base)
            new = replaced(value, path[1:], another_value(dotted, owner, name, old))
            if group in SETTINGS:
                changed.settings = {**base.settings, group: new}
            else:
                setattr(changed, group, new)
            run_dir = tmp_path / "runs" / dotted / "grpo-seed0"
            (run_dir / "checkpoints").mkdir(parents=True)
            (run_dir / "checkpoints" / "last.ckpt").write_text("")  # interrupted: it would resume
            (run_dir / "spec.json").write_text(json.dumps(run_spec(base, "grpo", 0)))
            said = []
            assert prepare(run_dir, run_spec(base, "grpo", 0), said.append) == "resume" and not said
            action = prepare(run_dir, run_spec(changed, "grpo", 0), said.append)
            if dotted in NOT_COMPARED:
                assert action == "resume" and not said, dotted
                continue
            assert action == "start", f"{dotted} changed, and the run resumed under the new setting"
            # named by its path, or by the path of the entry changed within it (`teach`'s mapping)
            assert len(said) == 1 and any(
                f"{at}{dotted}{end}" in said[0] for at in ("(", "; ") for end in (": ", ".")
            ), said
            assert (run_dir.parent / ".replaced").is_dir()
            checked.append(dotted)
    # the two the mutation run saw missed, and one of each group, are among those checked
    assert {"trainer.precision", "sampling.max_new_tokens"} <= set(checked)
    assert {p.split(".")[0] for p in checked} == {*SETTINGS, "trainer", "model"}


def test_a_resumed_run_whose_algorithm_or_task_arguments_changed_starts_again(tmp_path):
    """The algorithm's own init_args and the task's determine the records too. A model folder
    (no warm start, whose recipe would name the task) isolates them: either changed alone, an
    interrupted run is moved aside and started again, the change named by its path."""
    from harness.config import ClassSpec
    from harness.resume import prepare, run_spec

    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (model / name).write_text("")
    spec = suite("math", "tasks.math.MathTask")
    spec["model"] = {"path": str(model)}
    config = write_config(tmp_path / "b.yaml", [spec], tmp_path / "cache")
    (base,) = load_benchmark(config).suites
    grpo, task = base.algorithms["grpo"], base.task
    changes = {
        "algorithm.init_args.group_size": {"algorithms": {"grpo": ClassSpec(grpo.class_path, {"group_size": 2})}},
        "task.init_args.eval_size": {"task": ClassSpec(task.class_path, {**task.init_args, "eval_size": 10})},
    }
    for dotted, change in changes.items():
        run_dir = tmp_path / "runs" / dotted / "grpo-seed0"
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "last.ckpt").write_text("")  # interrupted: it would resume
        (run_dir / "spec.json").write_text(json.dumps(run_spec(base, "grpo", 0)))
        said = []
        assert prepare(run_dir, run_spec(dataclasses.replace(base, **change), "grpo", 0), said.append) == "start"
        assert len(said) == 1 and f"({dotted}: " in said[0], said


def test_a_run_recorded_before_a_setting_was_added_is_still_finished_with_these_settings(tmp_path):
    """A setting added since (`harness.records.ADDED_SETTINGS`) reads as the value the run ran as:
    a finished run is skipped, not moved aside and run again; set otherwise, it runs again."""
    from harness.leaderboard import protocol
    from harness.records import ADDED_SETTINGS, current
    from harness.resume import prepare, run_spec

    config = write_config(tmp_path / "b.yaml", [suite("math", "tasks.math.MathTask")], tmp_path / "cache")
    (base,) = load_benchmark(config).suites
    now = run_spec(base, "grpo", 0)
    recorded = json.loads(json.dumps(now))
    for group, values in ADDED_SETTINGS.items():
        for key in values:
            del recorded[group][key]
    run_dir = tmp_path / "runs" / "math" / "grpo-seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text(json.dumps(recorded))
    (run_dir / "run.json").write_text("{}")
    for records in ("metrics.parquet", "eval.parquet"):  # a finished run's records, readable (else set aside)
        pl.DataFrame().write_parquet(run_dir / records)
    said = []
    assert prepare(run_dir, now, said.append) == "skip" and said == []
    assert protocol(current({**recorded, "spec": recorded})) == protocol(now)
    changed = json.loads(json.dumps(now))
    changed["update"]["skip_zero_advantage"] = True
    assert prepare(run_dir, changed, said.append) == "start"
    assert "update.skip_zero_advantage: False -> True" in said[0]


@pytest.mark.slow
def test_a_run_whose_settings_changed_runs_again_and_the_old_one_is_kept(tmp_path, capsys):
    spec = suite("math", "tasks.math.MathTask", steps=2)
    config = write_config(tmp_path / "b.yaml", [spec], tmp_path / "cache")
    results = tmp_path / "runs"
    assert main(["run", str(config), "--results", str(results)]) == 0
    run = results / "math" / "grpo-seed0"
    first = pl.read_parquet(run / "metrics.parquet")
    assert json.loads((run / "spec.json").read_text())["schedule"]["steps"] == 2
    capsys.readouterr()
    assert main(["run", str(config), "--results", str(results)]) == 0  # same settings: reused
    assert "[math] grpo-seed0 (1/1): finished earlier with these settings, skipped" in capsys.readouterr().out
    spec["schedule"]["steps"] = 3
    spec["optim"] = {"lr": 1e-4}
    write_config(config, [spec], tmp_path / "cache")
    assert main(["run", str(config), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "settings changed since it ran (optim.lr: 5e-05 -> 0.0001; schedule.steps: 2 -> 3)" in out
    assert pl.read_parquet(run / "metrics.parquet")["step"].to_list() == [1, 2, 3]
    (kept,) = (results / "math" / ".replaced").iterdir()
    assert pl.read_parquet(kept / "metrics.parquet").equals(first)  # nothing lost
    board = pl.read_parquet(results / "math" / "leaderboard.parquet")
    assert board["steps"].to_list() == [3]  # the replaced run is not on the leaderboard


@pytest.mark.slow
def test_published_records_alone_publish_the_same_leaderboard(tmp_path):
    spec = suite("math", "tasks.math.MathTask", steps=2)
    spec["algorithms"]["hp_rlvr"] = {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}}
    config = write_config(tmp_path / "b.yaml", [spec], tmp_path / "cache")
    runs, published = tmp_path / "runs", tmp_path / "results"
    assert main(["run", str(config), "--results", str(runs)]) == 0
    assert main(["leaderboard", str(runs), "--publish", str(published)]) == 0
    suite_dir = published / "math"
    assert sorted(p.name for p in suite_dir.iterdir() if not p.name.startswith(".")) == [
        "completions.parquet",  # a sample of the rollouts the runs kept, for the page (published/index.html)
        "curves.png",
        "evaluations.parquet",
        "fidelity.png",  # math locates errors: credit fidelity over steps
        "grad_norms.png",
        "leaderboard.md",
        "leaderboard.parquet",
        "paired.png",  # hp_rlvr less grpo on the same problems
        "runs.json",
        "steps.parquet",
    ]
    assert pl.read_parquet(suite_dir / "leaderboard.parquet").equals(
        pl.read_parquet(runs / "math" / "leaderboard.parquet")
    )
    assert (published / "leaderboard.md").read_text().replace("Leaderboard: results", "Leaderboard: runs") == (
        runs / "leaderboard.md"
    ).read_text()
    # published again from the records alone, with the run folders gone
    for path in (suite_dir / "leaderboard.parquet", published / "leaderboard.md"):
        path.unlink()
    assert main(["leaderboard", str(published)]) == 0
    assert pl.read_parquet(suite_dir / "leaderboard.parquet").equals(
        pl.read_parquet(runs / "math" / "leaderboard.parquet")
    )
    assert not any(published.glob("*/*/run.json"))  # nothing here for a rerun to take as finished
    # a suite finished in parts: one run's folder published into the records of the others
    part = tmp_path / "part" / "math"
    shutil.copytree(runs / "math" / "hp_rlvr-seed0", part / "hp_rlvr-seed0")
    assert main(["leaderboard", str(part.parent), "--add"]) == 2  # it adds to a published folder: which?
    kept = pl.read_parquet(suite_dir / "completions.parquet")
    assert main(["leaderboard", str(part.parent), "--publish", str(published), "--add"]) == 0
    assert pl.read_parquet(suite_dir / "leaderboard.parquet").equals(
        pl.read_parquet(runs / "math" / "leaderboard.parquet")
    )
    again = pl.read_parquet(suite_dir / "completions.parquet")  # the kept run's rollouts, and the added run's
    assert again.sort("run", "step", "rollout").equals(kept.sort("run", "step", "rollout"))
    assert (published / "index.html").is_file()


@pytest.mark.slow
def test_two_processes_on_one_suite_build_one_warm_start_and_both_finish(tmp_path):
    spec = suite("pair", "test_e2e.ParityReward", steps=2)
    spec["model"]["warm_start"]["steps"] = 300  # long enough that the second process must wait for it
    spec["algorithms"]["hp_rlvr"] = {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}}
    config = write_config(tmp_path / "b.yaml", [spec], tmp_path / "cache")
    results = tmp_path / "runs"
    # one core each: two processes with two threads each on two cores run many times slower
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)]), "OMP_NUM_THREADS": "1"}
    jobs = [
        subprocess.Popen(
            [sys.executable, "-m", "harness", "run", str(config), "--results", str(results), "--algorithm", algorithm],
            cwd=TESTS.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for algorithm in ("grpo", "hp_rlvr")
    ]
    outputs = [job.communicate(timeout=600) for job in jobs]
    for job, (out, err) in zip(jobs, outputs):
        assert job.returncode == 0, err[-3000:]
    said = "".join(out for out, _ in outputs)
    assert said.count("building the starting weights") == 1, said
    (entry,) = [p for p in (tmp_path / "cache" / "policies").iterdir() if p.suffix != ".lock"]  # none half-built
    assert (entry / "recipe.json").exists()
    for algorithm in ("grpo", "hp_rlvr"):
        info = json.loads((results / "pair" / f"{algorithm}-seed0" / "run.json").read_text())
        assert info["model"] == str(entry)
    board = pl.read_parquet(results / "pair" / "leaderboard.parquet")
    assert sorted(board["algorithm"]) == ["grpo", "hp_rlvr"]
    assert sorted(pl.read_parquet(results / "leaderboard.parquet")["algorithm"]) == ["grpo", "hp_rlvr"]


def test_the_step_zero_evaluation_is_reused_only_at_the_same_length_limit(tmp_path):
    """Two runs differing only in `max_new_tokens` evaluate step 0 with other greedy completions:
    one must not reuse the other's accuracy."""
    from types import SimpleNamespace

    from algorithms.settings import EvalArgs
    from harness.step_zero import start_evaluation
    from rollout.settings import SamplingArgs

    def key(**sampling):
        module = SimpleNamespace(eval_args=EvalArgs(), sampling=SamplingArgs(**sampling))
        return start_evaluation(tmp_path, tmp_path / "weights", module, {"task": "t"})[0]

    assert key(max_new_tokens=16) == key(max_new_tokens=16)
    assert key(max_new_tokens=16) != key(max_new_tokens=32)


def test_a_folder_without_its_settings_is_moved_aside_not_skipped_or_resumed(tmp_path):
    """A run folder that holds records but no spec.json (written by another version, or half
    copied) cannot be shown to be this run: it is moved aside and the run starts."""
    from harness.resume import prepare

    run_dir = tmp_path / "s" / "grpo-seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")  # looks finished
    said = []
    assert prepare(run_dir, {"seed": 0}, said.append) == "start"
    (aside,) = (tmp_path / "s" / ".replaced").iterdir()
    assert (aside / "run.json").exists() and "it recorded no settings (spec.json)" in said[0]
    assert json.loads((run_dir / "spec.json").read_text()) == {"seed": 0}


@pytest.mark.slow
def test_a_finished_run_stays_finished_and_sends_its_records_to_loggers_named_later(tmp_path, capsys, monkeypatch):
    """Loggers and keep_policy change no record: a finished run is not run again for them. A
    logger named afterwards gets the run's records (each step, the final summary); a policy
    asked for afterwards is had by replaying the run in a scratch folder, kept because the
    replay's records are the run's own; the run's folder is left as it was otherwise."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    spec = suite("math", "tasks.math.MathTask", steps=2, trainer={"loggers": ["csv"]})
    config = write_config(tmp_path / "b.yaml", [spec], tmp_path / "cache")
    results = tmp_path / "runs"
    assert main(["run", str(config), "--results", str(results)]) == 0
    run = results / "math" / "grpo-seed0"
    records = (run / "metrics.parquet").read_bytes()
    assert json.loads((run / "loggers.json").read_text()) == ["csv"] and not (results / "mlflow.db").exists()
    capsys.readouterr()
    overrides = ["trainer.loggers=[csv, mlflow]", "trainer.keep_policy=true"]
    assert main(["run", str(config), *overrides, "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "finished earlier with these settings, skipped" in out and "sent to mlflow" in out
    assert "replaying it in" in out and "its policy kept in" in out and (run / "policy" / "config.json").is_file()
    assert (run / "metrics.parquet").read_bytes() == records and not (results / "math" / ".replaced").exists()
    assert not (results / "math" / ".replay").exists()
    client = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "math"]
    (logged,) = client.search_runs([experiment.experiment_id])
    assert [m.step for m in client.get_metric_history(logged.info.run_id, "reward")] == [1, 2]
    assert "final/accuracy_after" in logged.data.metrics
    assert json.loads((run / "loggers.json").read_text()) == ["csv", "mlflow"]
    assert main(["run", str(config), *overrides, "--results", str(results)]) == 0
    again = capsys.readouterr().out
    assert "sent to" not in again and "replaying" not in again  # once each


def test_a_run_that_fails_at_its_start_leaves_no_folder_behind(tmp_path, monkeypatch):
    """What a run writes as it starts (its settings) is removed when it fails before its first
    checkpoint: nothing of it could be resumed, and a folder of settings alone reads as a run."""
    import harness.driver

    def failing(suite, algorithm, seed, run_dir, *args):
        assert (run_dir / "spec.json").is_file()
        raise RuntimeError("vLLM could not start")

    monkeypatch.setattr(harness.driver, "fit", failing)
    config = write_config(tmp_path / "b.yaml", [suite("math", "tasks.math.MathTask", steps=2)], tmp_path / "cache")
    with pytest.raises(RuntimeError, match="vLLM could not start"):
        main(["run", str(config), "--results", str(tmp_path / "runs")])
    assert not (tmp_path / "runs" / "math" / "grpo-seed0").exists()


def test_a_failed_start_removes_only_a_folder_with_nothing_to_resume(tmp_path):
    """A run that failed as it started leaves no folder of settings alone; a folder that holds a
    checkpoint (the last, or the one before it where a kill fell between two renames) or a step's
    records is a run that can resume, and stays."""
    from harness.driver import left_nothing

    def folder(name, *files):
        run_dir = tmp_path / name
        for file in ("spec.json", *files):
            (run_dir / file).parent.mkdir(parents=True, exist_ok=True)
            (run_dir / file).write_text("")
        return run_dir

    settings_only = folder("settings")
    left_nothing(settings_only)
    assert not settings_only.exists()
    for kept in (
        folder("last", "checkpoints/last.ckpt"),
        folder("previous", "checkpoints/previous.ckpt"),
        folder("records", "metrics.parquet"),
    ):
        left_nothing(kept)
        assert (kept / "spec.json").is_file(), kept.name


@pytest.mark.parametrize("same", [True, False])
def test_a_replays_policy_is_kept_only_when_its_records_are_the_runs(tmp_path, monkeypatch, capsys, same):
    """keep_policy on a finished run replays it in a scratch folder (here a stand-in for training
    writes the replay's records and policy): a replay whose records are the run's own gives its
    policy to the run; one whose rewards differ (0.5 where the run had 0.25) gives none, and the
    scratch folder goes either way."""
    import harness.finished

    config = write_config(tmp_path / "b.yaml", [suite("math", "tasks.math.MathTask", steps=2)], tmp_path / "cache")
    (math,) = load_benchmark(config).suites
    run_dir = tmp_path / "runs" / "math" / "grpo-seed0"
    run_dir.mkdir(parents=True)
    pl.DataFrame({"step": [1, 2], "reward": [0.25, 0.75]}).write_parquet(run_dir / "metrics.parquet")

    def replayed(suite, algorithm, seed, scratch, cache_dir, resume, say):
        pl.DataFrame({"step": [1, 2], "reward": [0.25 if same else 0.5, 0.75]}).write_parquet(
            scratch / "metrics.parquet"
        )
        (scratch / "policy").mkdir()
        (scratch / "policy" / "config.json").write_text("{}")
        return 0.0

    monkeypatch.setattr(harness.finished, "fit", replayed)
    harness.finished.replay_for_policy(math, "grpo", 0, run_dir, tmp_path / "cache", print)
    out = capsys.readouterr().out
    assert (run_dir / "policy" / "config.json").is_file() == same
    assert ("its policy kept in" in out) == same and ("records differ from the run's" in out) != same
    assert not (run_dir.parent / ".replay").exists()
