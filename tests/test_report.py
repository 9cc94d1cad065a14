"""The static page of a results folder (harness/report.py): its embedded data equals the records
(the leaderboard, each run's kept rollouts and their credit), its column definitions are
docs/results.md's, its sample of steps is small and shared by the pair's runs, and in a real
browser the pair view colours a known rollout's tokens by their advantage and outlines its error."""

import json
import math
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from test_e2e import suite

from harness.__main__ import main
from harness.leaderboard import DEFINITIONS, KEY_COLUMNS
from harness.records import STEPS_KEPT, kept_completions
from harness.report import definitions, embedded, write

ROOT = Path(__file__).resolve().parents[1]
INSTALL = "apt-get install -y chromium"


def test_every_published_column_is_defined_by_docs_results_column_table():
    results = ROOT / "results"  # the training leaderboards (an evaluation's has its own columns)
    boards = [*results.glob("*/leaderboard.parquet"), *results.glob("studies/**/leaderboard.parquet")]
    columns = sorted({c for board in boards for c in pl.read_parquet(board).columns})
    found = definitions(columns)
    assert set(KEY_COLUMNS) <= set(columns) and [c for c in columns if c not in found] == []
    row = next(line for line in DEFINITIONS.read_text().splitlines() if line.startswith("| `zero_grad_fraction` |"))
    assert found["zero_grad_fraction"] == row.split(" | ", 1)[1].rstrip(" |").replace("`", "")
    assert found["verify_share"] == found["credit_share"]  # `<stage>_share`: one row for every stage
    assert found["acc_gain_p"].startswith("the verdict's test of") and "](" not in found["acc_gain_p"]  # links as text


def test_a_suites_kept_rollouts_are_sampled_on_the_same_steps_for_every_run(tmp_path):
    for run, steps in (("grpo-seed0", range(1, 101)), ("ppo-seed0", range(1, 51))):
        (tmp_path / run).mkdir()
        (tmp_path / run / "run.json").write_text("{}")
        rows = [{"step": s, "rollout": r, "problem": f"p{s}"} for s in steps for r in range(2)]
        pl.DataFrame(rows).write_parquet(tmp_path / run / "completions.parquet")
    kept = kept_completions(tmp_path)
    steps = sorted(set(kept["step"]))
    assert len(steps) == STEPS_KEPT and steps[0] == 1 and steps[-1] == 50  # only steps both runs kept
    for run in ("grpo-seed0", "ppo-seed0"):
        assert kept.filter(pl.col("run") == run)["step"].to_list() == [s for s in steps for _ in range(2)]
    assert kept_completions(tmp_path, {"ppo-seed0"})["run"].unique().to_list() == ["ppo-seed0"]


