"""A researcher's second day, from the README and docs alone, timed: their own data file and a
reward function of ten lines, the config checked, settings from the command line, a run, a logger
added to a finished run, the Python entry point, a run killed and resumed, its completions shown
and its kept policy evaluated. Each step is the command the docs print; the table says how long
each took and whether it did what the docs say.

    python maintenance/second_day.py [--out docs/second-day.md]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

REWARD = '''def reward(prompt, completion, answer, **row):
    """1 when the completion's last word is the answer."""
    words = completion.split()
    return float(bool(words) and words[-1] == str(answer))
'''

CONFIG = """cache_dir: cache
suites:
  - name: own
    task:
      class_path: tasks.reward.RewardTask
      init_args: {train_file: data.jsonl, reward: my_reward.reward, eval_size: 60, demonstration_field: solution}
    model:
      preset: tiny
      warm_start: {steps: 60, batch_size: 16}
    algorithms:
      grpo: {class_path: algorithms.grpo.GRPO, init_args: {group_size: 4}}
      hp_rlvr: {class_path: algorithms.hp_rlvr.HPRLVR, init_args: {segments: 2}}
    seeds: [0]
    schedule: {steps: 12, prompts_per_step: 8}
    sampling: {max_new_tokens: 6}
    evaluation: {every: 6}
    trainer: {keep_policy: true, checkpoint_every_s: 0}
"""


def step(name: str, command: list[str], folder: Path, expect, rows: list, kill_after: str | None = None) -> str:
    """Run one command in `folder`, timed; `expect(output)` says whether it did what the docs say.
    With `kill_after`, the process is killed with SIGKILL once that path exists."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if kill_after:
        while process.poll() is None and not (folder / kill_after).exists():
            time.sleep(0.2)
        time.sleep(0.5)
        process.send_signal(signal.SIGKILL)
    output, _ = process.communicate()
    seconds = time.perf_counter() - started
    ok = bool(expect(output, process.returncode))
    shown = ["python", *command[1:]] if command[0] == sys.executable else command
    rows.append((name, " ".join(shown), seconds, ok))
    print(f"{'ok ' if ok else 'NO '} {seconds:6.1f} s  {name}", flush=True)
    if not ok:
        print(output[-3000:])
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="second-day-"))
    (folder / "my_reward.py").write_text(REWARD)
    rows_of_data = [{"prompt": f"say {n}", "answer": n, "solution": f" {n}"} for n in range(300)]
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_of_data))
    (folder / "b.yaml").write_text(CONFIG)
    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    harness = [sys.executable, "-m", "harness"]
    rows: list = []
    python = (
        "import harness; board = harness.run('b.yaml', 'schedule.steps=24', results='runs', algorithm=['grpo']); "
        "print(board.select('suite', 'algorithm', 'acc_gain', 'acc_gain_p').rows())"
    )
    longer = ["run", "b.yaml", "--results", "runs", "schedule.steps=24", "--algorithm", "grpo"]
    steps = [  # (what, the command, what the docs say it does, a file whose writing gets it killed)
        ("the config checked", [*harness, "run", "b.yaml", "--check"], lambda o, rc: rc == 0, None),
        (
            "a typo named, with its fix",
            [*harness, "run", "b.yaml", "schedule.stepz=3", "--check"],
            lambda o, rc: rc == 2 and "did you mean 'steps'?" in o,
            None,
        ),
        (
            "the costs and power said first, then the runs",
            [*harness, "run", "b.yaml", "--results", "runs"],
            lambda o, rc: rc == 0 and "warm start to build first" in o and "held-out: 60 problems" in o,
            None,
        ),
        (
            "a logger added to finished runs: none runs again",
            [*harness, "run", "b.yaml", "--results", "runs", "trainer.loggers=[csv, mlflow]"],
            lambda o, rc: rc == 0 and o.count("skipped") == 2 and "sent to mlflow" in o,
            None,
        ),
        (
            "settings from the command line: a longer run, killed with SIGKILL after its first checkpoint",
            [*harness, *longer],
            lambda o, rc: rc != 0,
            "runs/own/grpo-seed0/checkpoints/last.ckpt",
        ),
        (
            "the same command resumes it",
            [*harness, *longer],
            lambda o, rc: rc == 0 and "resuming after step" in o,
            None,
        ),
        (
            "harness.run from Python: the leaderboard back",
            [sys.executable, "-c", python],
            lambda o, rc: rc == 0 and "('own', 'grpo'" in o,
            None,
        ),
        (
            "its completions shown",
            [*harness, "show", "runs/own/grpo-seed0", "--limit", "2"],
            lambda o, rc: rc == 0 and "reward" in o,
            None,
        ),
        (
            "its kept policy evaluated beside the start",
            [
                *harness,
                "evaluate",
                "b.yaml",
                "--results",
                "runs",
                "--model",
                "start",
                "--model",
                "runs/own/grpo-seed0/policy",
            ],
            lambda o, rc: rc == 0 and "grpo-seed0" in o and "evaluation/leaderboard.md" in o,
            None,
        ),
    ]
    for name, command, expect, kill_after in steps:
        step(name, command, folder, expect, rows, kill_after)
    table = "| step | command | seconds | as documented |\n|---|---|---|---|\n" + "".join(
        f"| {name} | `{command}` | {seconds:.1f} | {'yes' if ok else 'NO'} |\n" for name, command, seconds, ok in rows
    )
    print(table)
    print(f"the folder: {folder}")
    if args.out:
        args.out.write_text(f"`python maintenance/second_day.py` ({time.strftime('%Y-%m-%d')}):\n\n{table}")
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
