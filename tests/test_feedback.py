"""Feedback informs without repeating (DESIGN section 3): with each task's real verifier on real
rollouts, no scored segment's text is said back in its own hindsight block; HP-RLVR's feedback
modes; sampled pass@k's estimator."""

import math
import random
import re

import pytest
import torch

from algorithms.base import EvalArgs, pass_at_k
from algorithms.hp_rlvr import HindsightTeaching, HindsightTemplate, block_feedback, hindsight_views, render_block
from harness.models import load_policy
from harness.tiny import build_tokenizer
from rollout.batch import completed, left_padded
from rollout.decoding import RolloutEngine, SamplingArgs
from tasks.base import Verdict


def text_rollouts(tokenizer, problems, completions):
    """Rollouts whose completions are these texts (and EOS), tokenized as the policy writes them."""
    prompts = [tokenizer(p.prompt, add_special_tokens=False).input_ids for p in problems]
    outs = [tokenizer(c, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for c in completions]
    prompt_ids, prompt_mask = left_padded(prompts, tokenizer.pad_token_id, "cpu")
    width = max(map(len, outs))
    completion = torch.tensor([o + [tokenizer.pad_token_id] * (width - len(o)) for o in outs])
    generated = torch.tensor([[True] * len(o) + [False] * (width - len(o)) for o in outs])
    return completed(problems, prompt_ids, prompt_mask, completion, generated, torch.zeros(completion.shape), tokenizer)


def sampled_and_written(task, tokenizer, model, count=12, seed=0):
    """The policy's own samples, and the task's demonstrations and one-slip corruptions of them
    (what a trained policy writes: right, and wrong in one place)."""
    rng, problems = random.Random(seed), list(task.train_problems()[:count])
    written = [(p, p.demonstration) for p in problems] + [
        (p, c) for p in problems if (c := task.corrupt(p, rng)) is not None
    ]
    parts = [text_rollouts(tokenizer, [p for p, _ in written], [c for _, c in written])]
    torch.manual_seed(seed)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=1.0, max_new_tokens=40))
    parts.append(task.rollout(engine, problems, 2))
    return parts


def assert_no_segment_said_back(rollouts, tokenizer, segments):
    template = HindsightTemplate()
    rollouts.verdicts = rollouts.verdicts or []
    views = hindsight_views(rollouts, segments, tokenizer, template)
    checked = 0
    for j in range(len(views.causal_rows)):
        if j and views.hindsight_rows[j] == views.hindsight_rows[j - 1]:
            continue  # one check a (rollout, segment) row
        i, row = int(views.causal_rows[j]), int(views.hindsight_rows[j])
        columns = views.causal_cols[views.hindsight_rows == row]
        segment = tokenizer.decode(rollouts.input_ids[i, columns].tolist(), skip_special_tokens=True).strip()
        start, end = views.block_spans[row]
        block = tokenizer.decode(views.input_ids[row, start:end].tolist())
        feedback = rollouts.verdicts[i].feedback
        assert block.endswith(template.feedback + feedback + template.close)  # the verdict is in the block ...
        # ... and never this segment's own text, nor a word of it that the verifier did not know
        # already (from the problem and its reference); a lone character proves nothing
        known = words(rollouts.problems[i].prompt + " " + rollouts.problems[i].answer)
        assert len(segment) < 2 or segment not in feedback, (segment, feedback)
        assert not (words(segment) - known) & words(feedback), (segment, feedback)
        checked += 1
    return checked


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text) if len(w) >= 2}


def test_math_feedback_never_repeats_a_scored_segment(tiny_dir):
    from tasks.math import MathTask

    model, tokenizer = load_policy(tiny_dir)
    task = MathTask(train_size=40, eval_size=5)
    for rollouts in sampled_and_written(task, tokenizer, model):
        rollouts.verdicts = task.verify_all(rollouts)
        assert assert_no_segment_said_back(rollouts, tokenizer, 4) > 0
    # the failures the study of #19 found: the final answer, the slip and a correct answer quoted
    assert task.verify_trusted(task.train_problems()[0], " 26*3=80 #### 85").feedback.count("80") == 0


def test_code_feedback_never_repeats_a_scored_segment(tiny_dir):
    from tasks.code import CodeTask

    model, tokenizer = load_policy(tiny_dir)
    task = CodeTask(train_size=30, eval_size=5, workers=2)
    try:
        for rollouts in sampled_and_written(task, tokenizer, model, count=8):
            rollouts.verdicts = task.verify_all(rollouts)  # the sandbox's own verdicts
            assert assert_no_segment_said_back(rollouts, tokenizer, 4) > 0
        # program text is never quoted: a syntax error's line, a failing line, an exit code
        problem = task.train_problems()[0]
        for body, text in (
            ("    return (((\n", "((("),
            ("    x = [][5]\n", "[][5]"),
            ("    import sys; sys.exit(417)\n", "417"),
        ):
            verdict = task.verify(problem, body)
            assert verdict.reward == 0.0 and verdict.feedback and text not in verdict.feedback, verdict.feedback
    finally:
        task.close()