def test_report_refuses_a_folder_without_a_leaderboard_in_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"error: directory: no such directory: {tmp_path / 'missing'}\n"
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'leaderboard.parquet'}: no such file") and err.count("\n") == 1


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A tiny pair suite of 12 steps, its leaderboard published with its kept rollouts."""
    root = tmp_path_factory.mktemp("report")
    spec = suite("pair", "test_e2e.ParityReward", steps=12, trainer={"completions": 3})
    spec["evaluation"] = {"every": 12}
    spec["algorithms"]["hp_rlvr"] = {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}}
    config = root / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(root / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(root / "runs")]) == 0
    assert main(["leaderboard", str(root / "runs"), "--publish", str(root / "out")]) == 0
    return root


@pytest.mark.slow
def test_the_pages_data_equals_the_runs_records(published):
    data = embedded(published / "out" / "index.html")
    board = pl.read_parquet(published / "out" / "leaderboard.parquet")
    assert data["board"] == json.loads(json.dumps(board.to_dicts()).replace("NaN", "null"))
    (pair,) = data["suites"]
    assert sorted(p["name"] for p in pair["plots"]) == sorted(
        p.stem for p in (published / "out" / "pair").glob("*.png")
    )
    steps = sorted({r["step"] for r in pair["rollouts"]})
    assert len(steps) == STEPS_KEPT and steps[0] == 1 and steps[-1] == 12
    for run in ("grpo-seed0", "hp_rlvr-seed0"):
        records = pl.read_parquet(published / "runs" / "pair" / run / "completions.parquet")
        records = records.filter(pl.col("step").is_in(steps)).to_dicts()
        shown = [r for r in pair["rollouts"] if r["run"] == run]
        assert len(shown) == len(records) == 3 * STEPS_KEPT
        for page, record in zip(shown, records):
            assert pair["prompts"][page["problem"]] == record["prompt"]
            for key in ("step", "rollout", "problem", "completion", "reward", "feedback", "tokens", "token_spans"):
                assert page[key] == record[key], key
            for key in ("token_advantages", "token_weights"):  # float32, the precision the run computed in
                assert (page[key] is None) == (record[key] is None)
                assert [float(np.float32(v)) for v in page[key] or []] == (record[key] or [])
            spans = record["token_spans"]  # each token's span is its own text in the completion
            assert "".join(record["completion"][s:e] for s, e in spans) == record["completion"]
    # the published folder keeps the same sample, and the page of the runs' folder shows the same rollouts
    assert main(["report", str(published / "runs")]) == 0
    assert embedded(published / "runs" / "index.html")["suites"][0]["rollouts"] == pair["rollouts"]
    kept = pl.read_parquet(published / "out" / "pair" / "completions.parquet")
    assert sorted(set(kept["step"])) == steps


def browser() -> str | None:
    return next(
        (path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))), None
    )


def headless(*args: str) -> str:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=3000"]
    done = subprocess.run([browser(), *flags, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def expected_colour(advantage: float, scale: float) -> str:
    """report.html's `colour`, written again: white at 0, blue (praise) or red (blame) at |A| = scale."""
    t = max(-1.0, min(1.0, advantage / scale))
    end = (33, 102, 172) if t >= 0 else (178, 24, 43)
    return "rgb(" + ", ".join(str(math.floor(255 + (c - 255) * abs(t) + 0.5)) for c in end) + ")"


