"""HP-RLVR: the hindsight view's alignment, the baseline, the credit's bound (DESIGN section 3)."""

import math
import random

import pytest
import torch

from algorithms.hp_rlvr import (
    HPRLVR,
    BaselineArgs,
    HindsightTemplate,
    HistoricalBaseline,
    gini,
    hindsight_views,
    next_token_hidden,
    render_block,
    segment_bounds,
)
from harness.models import load_policy
from rollout.decoding import RolloutEngine, SamplingArgs
from rollout.scoring import sequence_logprobs
from tasks.base import Verdict
from tasks.math import MathTask


@pytest.fixture(scope="module")
def policy(tiny_dir):
    torch.manual_seed(0)
    return load_policy(tiny_dir)


def sampled(policy, n=6, max_new_tokens=14):
    model, tokenizer = policy
    task = MathTask(train_size=50, eval_size=5)
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=max_new_tokens)).generate(
        task.train_problems()[:n]
    )
    rollouts.verdicts = [Verdict(float(i % 2), f"feedback {i}") for i in range(n)]
    return rollouts


def test_segment_bounds_cover_contiguously():
    assert segment_bounds(5, 10, 4) == [(5, 8), (8, 11), (11, 13), (13, 15)]
    assert segment_bounds(0, 2, 4) == [(0, 1), (1, 2)]  # never an empty segment


def test_scored_tokens_are_the_rollouts_own_aligned_and_absent_from_their_block(policy):
    model, tokenizer = policy
    rollouts = sampled(policy)
    template = HindsightTemplate()
    views = hindsight_views(rollouts, 3, tokenizer, template)
    # every eligible token scored exactly once, none other
    scored = torch.zeros_like(rollouts.eligible)
    scored[views.causal_rows, views.causal_cols] = True
    assert torch.equal(scored, rollouts.eligible) and len(views.causal_rows) == int(rollouts.eligible.sum())
    # the same token ids, no re-tokenisation
    assert torch.equal(
        views.input_ids[views.hindsight_rows, views.hindsight_cols],
        rollouts.input_ids[views.causal_rows, views.causal_cols],
    )
    for j in range(len(views.causal_rows)):
        i, t = int(views.causal_rows[j]), int(views.causal_cols[j])
        row, col = int(views.hindsight_rows[j]), int(views.hindsight_cols[j])
        start, end = views.block_spans[row]
        assert col >= end  # the scored token lies after the block ...
        # ... and what precedes it after the block is the prompt then y_<t, position by position
        real = rollouts.attention_mask[i].bool().clone()
        real[t:] = False
        assert views.input_ids[row, end:col].tolist() == rollouts.input_ids[i][real].tolist()
        # the block is exactly the template around the tokens after this token's segment
        segment = int(views.segment_of[j])
        eligible = rollouts.eligible[i].nonzero().flatten().tolist()
        _, seg_end = segment_bounds(eligible[0], len(eligible), 3)[segment]
        future = rollouts.input_ids[i, seg_end : eligible[-1] + 1].tolist()
        assert views.input_ids[row, start:end].tolist() == render_block(
            tokenizer, template, future, rollouts.verdicts[i].feedback
        )
        assert seg_end > t  # the token's own segment is never in its block


def test_long_future_is_truncated_in_the_block_never_in_the_scored_tokens(policy):
    model, tokenizer = policy
    rollouts = sampled(policy, max_new_tokens=30)
    template = HindsightTemplate(max_future_tokens=3)
    views = hindsight_views(rollouts, 4, tokenizer, template)
    marker = tokenizer(template.truncated, add_special_tokens=False).input_ids
    blocks = [views.input_ids[r, a:b].tolist() for r, (a, b) in enumerate(views.block_spans)]
    longest_possible = len(render_block(tokenizer, template, [0] * 3, "feedback 0")) + len(marker)
    assert all(len(block) <= longest_possible for block in blocks)
    assert any(block[len(tokenizer(template.open).input_ids) + 3 :][: len(marker)] == marker for block in blocks)
    assert len(views.causal_rows) == int(rollouts.eligible.sum())