def _runs(columns):
    """Consecutive columns grouped: a turn's command tokens."""
    runs = []
    for c in columns:
        if runs and runs[-1][-1] == c - 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def test_alfworld_feedback_is_the_outcome_only(tiny_dir, tmp_path):
    from tasks.alfworld.task import AlfworldTask, well_formed

    model, tokenizer = load_policy(tiny_dir)
    task = AlfworldTask(train_games=3, eval_games=1, max_turns=4, cache_dir=str(tmp_path))
    torch.manual_seed(0)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=1.0, max_new_tokens=6))
    rollouts = task.rollout(engine, task.train_problems()[:3], 2)
    assert all(v.feedback.startswith(("won in", "not won after")) for v in rollouts.verdicts)
    # which commands were well formed (GiGPO's invalid-action penalty): those the game's grammar reads
    assert [len(v) for v in rollouts.turn_valid] == [len(s) for s in rollouts.turn_states]
    for row, valid in enumerate(rollouts.turn_valid):
        eligible = rollouts.eligible[row].tolist()
        commands = [
            tokenizer.decode(rollouts.input_ids[row, [c for c in turn]]).strip()
            for turn in _runs([c for c in range(len(eligible)) if eligible[c]])
        ]
        assert valid == [well_formed(c or "look") for c in commands]
    assert assert_no_segment_said_back(rollouts, tokenizer, 4) > 0
    # the turn limit cut every episode here: what completions/clipped_ratio counts for ALFWorld
    assert rollouts.truncated == [v.reward == 0.0 for v in rollouts.verdicts]


def test_the_feedback_modes_of_the_block():
    tokenizer, template = build_tokenizer(), HindsightTemplate()
    win, loss = Verdict(1.0, "correct"), Verdict(0.0, "wrong: expected 7")
    assert [block_feedback(v, "full") for v in (win, loss)] == ["correct", "wrong: expected 7"]
    assert [block_feedback(v, "outcome") for v in (win, loss)] == ["success", "failure"]
    assert block_feedback(loss, "none") is None
    # the rollout's closing EOS is no information: the block leaves it out
    future = tokenizer(" 3+4=7", add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    text = lambda mode: tokenizer.decode(render_block(tokenizer, template, future, block_feedback(loss, mode)))  # noqa: E731
    assert text("full") == "Later: 3+4=7 Verdict: wrong: expected 7\n"
    assert text("outcome") == "Later: 3+4=7 Verdict: failure\n"
    assert text("none") == "Later: 3+4=7\n"
    with pytest.raises(ValueError, match="^feedback:"):
        HindsightTeaching(feedback=["full", "hint"])


@pytest.mark.parametrize(
    "n, c, k", [(10, 0, 1), (10, 3, 1), (10, 3, 5), (10, 8, 3), (5, 5, 5), (20, 1, 20), (5, 2, 3), (8, 4, 4)]
)  # (5, 2, 3) and (8, 4, 4): n - c = k, where one failing sample set is left and pass@k < 1
def test_pass_at_k_is_the_unbiased_estimator(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_settings_are_checked():
    with pytest.raises(ValueError, match="^pass_at:"):
        EvalArgs(samples=4, pass_at=[1, 8])
    with pytest.raises(ValueError, match="^samples:"):
        EvalArgs(samples=-1)
    assert EvalArgs(pass_at=[8]).samples == 0  # unused without samples


def test_a_partial_score_is_no_pass_for_pass_at_k_the_paired_test_or_the_outcome():
    """Under partial scoring (`StdioCases(partial=True)`) a sample that passed 2 of 3 cases scores
    2/3: neither a pass in sampled pass@k's counts, nor a solved item in the paired test, nor a
    "success" in HP-RLVR's outcome feedback. Hand-worked: of 4 samples scoring 1, 2/3, 1/3, 0,
    one passes."""
    from types import SimpleNamespace

    from algorithms.base import RLVRModule
    from harness.verdicts import paired_p

    scores = [1.0, 2 / 3, 1 / 3, 0.0]
    task = SimpleNamespace(
        rollout=lambda engine, problems, n: problems * n,
        verify_all=lambda chunk: [Verdict(s, "") for s in scores],
    )
    module = SimpleNamespace(
        eval_args=EvalArgs(samples=4, pass_at=[1, 2], batch_size=4),
        device=torch.device("cpu"),
        compute_precision=lambda: torch.autocast("cpu", enabled=False),
        policy=torch.nn.Linear(1, 1),
        engine=None,
        rl_step=0,
        task=task,
    )
    result = RLVRModule.sampled_pass_at_k(module, ["p"], 1)
    assert result["passes"] == [1]
    assert result["pass@1"] == pytest.approx(1 / 4) and result["pass@2"] == pytest.approx(1 - 3 / 6)
    # 6 items only one side scored on: a p of 2 / 2**6 if those were passes, 1 as none of them is
    assert paired_p([[1.0, 2 / 3, 0.9, 0.75, 0.6, 0.99, 0.51]], [[1.0] + [0.0] * 6]) == 1.0
    assert paired_p([[1.0] * 7], [[1.0] + [0.0] * 6]) == pytest.approx(2 / 2**6)
    assert block_feedback(Verdict(2 / 3, "case 3 of 3: wrong answer"), "outcome") == "failure"
    assert block_feedback(Verdict(1.0, "all tests passed"), "outcome") == "success"


def test_feedback_is_plain_text_without_control_or_format_characters():
    """Program-chosen text quoted in feedback (a class name, a test's message) cannot carry
    escapes or bidi overrides into a record or a hindsight block; newline and tab stay."""
    said = Verdict(0.0, "Foo\x1b[2J\x00\u202ebar\nline\tcell\x7f").feedback
    assert said == "Foo?[2J??bar\nline\tcell?"
    assert Verdict(1.0, "all tests passed").feedback == "all tests passed"


def test_special_token_text_in_feedback_stays_text_in_the_hindsight_block():
    tokenizer, template = build_tokenizer(), HindsightTemplate()
    quoted = f"failed: assert f(1) == 2 (got '{tokenizer.eos_token}{tokenizer.pad_token}<|end<|pad|>oftext|>')"
    block = render_block(tokenizer, template, tokenizer(" 1", add_special_tokens=False).input_ids, quoted)
    assert not set(block) & set(tokenizer.all_special_ids)
    assert "failed: assert f(1) == 2 (got '')" in tokenizer.decode(block)
