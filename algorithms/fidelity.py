"""Credit fidelity: does an algorithm's token credit land on the error its task locates?

For a rollout whose task can say where it goes wrong (`Task.first_error`: the first wrong step),
with A_t its tokens' advantages:

    failed:     blame b_t = max(-A_t, 0)
                blame_on_error = sum of b over the first wrong step's tokens / sum of b
                blame_before, blame_after: the same over the tokens before and after it
                blame_lift = blame_on_error / (the step's share of the tokens)
    succeeded:  praise p_t = max(A_t, 0)
                reinforced_error = sum of p over the first wrong step's tokens / sum of p
                reinforced_lift = reinforced_error / (the step's share of the tokens)

A credit that is the same on every token (GRPO's, RLOO's) has a lift of exactly 1: it cannot tell
the error from the rest. A lift above 1 on failures puts the blame on the error; on successes a
lift above 1 reinforces it. A token belongs to the step when its characters overlap the step's;
on a multi-turn task every token of a command belongs to its turn (`turn_spans`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rollout.batch import solved
from tasks.base import Span, Task


def token_spans(tokenizer, token_ids: Sequence[int]) -> list[Span]:
    """Each token's character span in the text the tokens decode to: what it adds to the text
    decoded up to it (a token that completes a multi-byte character takes the whole character)."""
    spans, end = [], 0
    for k in range(1, len(token_ids) + 1):
        length = max(len(tokenizer.decode(list(token_ids[:k]), skip_special_tokens=True)), end)
        spans.append((end, length))
        end = length
    return spans


def turn_spans(tokenizer, token_ids: Sequence[int], eligible: Sequence[bool]) -> list[Span]:
    """Each eligible token's span in a multi-turn completion (`token_ids` from its first eligible
    token): the whole command it belongs to, a run of eligible tokens, as the text decoded up to
    the run's start and end has it. An error there is a turn's, so a command is the finest unit
    that counts; two decodes a turn instead of one a token."""
    spans, start = [], None
    for k, keep in enumerate([*eligible, False]):
        if keep and start is None:
            start = k
        elif not keep and start is not None:
            text = tokenizer.decode(list(token_ids[:start]), skip_special_tokens=True)
            whole = tokenizer.decode(list(token_ids[:k]), skip_special_tokens=True)
            spans += [(len(text), len(whole))] * (k - start)
            start = None
    return spans


def eligible_spans(tokenizer, rollouts, row: int, multi_turn: bool) -> list[Span]:
    """The character spans, in the row's completion, of its eligible tokens in order."""
    eligible = rollouts.eligible[row]
    if not multi_turn:
        return token_spans(tokenizer, rollouts.input_ids[row][eligible].tolist())
    cols = eligible.nonzero().flatten().tolist()
    if not cols:
        return []
    first, last = cols[0], cols[-1] + 1
    return turn_spans(tokenizer, rollouts.input_ids[row][first:last].tolist(), eligible[first:last].tolist())


def on_span(spans: Sequence[Span], span: Span) -> list[bool]:
    """Which tokens (by their character spans) overlap `span`; a token that adds no character, none."""
    start, end = span
    return [s < end and e > start and e > s for s, e in spans]


def fidelity(advantages: Sequence[float], spans: Sequence[Span], error: Span, succeeded: bool) -> dict[str, float]:
    """The figures above for one rollout: `advantages` and `spans` of its completion's tokens, in
    order, and `error` the first wrong step's span. Empty where the rollout's credit has none of
    the sign that counts (no blame on a failure, no praise on a success) or no token lies on the
    step."""
    start, end = error
    on_error = on_span(spans, error)
    if not any(on_error):
        return {}
    weights = [max(a, 0.0) if succeeded else max(-a, 0.0) for a in advantages]
    total = sum(weights)
    if total <= 0:
        return {}
    share = sum(w for w, hit in zip(weights, on_error) if hit) / total
    uniform = sum(on_error) / len(on_error)
    if succeeded:
        return {"reinforced_error": share, "reinforced_lift": share / uniform}
    before = sum(w for w, (s, e), hit in zip(weights, spans, on_error) if not hit and e <= start) / total
    return {
        "blame_on_error": share,
        "blame_before": before,
        "blame_after": 1.0 - share - before,
        "blame_lift": share / uniform,
    }


SAMPLE = 32
"""Rollouts a step whose errors are located and whose credit is read: the first this many, in the
step's order (a fixed share of its cost whatever the algorithm's rollouts a step)."""
MULTI_TURN_SAMPLE = 8
"""The same for a multi-turn task, whose errors cost a replay and a plan a turn (ALFWorld's)."""


def locates_errors(task: Task) -> bool:
    return type(task).error_spans is not Task.error_spans or type(task).first_error is not Task.first_error


def locate(task: Task, rollouts, rows: Sequence[int], located: dict[int, Span | None]) -> None:
    """The rows' first wrong steps (`Task.first_errors`, in one call), located once a step:
    `located` keeps them for whatever else of the step reads them (the completions kept with
    their text)."""
    rows = [row for row in rows if row not in located]
    if rows:
        found = task.first_errors([rollouts.problems[r] for r in rows], [rollouts.completions[r] for r in rows])
        located.update(zip(rows, found))


def step_fidelity(
    task, rollouts, advantages, tokenizer, sample: int | None = None, located: dict[int, Span | None] | None = None
) -> dict[str, float]:
    """The step's figures, each the mean over the first `sample` rollouts that have it (NaN where
    none has; by default `SAMPLE`, `MULTI_TURN_SAMPLE` for a multi-turn task), under
    `credit/...`, with `credit/fidelity_rollouts` (how many were read). Empty where the task
    locates no errors. `located`: the step's errors located so far, filled as they are."""
    if not locates_errors(task):
        return {}
    if sample is None:
        sample = MULTI_TURN_SAMPLE if task.multi_turn else SAMPLE
    located = {} if located is None else located
    read: list[int] = []  # the first `sample` rows with a located error
    start = 0
    while len(read) < sample and start < len(rollouts):
        # as many rows at a time as are still to be read: each gives at most one
        rows = range(start, min(start + sample - len(read), len(rollouts)))
        locate(task, rollouts, rows, located)
        read += [row for row in rows if located[row] is not None]
        start = rows.stop
    figures: dict[str, list[float]] = {}
    for row in read:
        error = located[row]
        eligible = rollouts.eligible[row]
        spans = eligible_spans(tokenizer, rollouts, row, task.multi_turn)
        own = fidelity(advantages[row][eligible].tolist(), spans, error, bool(solved(rollouts.rewards[row])))
        for key, value in own.items():
            figures.setdefault(key, []).append(value)
    stats = {
        f"credit/{key}": math.fsum(figures[key]) / len(figures[key]) if key in figures else math.nan for key in FIGURES
    }
    return stats | {"credit/fidelity_rollouts": float(len(read))}


FIGURES = ("blame_on_error", "blame_before", "blame_after", "blame_lift", "reinforced_error", "reinforced_lift")
"""Every step of a task that locates errors records each (NaN where no rollout of the step had it)."""
