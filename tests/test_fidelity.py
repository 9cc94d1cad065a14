"""Credit fidelity (issue #51, first part): where the math task says a completion goes wrong, and
the share of an algorithm's credit on it, against hand-worked cases."""

from __future__ import annotations

import pytest
import torch

from algorithms.fidelity import fidelity, token_spans
from algorithms.grpo import group_advantages
from harness.tiny import build_tokenizer
from tasks.base import ErrorSpans
from tasks.math import MathTask, wrong_steps


def texts(completion, spans):
    return [completion[a:b] for a, b in spans]


@pytest.mark.parametrize(
    "completion, wrong",
    [
        (" 28-29=0 0-6=-4 #### -4", ["28-29=0", "0-6=-4", "-4"]),  # the first step wrong, and all after it
        (" 3*9=27 14-27=-12 #### -12", ["14-27=-12", "-12"]),  # the last step wrong
        (" 11-16=-4 -4+6=1 #### 1", ["11-16=-4", "-4+6=1", "1"]),  # a wrong step, yet the answer right
        (" 3*9=27 14-27=-13 #### -13", None),  # every step right
        (" I do not know", None),  # nothing to check
        (" 5+5=11", ["5+5=11"]),  # no final answer
        (" 26*3+5=83 #### 83", None),  # a chained step, right as written (not the step 3+5=83)
        (" 26*3+5=84 5+1=6 #### 6", ["26*3+5=84", "5+1=6", "6"]),  # a chained step, wrong as written
    ],
)
def test_the_math_task_locates_the_first_wrong_step_and_what_follows(completion, wrong):
    spans = wrong_steps(completion)
    assert (texts(completion, spans) if spans else None) == wrong
    located = MathTask().error_spans(None, completion)
    assert located == (ErrorSpans(spans[0], spans) if wrong else None)


SPANS = [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]  # five tokens of two characters
ERROR = (4, 8)  # the first wrong step: the third and fourth tokens


def test_the_blame_on_a_failure_splits_before_on_and_after_the_error():
    """Blame 1, 1, 2, 2, 1 (7 in all): 4/7 on the error, 2/7 before, 1/7 after; the error holds
    2 of 5 tokens, so the lift is (4/7) / (2/5) = 10/7."""
    figures = fidelity([-1.0, -1.0, -2.0, -2.0, -1.0], SPANS, ERROR, succeeded=False)
    assert figures == pytest.approx(
        {"blame_on_error": 4 / 7, "blame_before": 2 / 7, "blame_after": 1 / 7, "blame_lift": 10 / 7}
    )
    # positive credit on a failure is no blame: only the negative part counts
    assert fidelity([3.0, -1.0, -1.0, 0.0, 0.0], SPANS, ERROR, False)["blame_on_error"] == pytest.approx(0.5)
    assert fidelity([1.0] * 5, SPANS, ERROR, False) == {}  # no blame at all


def test_praise_on_the_error_of_a_success_is_an_error_reinforced():
    figures = fidelity([0.5, 0.5, 2.0, 0.0, -1.0], SPANS, ERROR, succeeded=True)
    assert figures == pytest.approx({"reinforced_error": 2 / 3, "reinforced_lift": (2 / 3) / (2 / 5)})


def test_grpos_credit_is_the_same_on_every_token_so_its_lift_is_exactly_one():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    per_rollout = group_advantages(rewards, 1e-4).view(-1)
    for advantage, succeeded in zip(per_rollout.tolist(), [True, False, False, True]):
        figures = fidelity([advantage] * len(SPANS), SPANS, ERROR, succeeded)
        assert figures["reinforced_lift" if succeeded else "blame_lift"] == 1.0