def test_baseline_uses_only_earlier_steps_and_shrinks_to_the_task_mean():
    args = BaselineArgs(discount=0.5, prior_strength=2.0, mean_momentum=0.8, initial_mean=0.3)
    tracker = HistoricalBaseline(args)
    assert tracker(["a", "b"]).tolist() == pytest.approx([0.3, 0.3])  # nothing seen: the fallback
    tracker.update(["a", "b"], torch.tensor([1.0, 0.25]))
    m = 0.625  # bias-corrected: after one step, exactly that step's mean
    assert tracker.task_mean == pytest.approx(m)
    assert tracker(["a"]).item() == pytest.approx((1.0 + 2 * m) / (1.0 + 2))
    assert tracker(["new"]).item() == pytest.approx(m)
    tracker.update(["a"], torch.tensor([0.0]))
    alpha, beta = 0.5 * 1.0 + 0.0, 0.5 * 0.0 + 1.0
    m = (0.8 * 0.2 * 0.625 + 0.2 * 0.0) / (1 - 0.8**2)  # the EMA of the step means, corrected
    assert tracker.task_mean == pytest.approx(m)
    assert tracker(["a"]).item() == pytest.approx((alpha + 2 * m) / (alpha + beta + 2))
    clone = HistoricalBaseline(args)
    clone.load_state_dict(tracker.state_dict())
    assert clone(["a", "b", "c"]).tolist() == tracker(["a", "b", "c"]).tolist()


def make_module(policy, **kwargs):
    model, tokenizer = policy
    return HPRLVR(policy=model, tokenizer=tokenizer, task=MathTask(train_size=50, eval_size=5), **kwargs)


def test_current_reward_never_enters_its_own_baseline(policy):
    rollouts = sampled(policy, n=4)
    seen = []
    for rewards in ([1.0] * 4, [0.0] * 4):
        module = make_module(policy, weighting="uniform")
        rollouts.verdicts = [Verdict(r, "") for r in rewards]
        advantages, stats = module.credit(rollouts)
        seen.append(stats["credit/baseline_mean"])
    assert seen[0] == seen[1] == BaselineArgs().initial_mean


def test_credit_is_bounded_zero_off_eligible_and_signed_by_the_outcome(policy):
    module = make_module(policy, segments=3)
    rollouts = sampled(policy, n=6)
    # a task mean of 0.5 from an earlier step, before this step's credit: b = 0.5 for these prompts
    module.baseline.update(["elsewhere"], torch.tensor([0.5]))
    assert module.baseline([p.id for p in rollouts.problems]).tolist() == [0.5] * 6
    weights, _ = module.hindsight_weights(rollouts)
    advantages, stats = module.credit(rollouts)
    assert advantages.abs().max() <= 1.0
    assert (advantages[~rollouts.eligible] == 0).all()
    # A_t = w_t (r - 0.5): +w/2 on every token of a success, -w/2 on every token of a failure
    sign = torch.where(rollouts.rewards > 0.5, 0.5, -0.5)[:, None]
    torch.testing.assert_close(advantages, weights * sign)
    success, eligible = (rollouts.rewards > 0.5)[:, None], rollouts.eligible
    assert advantages[success & eligible].sum() > 0 and advantages[~success & eligible].sum() < 0
    for key in ("hindsight/w_mean_success", "hindsight/w_mean_failure", "hindsight/top1_agree", "hindsight/w_gini"):
        assert key in stats


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_weights_are_the_jsd_of_the_two_views(policy, temperature):
    """Recompute one token's weight by hand: two full forward passes, both views at the sampling
    temperature, and the JSD written out over the vocabulary."""
    model, tokenizer = policy
    module = make_module(policy, segments=2, sampling=SamplingArgs(temperature=temperature))
    rollouts = sampled(policy, n=2)
    weights, _ = module.hindsight_weights(rollouts)
    views = hindsight_views(rollouts, 2, tokenizer, module.template)
    j = len(views.causal_rows) - 1
    i, t = int(views.causal_rows[j]), int(views.causal_cols[j])
    row, col = int(views.hindsight_rows[j]), int(views.hindsight_cols[j])
    with torch.no_grad():
        keep = rollouts.attention_mask[i].bool()
        causal_ids = rollouts.input_ids[i][keep][None]
        p = model(input_ids=causal_ids).logits[0, int(keep[:t].sum()) - 1]
        hkeep = views.attention_mask[row].bool()
        q = model(input_ids=views.input_ids[row][hkeep][None]).logits[0, int(hkeep[:col].sum()) - 1]
    P, Q = torch.softmax(p.double() / temperature, -1), torch.softmax(q.double() / temperature, -1)
    M = (P + Q) / 2
    jsd = 0.5 * (P * (P / M).log()).sum() + 0.5 * (Q * (Q / M).log()).sum()
    assert weights[i, t].item() == pytest.approx(jsd.item() / math.log(2), abs=1e-5)


