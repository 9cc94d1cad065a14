"""python -m harness run CONFIG [--results DIR] [--list] [filters] | evaluate CONFIG [--model PATH] |
leaderboard DIR [--publish OUT] | report DIR | across DIR | bench CONFIG | show RUN | settings [--out FILE]"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    # The harness tokenizes a few short texts at a time between model calls: the Rust tokenizer's
    # thread pool would wait for cores that torch's threads and the game workers hold.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from rollout import kernels

    kernels.pin()  # before torch's first kernel: the same numbers on any x86-64 CPU
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="run the suites of a benchmark file (or some of its runs), then their leaderboards"
    )
    overrides_help = (
        "settings over the file's, checked as the file's: schedule.steps=10 (every suite), "
        "SUITE/seeds=[0] (one suite), algorithms.grpo.init_args.group_size=4; the value is YAML"
    )
    run.add_argument("config", type=Path)
    run.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=overrides_help)
    run.add_argument(
        "--results",
        type=Path,
        default=Path("runs"),
        help="where runs and their leaderboards go (default: runs/, git-ignored)",
    )
    run.add_argument(
        "--list", action="store_true", help="print the ids of the runs selected, one a line, and run nothing"
    )
    run.add_argument(
        "--check",
        action="store_true",
        help="check the whole file, each task's and algorithm's class and arguments included, and run nothing "
        "(--list reads the file alone, to answer at once)",
    )
    run.add_argument(
        "--smoke",
        action="store_true",
        help="check the file end to end in a minute or two a suite: every selected run for 3 steps, 16 held-out "
        "problems, on a cached or 20-step warm start, in a scratch folder (it measures nothing)",
    )
    run.add_argument(
        "--no-estimate",
        action="store_true",
        help="do not measure a few steps first to say what each warm start and run will take (estimate: false)",
    )
    run.add_argument("--suite", action="append", default=[], help="only this suite (repeatable)")
    run.add_argument(
        "--algorithm", action="append", default=[], help="only this algorithm, by its name in the suite (repeatable)"
    )
    run.add_argument("--seed", action="append", default=[], type=int, help="only this seed (repeatable)")
    run.add_argument(
        "--run",
        action="append",
        default=[],
        help="only this run, by its id from --list: SUITE/ALGORITHM-seedK (repeatable)",
    )
    evaluate = commands.add_parser(
        "evaluate",
        help="evaluate checkpoints on each suite's held-out set, without training, compared on the same items",
    )
    evaluate.add_argument("config", type=Path)
    evaluate.add_argument(
        "--model",
        action="append",
        default=[],
        help="a local Hugging Face folder or a run's kept policy (runs/SUITE/RUN/policy), or 'start': the suite's "
        "own starting weights (repeatable; default: start). The first is the reference the others are tested against",
    )
    evaluate.add_argument("--suite", action="append", default=[], help="only this suite (repeatable)")
    evaluate.add_argument(
        "--results", type=Path, default=Path("runs"), help="where the evaluations go: RESULTS/SUITE/evaluation/"
    )
    evaluate.add_argument("--samples", type=int, help="sampled completions a problem for pass@k (default: the suite's)")
    evaluate.add_argument(
        "--pass-at", type=int, action="append", help="k of pass@k, <= --samples (repeatable; default: the suite's)"
    )
    run.add_argument(
        "--slurm", action="store_true", help="submit the runs selected, one job each, instead of running them here"
    )
    run.add_argument(
        "--cluster",
        choices=["slurm", "local"],
        default="slurm",
        help="with --slurm: where the jobs go (local: submitit's local executor, processes on this machine)",
    )
    run.add_argument(
        "--slurm-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --slurm: a job parameter by submitit's name (timeout_min, cpus_per_task, gpus_per_node, mem_gb, "
        "slurm_partition, slurm_account, ...; repeatable)",
    )
    run.add_argument("--slurm-logs", type=Path, help="with --slurm: the jobs' logs (default: RESULTS/slurm)")
    board = commands.add_parser("leaderboard", help="re-publish leaderboards from finished runs")
    board.add_argument(
        "directory", type=Path, help="a folder of suites (or one suite), as run folders or published records"
    )
    board.add_argument(
        "--publish",
        type=Path,
        metavar="OUT",
        help="also copy leaderboards, plots and compact records to OUT (e.g. results/)",
    )
    board.add_argument(
        "--add",
        action="store_true",
        help="with --publish: add DIR's runs to those OUT already holds (a run of the same name is replaced), "
        "for a suite run in parts; refused where a kept run had another task, start or schedule",
    )
    board.add_argument(
        "--readme",
        type=Path,
        help="also paste the leaderboard written (OUT's with --publish) between the leaderboard markers of this file",
    )
    again = commands.add_parser(
        "reproduce",
        help="rerun a benchmark file here and say, cell by cell, whether it reproduces a published results folder",
    )
    again.add_argument("config", type=Path, help="the benchmark file the published folder was made with")
    again.add_argument("published", type=Path, help="the published folder (e.g. results/)")
    again.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=overrides_help)
    again.add_argument(
        "--results", type=Path, default=Path("runs/reproduce"), help="where the rerun goes (default: runs/reproduce)"
    )
    again.add_argument("--suite", action="append", default=[], help="only this suite (repeatable)")
    across = commands.add_parser(
        "across", help="one summary across the tasks of a folder of suites: IQM and P(improvement), with intervals"
    )
    across.add_argument("directory", type=Path, help="a folder of suites, as run folders or published records")
    across.add_argument("--reference", default="grpo", help="the algorithm P(improvement) is taken over")
    bench = commands.add_parser("bench", help="time each stage of a step and the harness overhead, per algorithm")
    bench.add_argument("config", type=Path)
    bench.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=overrides_help)
    bench.add_argument("--steps", type=int, default=5, help="measured steps per algorithm (after one warm-up step)")
    bench.add_argument("--suite", action="append", help="only this suite (repeatable)")
    bench.add_argument("--out", type=Path, help="also write the table here (markdown)")
    bench.add_argument(
        "--trl",
        action="store_true",
        help="instead: each suite's grpo against TRL's GRPOTrainer on the same work (extra: bench)",
    )
    show = commands.add_parser("show", help="print a run's kept completions: a step's rollouts, or an evaluation's")
    show.add_argument("run", type=Path, help="a run's folder: RESULTS/SUITE/ALGORITHM-seedK")
    show.add_argument("--step", type=int, help="the step (default: the last one kept)")
    show.add_argument("--held-out", action="store_true", help="the evaluation's held-out completions instead")
    show.add_argument("--limit", type=int, default=8, help="at most this many (default 8)")
    report = commands.add_parser(
        "report",
        help="write DIR/index.html: one static page of a results folder (leaderboard, plots, rollouts' credit "
        "side by side), opened from disk; leaderboard writes it too",
    )
    report.add_argument("directory", type=Path, help="a results folder with its leaderboard (e.g. results/)")
    settings = commands.add_parser("settings", help="print every setting a benchmark file can hold, with its range")
    settings.add_argument("--out", type=Path, help="write the table here instead (docs/config.md)")
    args, extra = parser.parse_known_args(argv)
    if args.command in ("run", "bench", "reproduce"):  # overrides may follow the options too
        args.overrides += [e for e in extra if "=" in e and not e.startswith("-")]
        extra = [e for e in extra if e not in args.overrides]
    if extra:
        hint = ""
        takes_overrides = {"run": run, "bench": bench, "reproduce": again}.get(args.command)
        if any(e.startswith("--") for e in extra) and takes_overrides is not None:
            smoke = "--smoke runs every run for 3 steps as a check; " if args.command == "run" else ""
            hint = (
                " (a suite's settings go as KEY=VALUE after the config, e.g. schedule.steps=3; "
                f"{smoke}{takes_overrides.prog} -h lists the options)"
            )
        parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")

    if args.command == "show":
        from harness.show import show as shown

        try:
            print(shown(args.run, args.step, args.held_out, args.limit))
        except (FileNotFoundError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return 0
    if args.command == "report":
        from harness.report import write as write_page

        if not args.directory.is_dir():
            print(f"error: directory: no such directory: {args.directory}", file=sys.stderr)
            return 2
        try:
            print(f"wrote {write_page(args.directory)}")
        except FileNotFoundError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return 0
    if args.command == "settings":
        from harness.reference import write_reference

        text = write_reference(args.out)
        print(f"wrote {args.out}" if args.out else text)
        return 0

    from harness.config import ConfigError, check_machine, load_benchmark

    def machine_refuses(suites) -> bool:
        """Check the suites that will run here against this machine; print warnings and any error."""
        first = os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0"
        for suite in suites:
            try:
                for warning in check_machine(suite, f"suites[{benchmark.suites.index(suite)}]"):
                    if first:  # not again from each process Lightning starts for a run
                        print(f"warning: {args.config}: {warning}", file=sys.stderr)
            except ConfigError as error:
                print(f"error: {args.config}: {error}", file=sys.stderr)
                return True
        return False

    if args.command == "reproduce":
        if not args.published.is_dir():
            print(f"error: published: no such directory: {args.published}", file=sys.stderr)
            return 2
        suites = [f"--suite={name}" for name in args.suite]
        code = main(["run", str(args.config), *args.overrides, f"--results={args.results}", *suites])
        if code:
            return code
        from harness.reproduce import write

        _, text = write(args.published, args.results)
        print(text)
        print(f"wrote {args.results / 'reproduce.md'}")
        return 0

    if args.command == "across":
        from harness.across_tasks import publish as publish_across

        if not args.directory.is_dir():
            print(f"error: directory: no such directory: {args.directory}", file=sys.stderr)
            return 2
        table = publish_across(args.directory, args.reference)
        print(table)
        print(f"wrote {args.directory / 'across_tasks.md'}")
        return 0

    if args.command == "leaderboard":
        from harness.leaderboard import publish
        from harness.provenance import OtherWeights
        from harness.records import Damaged, NotOneSuite, suite_folders

        if not args.directory.is_dir():
            print(f"error: directory: no such directory: {args.directory}", file=sys.stderr)
            return 2
        if args.add and not args.publish:
            print("error: --add: adds to a published folder; name it with --publish OUT", file=sys.stderr)
            return 2
        try:
            suite_dirs = suite_folders(args.directory)
            # DIR's own tables, where it can be written: a read-only DIR is still published to OUT
            if args.publish is None or writable(args.directory):
                for suite_dir in suite_dirs:
                    if suite_dir != args.directory:
                        publish(suite_dir)
                board = publish(args.directory)
            else:
                print(f"{args.directory} is read-only: its own tables are left as they are", file=sys.stderr)
            if args.publish:
                from harness.leaderboard import publish_to

                try:
                    board = publish_to(args.directory, args.publish, add=args.add)
                except (FileNotFoundError, Damaged):
                    raise
                except OSError as error:  # a full disk, say: not bad input, and nothing published
                    print(f"error: publishing to {args.publish}: {error}; it is left as it was", file=sys.stderr)
                    return 1
        except FileNotFoundError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except Damaged as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except NotOneSuite as error:
            print(f"error: --add: {error}", file=sys.stderr)
            return 2
        except OtherWeights as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        from harness.leaderboard import compact
        from harness.report import write as write_page

        print(compact(board))
        written = args.publish or args.directory
        print(f"wrote {written / 'leaderboard.md'}")
        print(f"wrote {write_page(written)}")
        if args.readme:
            from harness.leaderboard import paste_into

            paste_into(args.readme, board, written)
            print(f"updated {args.readme}")
        return 0

    results = getattr(args, "results", None)
    if results is not None and results.exists() and not results.is_dir():
        print(f"error: --results: {results} is a file; name a folder (it is created if missing)", file=sys.stderr)
        return 2
    try:
        # --list needs only the file: the classes (and torch, Lightning) load when something runs
        benchmark = load_benchmark(
            args.config,
            classes=not (args.command == "run" and args.list),
            overrides=getattr(args, "overrides", ()),
        )
    except ConfigError as error:
        print(f"error: {args.config}: {error}", file=sys.stderr)
        return 2
    if args.command in ("bench", "evaluate"):
        chosen = args.suite or [s.name for s in benchmark.suites]
        if machine_refuses([s for s in benchmark.suites if s.name in chosen]):
            return 2
    if args.command == "bench":
        if args.steps < 1:
            print("error: --steps: must be >= 1", file=sys.stderr)
            return 2
        if args.trl:
            return compare_with_trl(benchmark, args, argv)
        from harness.bench import run_bench, write_report

        board = run_bench(benchmark, args.steps, args.suite)
        print(board)
        if args.out:
            write_report(board, "python -m harness " + " ".join(argv if argv is not None else sys.argv[1:]), args.out)
            print(f"wrote {args.out}")
        return 0
    if args.command == "evaluate":
        return evaluate_checkpoints(benchmark, args)
    from harness.plan import RunFilter, plan

    only = RunFilter(args.suite, args.algorithm, args.seed, args.run)
    try:
        planned = plan(benchmark, only)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(r.id for r in planned))
        return 0
    if args.check:
        # what this machine cannot run, as warnings: the runs may be meant for another (--slurm)
        for suite in {id(r.suite): r.suite for r in planned}.values():
            where = f"suites[{benchmark.suites.index(suite)}]"
            try:
                notes = check_machine(suite, where)
            except ConfigError as error:
                notes = [f"{error} (on this machine; fine where the runs go elsewhere)"]
            for note in notes:
                print(f"warning: {args.config}: {note}", file=sys.stderr)
        if args.smoke:
            print("--smoke: not run, as --check runs nothing; drop --check to run it", file=sys.stderr)
        print(f"{args.config}: valid; runs selected: {len(planned)}")
        return 0
    if args.slurm:
        from harness.slurm import parse_params, submit

        try:
            params = parse_params(args.slurm_param)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        logs = args.slurm_logs or args.results / "slurm"
        jobs = submit(args.config, planned, args.results, args.cluster, params, logs, args.overrides)
        for run, job in jobs:
            print(f"{run.id}: job {job.job_id}")
        print(f"submitted {len(jobs)} jobs; their logs in {logs}, their runs in {args.results}")
        return 0
    elif args.slurm_param or args.slurm_logs:
        print("error: --slurm-param/--slurm-logs: only with --slurm", file=sys.stderr)
        return 2
    if machine_refuses(list({id(r.suite): r.suite for r in planned}.values())):
        return 2
    if args.no_estimate:
        benchmark = dataclasses.replace(benchmark, estimate=dataclasses.replace(benchmark.estimate, enabled=False))
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from harness.driver import run_benchmark
    from harness.provenance import OtherWeights
    from harness.records import Damaged
    from tasks.reward import RewardError

    with stopped_by_sigterm():
        try:
            if args.smoke:
                import tempfile

                from harness.plan import smoke

                scratch = Path(tempfile.mkdtemp(prefix="rlvr-smoke-"))
                run_benchmark(smoke(benchmark), scratch, only)
                print(f"smoke run finished: its runs and leaderboards are in {scratch} (they measure nothing)")
                return 0
            run_benchmark(benchmark, args.results, only)
        except (OtherWeights, Damaged, RewardError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except (SIGTERMException, Terminated):
            print("stopped by SIGTERM: every step checkpointed is kept; the same command resumes", file=sys.stderr)
            return TERMINATED
    return 0


TERMINATED = 128 + 15
"""The exit status of a run stopped by SIGTERM (a scheduler's preemption): not success."""


class Terminated(SystemExit):
    """SIGTERM outside a Lightning fit (which stops at the end of its step on its own)."""

    def __init__(self):
        super().__init__(TERMINATED)


def on_sigterm(signum, frame) -> None:
    import signal

    # Inside a fit Lightning's own handler is installed and calls this one after it has asked the
    # loop to stop after the step in flight: nothing to do here then.
    if signal.getsignal(signal.SIGTERM) is on_sigterm:
        raise Terminated()


class stopped_by_sigterm:
    """`with stopped_by_sigterm():` SIGTERM raises `Terminated` where no fit is running, so that
    locks are released, half-built files removed, and the process exits with TERMINATED."""

    def __enter__(self):
        import signal
        import threading

        self.before = None
        if threading.current_thread() is threading.main_thread():
            self.before = signal.signal(signal.SIGTERM, on_sigterm)
        return self

    def __exit__(self, *exc):
        import signal

        if self.before is not None:
            signal.signal(signal.SIGTERM, self.before)
        return False


def writable(folder: Path) -> bool:
    """Whether files can be written in `folder` and in the folders below it (a read-only mount
    says no even to root)."""
    return all(os.access(d, os.W_OK) for d in [folder, *(p for p in folder.iterdir() if p.is_dir())])


def evaluate_checkpoints(benchmark, args) -> int:
    changes = {}
    if args.samples is not None:
        changes["samples"] = args.samples
    if args.pass_at:
        changes["pass_at"] = args.pass_at
    if changes:
        from algorithms.base import EvalArgs

        for suite in benchmark.suites:
            try:
                EvalArgs(**{**vars(suite.settings["evaluation"]), **changes})
            except ValueError as error:
                print(f"error: --samples/--pass-at: {error}", file=sys.stderr)
                return 2
    from harness.evaluate import evaluate_benchmark

    try:
        board = evaluate_benchmark(benchmark, args.results, args.suite, args.model, changes)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if board.height:
        from harness.leaderboard import markdown

        print(markdown(board.drop("path")))
        for suite in sorted(set(board["suite"].to_list())):
            print(f"wrote {args.results / suite / 'evaluation' / 'leaderboard.md'}")
    return 0


def compare_with_trl(benchmark, args, argv) -> int:
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        print('error: --trl: TRL is not installed (pip install -e ".[bench]")', file=sys.stderr)
        return 2
    import polars as pl

    from harness.bench_trl import ComparisonError, check_suite, run_trl_comparison, show, write_trl_report

    names = args.suite
    if not names:  # every suite the comparison can run; the others are named and skipped
        names = []
        for suite in benchmark.suites:
            try:
                check_suite(suite)
                names.append(suite.name)
            except ComparisonError as error:
                print(f"skipped: {error}")
    if not names:
        print("error: --trl: no suite to compare (see above)", file=sys.stderr)
        return 2
    try:
        board = pl.concat([run_trl_comparison(benchmark, name, args.steps) for name in names])
    except ComparisonError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(show(board))
    if args.out:
        write_trl_report(board, "python -m harness " + " ".join(argv if argv is not None else sys.argv[1:]), args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