def test_token_spans_cover_the_decoded_completion_in_order():
    tokenizer = build_tokenizer()
    completion = " 28-29=0 0-6=-4 #### -4"
    ids = tokenizer(completion, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    spans = token_spans(tokenizer, ids)
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    assert spans[0][0] == 0 and spans[-1] == (len(decoded), len(decoded))  # EOS adds nothing
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert "".join(decoded[a:b] for a, b in spans) == decoded


def test_a_steps_fidelity_reads_the_located_rollouts_with_their_own_tokens():
    """Three math rollouts through the step's own path (`step_fidelity`, as training records it):
    a failure with a wrong first step, a success holding a wrong step, one with every step right
    (nothing located). Under one advantage a rollout (GRPO's credit), both lifts are exactly 1;
    blame put on the wrong step's tokens alone is all on the error."""
    from algorithms.fidelity import step_fidelity
    from rollout.batch import Problem, Verdict, completed, left_padded

    tokenizer = build_tokenizer()
    texts = [" 28-29=0 0-6=-4 #### -4", " 11-16=-4 -4+6=1 #### 1", " 3*9=27 14-27=-13 #### -13"]
    problems = [Problem(str(k), "Q: x\nA:", "") for k in range(3)]
    prompt_ids, prompt_mask = left_padded([tokenizer("Q: x\nA:").input_ids] * 3, tokenizer.pad_token_id, "cpu")
    rows = [tokenizer(t, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, rows))
    completion = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    generated = torch.tensor([[k < len(r) for k in range(width)] for r in rows])
    rollouts = completed(problems, prompt_ids, prompt_mask, completion, generated, torch.zeros(3, width), tokenizer)
    rollouts.verdicts = [Verdict(0.0, ""), Verdict(1.0, ""), Verdict(1.0, "")]
    assert rollouts.completions == texts
    task = MathTask()
    uniform = torch.tensor([-1.0, 0.5, 0.5]).view(-1, 1) * rollouts.eligible
    stats = step_fidelity(task, rollouts, uniform, tokenizer)
    assert stats["credit/fidelity_rollouts"] == 2.0  # the third has no error to locate
    assert stats["credit/blame_lift"] == 1.0 and stats["credit/reinforced_lift"] == 1.0
    # blame on the first wrong step's tokens only ("28-29=0")
    spans = token_spans(tokenizer, rows[0])
    start, end = wrong_steps(texts[0])[0]
    on = torch.tensor([s < end and e > start for s, e in spans])
    focused = torch.zeros_like(uniform)
    focused[0, rollouts.eligible[0].nonzero().view(-1)[on]] = -1.0
    assert step_fidelity(task, rollouts, focused, tokenizer)["credit/blame_on_error"] == 1.0
    assert step_fidelity(task, rollouts, uniform, tokenizer, sample=1)["credit/fidelity_rollouts"] == 1.0

    # each rollout's error is located once a step, whoever reads it (fidelity, the kept completions)
    from algorithms.fidelity import locate

    calls = []

    class Counted(MathTask):
        def first_error(self, problem, completion):
            calls.append(completion)
            return super().first_error(problem, completion)

    counted, located = Counted(), {}
    assert step_fidelity(counted, rollouts, uniform, tokenizer, located=located) == stats
    locate(counted, rollouts, range(3), located)
    assert [located[row] for row in range(3)] == [wrong_steps(texts[0])[0], wrong_steps(texts[1])[0], None]
    assert calls == texts


def test_a_partial_score_is_read_as_a_failure():
    """A rollout scored 0.5 (some of a problem's tests passed) did not solve it: credit below zero
    on it is blame (under one advantage a rollout, a lift of exactly 1), not a success's
    missing praise."""
    import math

    from algorithms.fidelity import step_fidelity
    from rollout.batch import Problem, Verdict, completed, left_padded

    tokenizer = build_tokenizer()
    text = " 28-29=0 0-6=-4 #### -4"  # its first step wrong
    prompt_ids, prompt_mask = left_padded([tokenizer("Q: x\nA:").input_ids], tokenizer.pad_token_id, "cpu")
    row = tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    completion, generated = torch.tensor([row]), torch.ones(1, len(row), dtype=torch.bool)
    rollouts = completed(
        [Problem("0", "Q: x\nA:", "")],
        prompt_ids,
        prompt_mask,
        completion,
        generated,
        torch.zeros(1, len(row)),
        tokenizer,
    )
    rollouts.verdicts = [Verdict(0.5, "")]
    stats = step_fidelity(MathTask(), rollouts, -1.0 * rollouts.eligible, tokenizer)
    assert stats["credit/fidelity_rollouts"] == 1.0
    assert stats["credit/blame_lift"] == 1.0 and math.isnan(stats["credit/reinforced_lift"])