@pytest.mark.parametrize("feedback", ["full", "outcome", "none"])
def test_the_feedback_mode_is_what_the_weights_hindsight_view_is_told(tiny_dir, feedback):
    """HP-RLVR's `feedback` (the ablation of what the block holds) reaches the views its weights
    come from: every token's weight is the JSD, written out over the vocabulary, of its causal
    view and its hindsight view built with that mode, whose block says what the mode says."""
    from tests.test_engine import peaked

    model, tokenizer = load_policy(tiny_dir)
    peaked(model)  # predictions that depend on the block (a fresh init is nearly uniform)
    rollouts = sampled((model, tokenizer), n=2)
    module = make_module((model, tokenizer), segments=2, feedback=feedback)
    weights, _ = module.hindsight_weights(rollouts)
    views = hindsight_views(rollouts, 2, tokenizer, module.template, feedback)
    said = {"full": ["feedback 0", "feedback 1"], "outcome": ["failure", "success"], "none": [None, None]}[feedback]
    by_hand = torch.zeros_like(weights)
    for j in range(len(views.causal_rows)):
        i, t = int(views.causal_rows[j]), int(views.causal_cols[j])
        row, col = int(views.hindsight_rows[j]), int(views.hindsight_cols[j])
        hkeep = views.attention_mask[row].bool()
        block = tokenizer.decode(views.input_ids[row][hkeep])
        assert (said[i] in block) if said[i] else ("Verdict" not in block and "feedback" not in block), block
        keep = rollouts.attention_mask[i].bool()
        with torch.no_grad():
            p = model(input_ids=rollouts.input_ids[i][keep][None]).logits[0, int(keep[:t].sum()) - 1]
            q = model(input_ids=views.input_ids[row][hkeep][None]).logits[0, int(hkeep[:col].sum()) - 1]
        P, Q = torch.softmax(p.double(), -1), torch.softmax(q.double(), -1)
        M = (P + Q) / 2
        by_hand[i, t] = float(0.5 * (P * (P / M).log()).sum() + 0.5 * (Q * (Q / M).log()).sum()) / math.log(2)
    torch.testing.assert_close(weights, by_hand, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("max_tokens", [1, 40, 100_000])
def test_scoring_in_passes_of_similar_length_gives_each_rows_own_hidden_states(policy, max_tokens):
    """Rows padded on both sides (prompts on the left, completions on the right) and hindsight
    rows, split into passes as small as one row or run in one: every scored token gets the hidden
    state of its own row run alone, whatever pass it landed in."""
    model, tokenizer = policy
    rollouts = sampled(policy, n=6)
    views = hindsight_views(rollouts, 3, tokenizer, HindsightTemplate())
    for ids, mask, rows, cols in (
        (rollouts.input_ids, rollouts.attention_mask, views.causal_rows, views.causal_cols),
        (views.input_ids, views.attention_mask, views.hindsight_rows, views.hindsight_cols),
    ):
        got = next_token_hidden(model, ids, mask, rows, cols, max_tokens)
        for j in range(0, len(rows), 5):
            keep = mask[rows[j]].bool()
            with torch.no_grad():
                alone = model.base_model(input_ids=ids[rows[j]][keep][None]).last_hidden_state[0]
            torch.testing.assert_close(got[j], alone[int(keep[: cols[j]].sum()) - 1], atol=1e-5, rtol=1e-4)


def test_uniform_and_mean_rescaled_ablations(policy):
    rollouts = sampled(policy, n=4)
    # A 0.5 first-step baseline, so that both outcomes carry credit.
    uniform, _ = make_module(policy, weighting="uniform", baseline={"initial_mean": 0.5}).credit(rollouts)
    expected = rollouts.eligible.float() * (rollouts.rewards - 0.5)[:, None]
    assert torch.equal(uniform, expected)
    module = make_module(policy, weighting="mean-rescaled", rescale_clip=2.0, baseline={"initial_mean": 0.5})
    rescaled, _ = module.credit(rollouts)
    w, _ = module.hindsight_weights(rollouts)  # same snapshot, same weights
    mean = w.sum(-1, keepdim=True) / rollouts.eligible.sum(-1, keepdim=True)
    expected = (w / mean).clamp(max=2.0) * rollouts.eligible * (rollouts.rewards - 0.5)[:, None]
    torch.testing.assert_close(rescaled, expected)
    assert (rescaled.abs() == 2.0 * 0.5).any()  # the clip was exercised


def test_gini():
    assert gini(torch.ones(10)) == pytest.approx(0.0)
    assert gini(torch.tensor([0.0] * 9 + [1.0])) == pytest.approx(0.9)


def test_baseline_survives_a_checkpoint_round_trip(policy):
    module = make_module(policy, weighting="uniform")
    module.baseline.update(["x", "y"], torch.tensor([1.0, 0.0]))
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    restored = make_module(policy, weighting="uniform")
    restored.on_load_checkpoint(checkpoint)
    assert restored.baseline(["x", "y", "z"]).tolist() == module.baseline(["x", "y", "z"]).tolist()


def test_hindsight_warm_start_examples_target_the_slip():
    from algorithms.hp_rlvr import completion_tokens, hindsight_example
    from harness.tiny import build_tokenizer

    tokenizer, task = build_tokenizer(), MathTask(train_size=30, eval_size=5)
    rng = random.Random(0)
    failures = slips = 0
    for problem in task.train_problems():
        ids, labels = hindsight_example(task, problem, tokenizer, HindsightTemplate(), 2, rng)
        assert len(ids) == len(labels)
        assert any(label != -100 for label in labels)
        text = tokenizer.decode(ids)
        assert text.startswith("Later:") and " Verdict: " in text and "\nQ: " in text
        # a success's targets are its own tokens; a failure's differ in one place at most (where
        # its scored segment holds the slip), and there the target is the demonstration's token
        differing = [k for k in range(len(ids)) if labels[k] != -100 and ids[k] != labels[k]]
        if "Verdict: correct" in text:
            assert differing == []
            continue
        failures += 1
        assert len(differing) <= 1
        if differing:
            prompt, right, _ = completion_tokens(task, problem, tokenizer)
            start = next(i for i in range(1, len(ids)) if ids[i : i + len(prompt)] == prompt) + len(prompt)
            assert labels[differing[0]] == right[differing[0] - start]
            slips += 1
    assert failures >= 5 and slips >= 2  # the slip's target was corrected, not left as sampled


def test_scoring_passes_build_no_cache_and_equal_the_cached_forward_bit_for_bit(policy, monkeypatch):
    """The no-gradient and gradient passes skip the key/value cache (a copy of every layer's keys
    and values that nothing reads) and give the very bits the forward that kept it gave."""
    model, tokenizer = policy
    rollouts = sampled(policy, n=6)
    views = hindsight_views(rollouts, 3, tokenizer, HindsightTemplate())

    def passes():
        hidden = next_token_hidden(
            model, views.input_ids, views.attention_mask, views.hindsight_rows, views.hindsight_cols, 64
        )
        with torch.enable_grad():
            logprobs = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 1.0, rollouts.eligible)
            (grad,) = torch.autograd.grad(logprobs.sum(), model.get_output_embeddings().weight)
        return hidden, logprobs.detach(), grad

    forward, asked, caches = type(model.base_model).forward, [], []

    def watched(self, *args, **kwargs):
        asked.append(kwargs.get("use_cache"))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(model.base_model), "forward", watched)
    without = passes()
    assert asked and all(use is False for use in asked)  # every pass asked for no cache

    def cached(self, *args, **kwargs):
        output = forward(self, *args, **{**kwargs, "use_cache": True})
        caches.append(output.past_key_values)
        return output

    monkeypatch.setattr(type(model.base_model), "forward", cached)
    with_cache = passes()
    assert caches and all(cache is not None for cache in caches)  # the patch did keep a cache
    for a, b in zip(without, with_cache):
        assert torch.equal(a, b)
