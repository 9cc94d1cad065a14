"""`python -m harness report DIR`: one static page a results folder, DIR/index.html, that opens
from disk with no server and no network: the leaderboard as a sortable table (each column's
definition, from docs/results.md's column table, on hover; verdicts coloured), the suites' plots
inline, and the pair view: a step and a prompt picked, each run's rollouts of it side by side, every
generated token coloured by its advantage on one diverging scale, the task's first wrong step
outlined, a multi-turn rollout as one block a turn with the environment's answers between.

The page is report.html with the data embedded as JSON (`<script id="data">`, read back by
`embedded`); its JavaScript only draws. The rollouts are the runs' kept ones
(`harness.records.kept_completions`: at most STEPS_KEPT steps), their credit at float32, the
precision the runs computed it in."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import numpy as np
import polars as pl

from harness.leaderboard import DEFINITIONS, KEY_COLUMNS
from harness.records import kept_completions, suite_folders, write_atomic

TEMPLATE = Path(__file__).with_name("report.html")
PAGE = "index.html"
CREDIT = ("token_advantages", "token_weights")
ROLLOUT = ("run", "step", "rollout", "problem", "completion", "reward", "feedback", "judged", "tokens", *CREDIT)
ROLLOUT += ("token_spans", "error_step", "error_tokens")


def definitions(columns: list[str], doc: Path = DEFINITIONS) -> dict[str, str]:
    """Each of `columns` that docs/results.md's column table defines, with its definition as plain
    text (a row defines every column it names in backticks; `<stage>` and `@k` stand for any)."""
    text = doc.read_text() if doc.is_file() else ""
    table = text.split("| column | what it is |", 1)[-1].split("\n\n", 1)[0] if "| column |" in text else ""
    found: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        names, _, meaning = line.strip().strip("|").partition(" | ")
        meaning = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", meaning.strip()).replace("`", "")
        for name in re.findall(r"`([^`]+)`", names):
            pattern = re.escape(name).replace(re.escape("<stage>"), r"\w+").replace("@k", r"@\d+")
            found |= {c: meaning for c in columns if re.fullmatch(pattern, c) and c not in found}
    return found


def plain(value):
    """A value JSON can hold: NaN and infinities as null, lists element by element."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def float32(values: list[float] | None) -> list[float] | None:
    """Credit as the shortest decimal of its float32 value: the same number, a third of the text."""
    return None if values is None else [float(str(np.float32(v))) for v in values]


def suite_data(suite_dir: Path) -> dict:
    """One suite's part of the page: its plots (base64 PNG) and its kept rollouts, prompts apart."""
    kept = kept_completions(suite_dir)
    rows = [] if kept is None else kept.select([c for c in (*ROLLOUT, "prompt") if c in kept.columns]).to_dicts()
    prompts = {row["problem"]: row.pop("prompt", None) for row in rows}
    for row in rows:
        row |= {c: float32(row.get(c)) for c in CREDIT}
    largest = max((abs(a) for row in rows for a in row["token_advantages"]), default=0.0)
    return {
        "name": suite_dir.name,
        "plots": [
            {"name": p.stem, "png": base64.b64encode(p.read_bytes()).decode()} for p in sorted(suite_dir.glob("*.png"))
        ],
        "prompts": prompts,
        "rollouts": rows,
        "scale": largest or 1.0,
    }


def page_data(directory: Path) -> dict:
    """Everything the page shows of DIR: its leaderboard and each suite's plots and rollouts."""
    directory = Path(directory)
    board_file = directory / "leaderboard.parquet"
    if not board_file.is_file():
        raise FileNotFoundError(f"{board_file}: no such file (python -m harness leaderboard {directory} writes it)")
    board = pl.read_parquet(board_file)
    return {
        "title": directory.resolve().name,
        "key_columns": [c for c in KEY_COLUMNS if c in board.columns],
        "columns": board.columns,
        "definitions": definitions(board.columns),
        "board": [{k: plain(v) for k, v in row.items()} for row in board.to_dicts()],
        "suites": [suite_data(d) for d in suite_folders(directory)],
    }


def write(directory: Path) -> Path:
    """Write DIR/index.html; FileNotFoundError (one line) where DIR has no leaderboard."""
    data = json.dumps(page_data(directory), ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    html = TEMPLATE.read_text().replace("__DATA__", data, 1)
    path = Path(directory) / PAGE
    write_atomic(path, lambda tmp: tmp.write_text(html))
    return path


def embedded(page: Path) -> dict:
    """The data a page embeds, as the page's script reads it."""
    text = Path(page).read_text()
    start = text.index('<script type="application/json" id="data">') + len('<script type="application/json" id="data">')
    return json.loads(text[start : text.index("</script>", start)])