class Tree(HTMLParser):
    """The dumped DOM's elements under a rollout's block: (tag, attributes, text, the classes of its ancestors)."""

    def __init__(self, block_id: str):
        super().__init__()
        self.block_id, self.stack, self.found = block_id, [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        inside = any(a.get("id") == self.block_id for _, a in self.stack) or attrs.get("id") == self.block_id
        self.stack.append((tag, attrs))
        if inside:
            self.found.append([tag, attrs, "", [a.get("class", "") for _, a in self.stack[:-1]]])

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if self.found and self.stack and self.found[-1][1] is self.stack[-1][1]:
            self.found[-1][2] += data


def folder_with_known_rollouts(root: Path) -> Path:
    """A published suite of two runs at step 4, prompt p1: a single-turn rollout whose second and
    third tokens are the first wrong step, and a multi-turn one whose second turn is."""
    root.mkdir()
    (root / "runs.json").write_text("{}")
    pl.DataFrame(
        {"suite": ["toy", "toy"], "algorithm": ["grpo", "hp_rlvr"], "vs_reference": [None, "lower (this seed)"]}
    ).write_parquet(root / "leaderboard.parquet")
    common = {"step": 4, "problem": "p1", "prompt": "Q: 2+3*4?", "judged": True, "token_weights": None}
    single = {
        **common, "run": "grpo-seed0", "rollout": 0, "completion": "3*4=13", "reward": 0.0, "feedback": "expected 14",
        "tokens": list("3*4=13"), "token_advantages": [-0.5, -1.0, 0.25, 0.0, 2.0, -2.0],
        "token_spans": [[i, i + 1] for i in range(6)], "error_step": "*4",
        "error_tokens": [False, True, True, False, False, False],
    }  # fmt: skip
    turns = "go to desk\nYou see a lamp.\ntake lamp\nNothing happens.\n"
    multi = {
        **common, "run": "hp_rlvr-seed0", "rollout": 0, "completion": turns, "reward": 0.0, "feedback": "failed",
        "tokens": ["go", " to", " desk", "take", " lamp"], "token_advantages": [0.1, 0.2, 0.3, -0.4, -0.8],
        "token_weights": [0.1, 0.2, 0.3, 0.4, 0.8], "token_spans": [[0, 10]] * 3 + [[27, 36]] * 2,
        "error_step": "take lamp", "error_tokens": [False, False, False, True, True],
    }  # fmt: skip
    pl.DataFrame([single, multi]).write_parquet(root / "completions.parquet")
    return root


@pytest.mark.slow
def test_a_browser_draws_the_pair_views_tokens_in_their_colours_with_the_error_outlined(tmp_path):
    if browser() is None:
        pytest.skip(f"no headless Chromium here: {INSTALL}")
    page = write(folder_with_known_rollouts(tmp_path / "toy"))
    url = page.resolve().as_uri() + "#suite=toy&step=4&problem=p1"
    dom = headless("--dump-dom", url)

    tree = Tree("grpo-seed0-4-0")
    tree.feed(dom)
    tokens = [(text, attrs, above) for tag, attrs, text, above in tree.found if "tok" in attrs.get("class", "").split()]
    assert [text for text, _, _ in tokens] == list("3*4=13")
    for (_, attrs, above), advantage, wrong in zip(
        tokens, [-0.5, -1.0, 0.25, 0.0, 2.0, -2.0], [False, True, True, False, False, False]
    ):
        assert re.search(r"background-color: (rgb\([^)]*\))", attrs["style"]).group(1) == expected_colour(
            advantage, 2.0
        )
        assert ("err" in above) == wrong  # the first wrong step, and only it, inside the outline

    tree = Tree("hp_rlvr-seed0-4-0")
    tree.feed(dom)
    blocks = [
        (attrs["class"], text)
        for tag, attrs, text, _ in tree.found
        if attrs.get("class") in ("turn", "turn err", "env")
    ]
    assert blocks == [("turn", ""), ("env", "You see a lamp."), ("turn err", ""), ("env", "Nothing happens.")]
    tokens = [(text, attrs) for tag, attrs, text, _ in tree.found if "tok" in attrs.get("class", "").split()]
    assert [text for text, _ in tokens] == ["go", " to", " desk", "take", " lamp"]
    assert expected_colour(-0.8, 2.0) in tokens[-1][1]["style"]

    verdicts = re.findall(r'<td class="([^"]*)">lower \(this seed\)</td>', dom)
    assert verdicts == ["text down"]

    shot = tmp_path / "pair.png"
    headless(f"--screenshot={shot}", "--window-size=1200,900", url)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_defaults_page_holds_the_published_records():
    data = embedded(ROOT / "results" / "index.html")
    board = pl.read_parquet(ROOT / "results" / "leaderboard.parquet")
    assert data["board"] == json.loads(json.dumps(board.to_dicts()).replace("NaN", "null"))
    for shown in data["suites"]:
        kept = pl.read_parquet(ROOT / "results" / shown["name"] / "completions.parquet").to_dicts()
        assert [(r["run"], r["step"], r["rollout"], r["completion"], r["tokens"]) for r in shown["rollouts"]] == [
            (r["run"], r["step"], r["rollout"], r["completion"], r["tokens"]) for r in kept
        ]
        assert [[float(np.float32(a)) for a in r["token_advantages"]] for r in shown["rollouts"]] == [
            r["token_advantages"] for r in kept
        ]


def test_alfworlds_kept_turns_are_its_commands_and_the_text_between_the_environments():
    kept = pl.read_parquet(ROOT / "results" / "alfworld" / "completions.parquet")
    for row in kept.iter_rows(named=True):
        turns: dict[tuple[int, int], str] = {}
        for token, (start, end) in zip(row["tokens"], row["token_spans"]):
            turns[(start, end)] = turns.get((start, end), "") + token
        assert len(turns) > 1 and all(row["completion"][s:e] == text for (s, e), text in turns.items())
        assert row["completion"].startswith(turns[min(turns)])  # the rollout opens with its first command
