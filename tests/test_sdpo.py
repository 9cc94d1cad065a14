"""SDPO against TRL 1.16.0's `SDPOTrainer` on identical inputs: the sampled-token loss, its
importance-sampling clip and per-sequence aggregation, the blend with the policy loss, the choice
of teacher contexts and the teacher's inputs, the EMA update; then a short run on the tiny model."""

import copy
import inspect
import math
import os
from collections import defaultdict
from dataclasses import asdict, fields
from types import MethodType, SimpleNamespace

import polars as pl
import pytest
import torch
import yaml

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from trl.experimental.sdpo import SDPOConfig  # noqa: E402
from trl.experimental.sdpo.sdpo_trainer import (  # noqa: E402
    DistillationLogits,
    SDPOTrainer,
    SuccessfulRolloutTeacherContextBuilder,
)
from trl.trainer.callbacks import SyncRefModelCallback  # noqa: E402
from trl.trainer.utils import selective_log_softmax  # noqa: E402

from algorithms.grpo import group_advantages  # noqa: E402
from algorithms.loss import UpdateArgs, policy_loss  # noqa: E402
from algorithms.sdpo import (  # noqa: E402
    SDPO,
    Reprompt,
    divergence,
    render_context,
    teacher_contexts,
    teacher_views,
)
from harness.models import load_policy  # noqa: E402
from rollout.batch import Problem, Verdict, completed, left_padded  # noqa: E402
from rollout.decoding import SamplingArgs  # noqa: E402
from rollout.scoring import token_logprobs  # noqa: E402
from tasks.math import MathTask  # noqa: E402

PROMPT_COLUMNS = 3  # our rows hold the prompt before the completion; TRL's tensors the completion alone


# ---- the loss, its clip and aggregation, and the blend


def loss_inputs(seed: int, no_teacher: bool = False):
    """TRL's completion-only tensors: 6 completions of 8 tokens, ragged, over a vocabulary of 11;
    rows 2 and 5 have no teacher context; old log-probs far enough off that the clip bites."""
    g = torch.Generator().manual_seed(seed)
    completion_ids = torch.randint(0, 11, (6, 8), generator=g)
    completion_mask = torch.ones(6, 8, dtype=torch.long)
    completion_mask[1, 5:] = completion_mask[3, 2:] = completion_mask[4, 7:] = 0
    has_teacher = torch.tensor([1.0, 1, 0, 1, 1, 0]) * (not no_teacher)
    student = (torch.randn(6, 8, 11, generator=g) * 2).requires_grad_()
    teacher = torch.randn(6, 8, 11, generator=g) * 2
    old = selective_log_softmax(student.detach(), completion_ids) + torch.randn(6, 8, generator=g)
    advantages = torch.randn(6, generator=g)
    return completion_ids, completion_mask, has_teacher, student, teacher, old, advantages


def trl_loss(settings, completion_ids, completion_mask, has_teacher, student, teacher, old, advantages):
    """TRL's `compute_loss` on a stub trainer: its forward passes replaced by the given logits
    (already at the temperature), one process, no gradient accumulation, loss_type dapo (its default)."""
    stub = SimpleNamespace(
        args=SimpleNamespace(
            distillation_weight=settings["distillation_weight"],
            distillation_mode=settings["distillation_mode"],
            distillation_alpha=settings["distillation_alpha"],
            distillation_topk=settings["distillation_topk"],
            distillation_add_tail=settings["distillation_add_tail"],
            distillation_is_clip=settings["distillation_is_clip"],
        ),
        use_teacher_server=False,
        teacher_model=None,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        importance_sampling_level="token",
        epsilon_low=0.2,
        epsilon_high=0.2,
        loss_type="dapo",
        _name="SDPO",
        _metrics={"train": defaultdict(list)},
        accelerator=SimpleNamespace(gather=lambda x: x),
    )
    for name in ("_compute_policy_loss", "_compute_self_distillation_loss", "_log_self_distillation_metric"):
        setattr(stub, name, MethodType(getattr(SDPOTrainer, name), stub))
    stub._forward_logits = lambda **_: student
    stub._compute_teacher_student_logits = lambda *_: DistillationLogits(
        completion_ids, completion_mask, completion_mask * has_teacher[:, None], student, teacher
    )
    inputs = {
        "prompt_ids": torch.zeros(6, PROMPT_COLUMNS, dtype=torch.long),
        "prompt_mask": torch.ones(6, PROMPT_COLUMNS, dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
    }
    if old is not None:
        inputs["old_per_token_logps"] = old
    loss = SDPOTrainer.compute_loss(stub, SimpleNamespace(training=True), inputs)
    return loss, stub._metrics["train"]


def our_loss(settings, completion_ids, completion_mask, has_teacher, student, teacher, old, advantages):
    """The same through `policy_loss` and `SDPO.policy_objective`, on [n, L] rows whose first
    columns are the prompt: the student's logits at the eligible tokens as `score` gives them, the
    teacher's at the distilled ones as `teacher_logits` does (both `score`'s outputs)."""
    widen = lambda t, value=0: torch.nn.functional.pad(t, (PROMPT_COLUMNS, 0), value=value)  # noqa: E731
    eligible = widen(completion_mask.bool(), False)
    distilled = eligible & (has_teacher[:, None] > 0)
    ids = widen(completion_ids)
    wide_student = widen(student.permute(2, 0, 1)).permute(1, 2, 0)  # [6, L, 11], the graph kept
    wide_teacher = widen(teacher.permute(2, 0, 1)).permute(1, 2, 0)
    logprobs = widen(token_logprobs(student, completion_ids) * completion_mask)
    token_data = {} if old is None else {"old_logprobs": widen(old) * eligible}  # several updates a step
    reference = token_data.get("old_logprobs", logprobs.detach())
    surrogate, _ = policy_loss(logprobs, reference, advantages[:, None] * eligible, eligible, UpdateArgs())
    rows, cols = distilled.nonzero(as_tuple=True)
    views = None if not len(rows) else SimpleNamespace(rows=rows, cols=cols)
    module = SimpleNamespace(**settings)
    batch = SimpleNamespace(token_data=token_data, eligible=eligible, input_ids=ids)
    outputs = {
        "student_logits": wide_student[eligible],
        "teacher_logits": None if views is None else wide_teacher[views.rows, views.cols],
        "views": views,
    }
    return SDPO.policy_objective(module, batch, logprobs, surrogate, outputs)


def settings(**changes):
    """SDPO's objective settings: TRL's defaults, then `changes`."""
    trl = dict(
        distillation_weight=1.0,
        distillation_mode="sampled_token",
        distillation_alpha=1.0,
        distillation_topk=None,
        distillation_add_tail=False,
        distillation_is_clip=2.0,
        distillation_aggregation="sequence-mean",
    )
    return trl | changes


TRL_OBJECTIVES = [
    {},
    {"distillation_mode": "full_logits", "distillation_alpha": 0.5},
    {"distillation_mode": "full_logits", "distillation_alpha": 0.0},
    {"distillation_mode": "topk_logits", "distillation_topk": 4, "distillation_alpha": 0.3},
    {"distillation_mode": "topk_logits", "distillation_topk": 4, "distillation_add_tail": True},
]


@pytest.mark.parametrize("objective", TRL_OBJECTIVES, ids=range(len(TRL_OBJECTIVES)))
@pytest.mark.parametrize("weight", [1.0, 0.0, 0.3])
@pytest.mark.parametrize("is_clip", [2.0, 1.2, None])
@pytest.mark.parametrize("with_old", [True, False])
def test_loss_and_gradient_match_trls_compute_loss(objective, weight, is_clip, with_old):
    inputs = list(loss_inputs(seed=int(weight * 10) + 7))
    inputs[5] = inputs[5] if with_old else None
    student = inputs[3]
    chosen = settings(**objective, distillation_weight=weight, distillation_is_clip=is_clip)
    expected, metrics = trl_loss(chosen, *inputs)
    (expected_grad,) = torch.autograd.grad(expected, student)
    ours, stats = our_loss(chosen, *inputs)
    (grad,) = torch.autograd.grad(ours, student)
    torch.testing.assert_close(ours, expected)
    torch.testing.assert_close(grad, expected_grad)
    if weight > 0:
        assert stats["self_distillation/distillation_loss"] == pytest.approx(
            metrics["self_distillation/distillation_loss"][0], rel=1e-5
        )
    if weight < 1:
        assert stats["self_distillation/policy_loss"] == pytest.approx(
            metrics["self_distillation/policy_loss"][0], rel=1e-5
        )


def papers_loss(
    student_logits, teacher_logits, completion_ids, response_mask, mask, old, alpha, topk, add_tail, is_clip
):
    """lasgroup/SDPO at 0e6d510, verl/trainer/ppo/core_algos.py `compute_self_distillation_loss`
    with `full_logit_distillation` True and loss_agg_mode token-mean, the top-k log-probs made as
    verl/workers/actor/dp_actor.py `_forward_micro_batch` makes them (the student's top-k logits,
    the teacher's gathered at the student's indices), transcribed; and on a single update
    (`on_policy`) the old log-probs are the student's own, detached."""
    import torch.nn.functional as F

    student_all = student_logits.log_softmax(-1)
    log_prob = student_all.gather(-1, completion_ids[..., None]).squeeze(-1)
    old_log_prob = log_prob.detach() if old is None else old
    loss_mask = response_mask * mask.unsqueeze(1)
    if topk is not None:
        k = min(topk, student_logits.size(-1))
        topk_logits, topk_indices = torch.topk(student_logits, k, dim=-1)
        student_d = topk_logits - torch.logsumexp(student_logits, dim=-1, keepdim=True)
        teacher_d = torch.gather(teacher_logits, -1, topk_indices) - torch.logsumexp(
            teacher_logits, dim=-1, keepdim=True
        )

        def add_tail_(log_probs):
            log_s = torch.clamp(torch.logsumexp(log_probs, dim=-1, keepdim=True), max=-1e-7)
            return torch.cat([log_probs, torch.log(-torch.expm1(log_s))], dim=-1)

        if add_tail:
            student_d, teacher_d = add_tail_(student_d), add_tail_(teacher_d)
        else:
            student_d = student_d - torch.logsumexp(student_d, dim=-1, keepdim=True)
            teacher_d = teacher_d - torch.logsumexp(teacher_d, dim=-1, keepdim=True)
    else:
        student_d, teacher_d = student_all, teacher_logits.log_softmax(-1)
    if alpha == 0.0:
        kl_loss = F.kl_div(student_d, teacher_d, reduction="none", log_target=True)
    elif alpha == 1.0:
        kl_loss = F.kl_div(teacher_d, student_d, reduction="none", log_target=True)
    else:
        a = torch.tensor(alpha, dtype=student_d.dtype)
        mixture = torch.logsumexp(torch.stack([student_d + torch.log(1 - a), teacher_d + torch.log(a)]), dim=0)
        kl_teacher = F.kl_div(mixture, teacher_d, reduction="none", log_target=True)
        kl_student = F.kl_div(mixture, student_d, reduction="none", log_target=True)
        kl_loss = torch.lerp(kl_student, kl_teacher, a)
    per_token_loss = kl_loss.sum(-1)
    if is_clip is not None:
        negative_approx_kl = torch.clamp((log_prob - old_log_prob).detach(), min=-20.0, max=20.0)
        per_token_loss = per_token_loss * torch.exp(negative_approx_kl).clamp(max=is_clip)
    return (per_token_loss * loss_mask).sum() / loss_mask.sum().clamp(min=1.0)


PAPER_OBJECTIVES = [
    {"distillation_alpha": 0.5, "distillation_topk": 100, "distillation_add_tail": True},  # its actor.yaml
    {"distillation_alpha": 1.0, "distillation_topk": 100, "distillation_add_tail": True},  # its rich-feedback runs
    {"distillation_alpha": 0.0, "distillation_topk": 4, "distillation_add_tail": True},
    {"distillation_alpha": 0.3, "distillation_topk": 4, "distillation_add_tail": False},
    {"distillation_alpha": 0.5, "distillation_topk": None, "distillation_add_tail": True},
]


@pytest.mark.parametrize("objective", PAPER_OBJECTIVES, ids=range(len(PAPER_OBJECTIVES)))
@pytest.mark.parametrize("is_clip", [2.0, 1.2, None])
@pytest.mark.parametrize("with_old", [True, False])
def test_loss_and_gradient_match_the_papers_code(objective, is_clip, with_old):
    completion_ids, completion_mask, has_teacher, student, teacher, old, advantages = loss_inputs(seed=11)
    old = old if with_old else None
    topk = objective["distillation_topk"]
    chosen = settings(
        **objective,
        distillation_mode="full_logits" if topk is None else "topk_logits",
        distillation_is_clip=is_clip,
        distillation_aggregation="token-mean",
    )
    args = (objective["distillation_alpha"], topk, objective["distillation_add_tail"], is_clip)
    expected = papers_loss(student, teacher, completion_ids, completion_mask, has_teacher, old, *args)
    (expected_grad,) = torch.autograd.grad(expected, student)
    ours, stats = our_loss(chosen, completion_ids, completion_mask, has_teacher, student, teacher, old, advantages)
    (grad,) = torch.autograd.grad(ours, student)
    torch.testing.assert_close(ours, expected)
    torch.testing.assert_close(grad, expected_grad)
    assert stats["self_distillation/distillation_loss"] == pytest.approx(float(expected.detach()), rel=1e-5)


def test_the_clip_the_tail_and_the_aggregation_change_the_loss_here():
    """The inputs above are ones where each setting matters: none of them is a no-op."""
    inputs = loss_inputs(seed=17)
    paper = settings(
        distillation_mode="topk_logits", distillation_topk=4, distillation_add_tail=True, distillation_alpha=0.5
    )
    base, _ = our_loss(paper | {"distillation_aggregation": "token-mean"}, *inputs)
    for change in (
        {"distillation_is_clip": None},
        {"distillation_add_tail": False},
        {"distillation_aggregation": "sequence-mean"},
        {"distillation_alpha": 0.3},
    ):
        other, _ = our_loss(paper | {"distillation_aggregation": "token-mean"} | change, *inputs)
        assert not torch.isclose(other, base), change


def test_no_teacher_anywhere_gives_a_zero_loss_and_gradient_as_trls():
    inputs = loss_inputs(seed=3, no_teacher=True)
    expected, _ = trl_loss(settings(), *inputs)
    ours, _ = our_loss(settings(), *inputs)
    (grad,) = torch.autograd.grad(ours, inputs[3])
    assert ours.item() == expected.item() == 0.0 and not grad.any()


def test_the_divergence_is_the_direct_sum_over_the_vocabulary():
    """D_alpha at alpha 0, 1 and 0.5 against its definition: KL(T||S), KL(S||T) and the
    Jensen-Shannon divergence, written out in probability space."""
    g = torch.Generator().manual_seed(5)
    s, t = (torch.randn(3, 7, generator=g).softmax(-1) for _ in range(2))
    kl = lambda p, q: (p * (p / q).log()).sum(-1)  # noqa: E731
    m = (s + t) / 2
    torch.testing.assert_close(divergence(s.log(), t.log(), 0.0), kl(t, s))
    torch.testing.assert_close(divergence(s.log(), t.log(), 1.0), kl(s, t))
    torch.testing.assert_close(divergence(s.log(), t.log(), 0.5), (kl(s, m) + kl(t, m)) / 2)


# ---- which rollouts get a teacher, what it reads, and what it scores


@pytest.fixture(scope="module")
def policy(tiny_dir):
    return load_policy(tiny_dir)


PROMPTS = ["Q: 1+2\nA:", "Q: 14-3*9\nA:", "Q: 2*3\nA:", "Q: 7-1\nA:"]
COMPLETIONS = [" 3", " 1+2=3 #### 3", " 12", "", " 6", " 6 #", " 5", " 60"]  # rollout i: COMPLETIONS[i % 8]
REWARDS = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
FEEDBACKS = ["correct", "wrong: expected 3", "", "  ", "no answer", "", "wrong", "x"] * 2


def literal_rollouts(tokenizer):
    """16 rollouts, 4 prompts x G = 4: successes first, last or absent, one success alone,
    empty and blank feedback; an empty completion (its EOS alone)."""
    problems = [Problem(f"p{i // 4}", PROMPTS[i // 4], "") for i in range(16)]
    prompt_ids, prompt_mask = left_padded(
        [tokenizer(p.prompt).input_ids for p in problems], tokenizer.pad_token_id, "cpu"
    )
    texts = [COMPLETIONS[i % 8] for i in range(16)]
    tokens = [tokenizer(t).input_ids + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, tokens))
    completion = torch.tensor([t + [tokenizer.pad_token_id] * (width - len(t)) for t in tokens])
    generated = torch.tensor([[c < len(t) for c in range(width)] for t in tokens])
    logprobs = -torch.rand(completion.shape, generator=torch.Generator().manual_seed(0))
    rollouts = completed(problems, prompt_ids, prompt_mask, completion, generated, logprobs, tokenizer)
    rollouts.verdicts = [Verdict(r, f) for r, f in zip(REWARDS, FEEDBACKS)]
    return rollouts


def trl_teacher_inputs(rollouts, tokenizer, reprompt: Reprompt):
    """TRL's builder on the same rollouts: (its teacher token rows, its messages, its outputs)."""
    messages = []

    def tokenize(batch):
        messages.extend(batch)
        return tokenizer(batch).input_ids

    prompt_width = int((~rollouts.eligible).cumprod(-1).sum(-1).min())
    trainer = SimpleNamespace(
        args=SimpleNamespace(**asdict(reprompt), remove_thinking_from_demonstration=False),
        accelerator=SimpleNamespace(
            device="cpu", process_index=0, gather=lambda x: x, pad_across_processes=lambda x, **_: x
        ),
        model=SimpleNamespace(training=True),
        num_generations=4,
        _tokenizer=tokenizer,
        processing_class=tokenizer,
        _tokenize_prompts_untruncated=tokenize,
    )
    builder = SuccessfulRolloutTeacherContextBuilder(trainer)
    completion = {
        "completion_ids": rollouts.input_ids[:, prompt_width:],
        "completion_mask": rollouts.eligible[:, prompt_width:].long(),
    }
    output = builder.build(
        completion, [p.prompt for p in rollouts.problems], rollouts.rewards, [v.feedback for v in rollouts.verdicts]
    )
    rows = [ids[mask.bool()] for ids, mask in zip(output["teacher_input_ids"], output["teacher_attention_mask"])]
    return rows, messages, output, builder.last_metrics


TRL_RULE = {"environment_feedback_only_without_solution": False, "feedback_on_success": True}  # TRL's defaults
REPROMPTS = [
    Reprompt(**TRL_RULE),
    Reprompt(**TRL_RULE | {"include_environment_feedback": False}),
    Reprompt(**TRL_RULE | {"environment_feedback_only_without_solution": True}),
    Reprompt(**TRL_RULE | {"dont_reprompt_on_self_success": False, "success_reward_threshold": 0.5}),
    Reprompt(**TRL_RULE | {"use_successful_as_teacher": False}),
    Reprompt(**TRL_RULE | {"max_reprompt_len": 12, "reprompt_template": "<{solution}|{feedback}>{prompt}"}),
]


@pytest.mark.parametrize("reprompt", REPROMPTS, ids=range(len(REPROMPTS)))
def test_teacher_contexts_and_inputs_are_trls(policy, reprompt):
    _, tokenizer = policy
    rollouts = literal_rollouts(tokenizer)
    expected_rows, messages, output, _ = trl_teacher_inputs(rollouts, tokenizer, reprompt)
    contexts = teacher_contexts(REWARDS, FEEDBACKS, 4, reprompt)
    has_teacher = [s is not None or f for s, f in contexts]
    assert has_teacher == output["self_distillation_mask"].bool().tolist()
    for i, (solution, feedback) in enumerate(contexts):
        if has_teacher[i]:  # TRL's message is our block followed by the prompt
            shown = None if solution is None else rollouts.completions[solution]
            block = render_context(reprompt, shown, FEEDBACKS[i] if feedback else None)
            assert messages[i] == block + PROMPTS[i // 4]
    views = teacher_views(rollouts, contexts, tokenizer, reprompt)
    ours = [ids[mask.bool()] for ids, mask in zip(views.input_ids, views.attention_mask)]
    assert [r.tolist() for r in ours] == [expected_rows[i].tolist() for i in range(16) if has_teacher[i]]
    # every scored token is the rollout's own, every eligible token of a rollout with a teacher is scored
    assert torch.equal(
        views.input_ids[views.teacher_rows, views.teacher_cols], rollouts.input_ids[views.rows, views.cols]
    )
    scored = torch.zeros_like(rollouts.eligible)
    scored[views.rows, views.cols] = True
    assert torch.equal(scored, rollouts.eligible & torch.tensor(has_teacher)[:, None])


def papers_contexts(rewards, feedbacks, group_size, threshold=0.5, only_without_solution=True):
    """lasgroup/SDPO at 0e6d510, verl/trainer/ppo/ray_trainer.py: `_collect_feedback`,
    `_collect_solutions_by_uid`, `_get_solution` (dont_reprompt_on_self_success) and the rule of
    `_build_teacher_message` and `self_distillation_mask`, transcribed; its verifiers give a
    success no feedback ("no feedback means correct", verl/utils/reward_score/feedback/)."""
    uids = [i // group_size for i in range(len(rewards))]
    feedback_list = [f if f and f.strip() else None for f in feedbacks]
    success_by_uid = defaultdict(list)
    for idx, uid in enumerate(uids):
        if rewards[idx] >= threshold:
            success_by_uid[uid].append(idx)
    out = []
    for i in range(len(rewards)):
        solution_idxs = [j for j in success_by_uid[uids[i]] if j != i]
        solution = solution_idxs[0] if solution_idxs else None
        has_feedback = feedback_list[i] is not None
        use_feedback = has_feedback and (not only_without_solution or solution is None)
        out.append((solution, use_feedback))
    return out


def test_the_teacher_rule_is_the_papers_codes():
    """Our verifiers' feedback, and the same with every success's feedback emptied as the paper's
    verifiers give it: the paper's rule on the latter is ours (its defaults) on the former."""
    papers_feedbacks = ["" if r >= 1.0 else f for r, f in zip(REWARDS, FEEDBACKS)]
    ours = teacher_contexts(REWARDS, FEEDBACKS, 4, Reprompt())
    assert ours == papers_contexts(REWARDS, papers_feedbacks, 4, threshold=1.0)
    assert any(f for _, f in ours) and any(s is not None for s, _ in ours)
    assert ours != teacher_contexts(REWARDS, FEEDBACKS, 4, Reprompt(**TRL_RULE))
    # a success alone in its group: our verifier's "correct" is not shown (the paper's says nothing)
    alone = teacher_contexts([1.0, 0.0, 0.0, 0.0], ["correct", "wrong", "", ""], 4, Reprompt())
    assert alone == papers_contexts([1.0, 0.0, 0.0, 0.0], ["", "wrong", "", ""], 4, threshold=1.0)
    assert alone[0] == (None, False)


def test_the_rule_on_literal_rewards():
    """Group 0 (1, 0, 1, 0): the failures and the second success see rollout 0, rollout 0 sees 2.
    Group 2 (0, .5, 1, 1): 10 and 11 see each other. Group 1 has no success."""
    solutions = [s for s, _ in teacher_contexts(REWARDS, [""] * 16, 4, Reprompt())]
    assert solutions == [2, 0, 0, 0, None, None, None, None, 10, 10, 11, 10, 13, 12, 12, 12]


def make_module(policy, **kwargs):
    model, tokenizer = policy
    return SDPO(policy=copy.deepcopy(model), tokenizer=tokenizer, task=MathTask(train_size=20, eval_size=2), **kwargs)


@pytest.mark.parametrize(
    "kind, reprompt",
    [
        ("ema", Reprompt(**TRL_RULE)),
        ("base", Reprompt(**TRL_RULE | {"environment_feedback_only_without_solution": True})),
        ("live", Reprompt(**TRL_RULE | {"include_environment_feedback": False})),
    ],
)
def test_the_teacher_scores_each_rollout_on_trls_teacher_inputs(policy, kind, reprompt):
    """The teacher's logits at each distilled token at the sampling temperature, as a plain
    forward pass of the teacher over TRL's teacher row (its padding removed) gives them; the
    teacher of `ema` and `base` is a model of its own (here made to differ from the policy). And
    `credit`'s advantages and statistics are GRPO's and TRL's."""
    module = make_module(
        policy, group_size=4, teacher_model_kind=kind, reprompt=asdict(reprompt), sampling=SamplingArgs(temperature=0.7)
    )
    if module.teacher is not None:
        with torch.no_grad():
            for p in module.teacher.parameters():
                p.add_(torch.randn_like(p) * 0.05)
    teacher = module.policy if kind == "live" else module.teacher
    rollouts = literal_rollouts(module.tokenizer)
    advantages, stats = module.credit(rollouts)
    rows, _, output, metrics = trl_teacher_inputs(rollouts, module.tokenizer, reprompt)
    grpo = group_advantages(torch.tensor(REWARDS).view(-1, 4)).view(-1, 1) * rollouts.eligible
    torch.testing.assert_close(advantages, grpo)
    assert {k: pytest.approx(v) for k, v in metrics.items()} == {k: stats[k] for k in metrics}
    views = module.views_of(rollouts)
    scores = module.teacher_logits(views)
    distilled = torch.zeros_like(rollouts.eligible)
    distilled[views.rows, views.cols] = True
    assert torch.equal(distilled, rollouts.eligible & output["self_distillation_mask"].bool()[:, None])
    for i, row in enumerate(rows):
        if not distilled[i].any():
            continue
        n = int(rollouts.eligible[i].sum())
        with torch.no_grad():
            expected = teacher(input_ids=row[None]).logits[0, -n - 1 : -1] / 0.7
        torch.testing.assert_close(scores[views.rows == i], expected, rtol=1e-5, atol=1e-5)


def test_the_students_log_probs_and_gradient_are_the_shared_updates(policy):
    """`score` returns the student's logits for the distillation; its log-probs, and their
    gradient down to the first layer, are those the shared update computes for every algorithm."""
    module = make_module(policy, group_size=4, sampling=SamplingArgs(temperature=0.7))
    rollouts = literal_rollouts(module.tokenizer)
    grads = []
    for logprobs in (module.score(rollouts)[0], module.eligible_logprobs(module.policy, rollouts)):
        module.policy.zero_grad()
        (logprobs * torch.linspace(-1, 1, logprobs.shape[1])).sum().backward()
        grads.append([p.grad.clone() for p in module.policy.parameters()])
    torch.testing.assert_close(module.score(rollouts)[0], module.eligible_logprobs(module.policy, rollouts))
    for ours, shared in zip(*grads, strict=True):
        torch.testing.assert_close(ours, shared, rtol=1e-4, atol=1e-5)
    assert all(g.abs().sum() > 0 for g in grads[0])


def test_the_probe_is_the_policys_gain_on_a_success_shown_itself(policy):
    """Per shown success: log p(y | block holding y, x) - log p(y | x) over its tokens, by plain
    forward passes on the rendered texts; only successes are read, at most `probe_rollouts`."""
    module = make_module(policy, group_size=4, probe_rollouts=2, sampling=SamplingArgs(temperature=0.7))
    model, tokenizer = module.policy, module.tokenizer
    rollouts = literal_rollouts(tokenizer)
    gains = []
    for i in [0, 2]:  # the first two successes
        prompt, n = PROMPTS[i // 4], int(rollouts.eligible[i].sum())
        ids = rollouts.input_ids[i][rollouts.attention_mask[i].bool()]
        block = tokenizer(render_context(module.reprompt, rollouts.completions[i], None), add_special_tokens=False)
        read = torch.cat([torch.tensor(block.input_ids), ids])
        assert tokenizer.decode(ids[:-n]) == prompt
        with torch.no_grad():
            for row, sign in ((read, 1), (ids, -1)):
                logits = model(input_ids=row[None]).logits[0, -n - 1 : -1] / 0.7
                gains.append(sign * selective_log_softmax(logits, row[-n:]))
    expected = torch.cat([gains[0] + gains[1], gains[2] + gains[3]]).mean()
    probe = module.diagnostics(rollouts)
    assert probe["self_distillation/probe_logprob_gain"] == pytest.approx(float(expected), abs=1e-5)
    assert probe["self_distillation/probe_headroom"] == pytest.approx(
        float(torch.cat([gains[1], gains[3]]).mean()),
        abs=1e-5,  # -log p without the block
    )
    rollouts.verdicts = [Verdict(0.0, "") for _ in rollouts.verdicts]
    assert math.isnan(module.diagnostics(rollouts)["self_distillation/probe_logprob_gain"])


# ---- the EMA teacher


def test_ema_teacher_follows_trls_sync_after_every_nth_update_and_survives_a_checkpoint(policy):
    module = make_module(policy, group_size=4, teacher_model_kind="ema", teacher_sync_steps=2, teacher_update_rate=0.3)
    (optimizer,), _ = module.configure_optimizers()
    start = copy.deepcopy(module.teacher)
    for update in (1, 2):
        for p in module.policy.parameters():
            p.grad = torch.randn_like(p)
        optimizer.step()
        if update == 1:  # not a sync step: the teacher is the start
            assert all(torch.equal(a, b) for a, b in zip(module.teacher.parameters(), start.parameters()))
    SyncRefModelCallback._sync_target_model(module.policy, start, 0.3)
    assert all(torch.equal(a, b) for a, b in zip(module.teacher.parameters(), start.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(module.teacher.parameters(), module.policy.parameters()))
    checkpoint = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(checkpoint)
    restored = make_module(policy, group_size=4)
    restored.load_state_dict(checkpoint["state_dict"])
    restored.on_load_checkpoint(checkpoint)
    assert restored.optimizer_updates == 2
    assert all(torch.equal(a, b) for a, b in zip(restored.teacher.parameters(), module.teacher.parameters()))


def test_a_base_teacher_stays_the_starting_policy_through_updates(policy):
    """`base` is the starting policy for the whole run: the EMA's hook is `ema`'s alone."""
    module = make_module(policy, group_size=4, teacher_model_kind="base", teacher_update_rate=0.3)
    (optimizer,), _ = module.configure_optimizers()
    start = copy.deepcopy(module.teacher)
    for _ in range(2):
        for p in module.policy.parameters():
            p.grad = torch.randn_like(p)
        optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(module.teacher.parameters(), start.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(module.policy.parameters(), start.parameters()))


def test_live_teacher_is_the_policy_and_adds_no_weights(policy):
    module = make_module(policy, group_size=4, teacher_model_kind="live")
    assert module.teacher is None and not any(k.startswith("teacher.") for k in module.state_dict())


@pytest.mark.parametrize(
    "args, message",
    [
        ({"distillation_weight": 1.5}, "distillation_weight: must be in [0, 1]"),
        ({"distillation_weight": -0.1}, "distillation_weight: must be in [0, 1]"),
        ({"distillation_is_clip": 0.5}, "distillation_is_clip: must be >= 1"),
        ({"teacher_update_rate": 0.0}, "teacher_update_rate: must be in (0, 1]"),
        ({"teacher_update_rate": 1.5}, "teacher_update_rate: must be in (0, 1]"),
        ({"teacher_sync_steps": 0}, "teacher_sync_steps: must be >= 1"),
        ({"scoring_tokens": 0}, "scoring_tokens: must be >= 1"),
        ({"group_size": 1}, "group_size: must be >= 2 (got 1)"),
        ({"distillation_mode": "sampled_token"}, "distillation_alpha: sampled_token is the reverse KL alone"),
        ({"distillation_alpha": 1.5}, "distillation_alpha: must be in [0, 1]"),
        ({"reprompt": {"max_reprompt_len": 0}}, "max_reprompt_len: must be >= 1"),
        ({"reprompt": {"success_reward_threshold": 2.0}}, "success_reward_threshold: must be in [0, 1]"),
        ({"reprompt": {"reprompt_template": "{prompt}{solution}"}}, "reprompt_template: must end with {prompt}"),
        ({"reprompt": {"solution_template": "{answer}"}}, "solution_template: must use only"),
    ],
)
def test_arguments_out_of_range_are_refused_by_name(args, message):
    with pytest.raises(ValueError) as error:
        SDPO.check_args(args)
    assert str(error.value).startswith(message)


def test_a_bad_argument_in_the_yaml_is_one_line_naming_it_exit_2(tmp_path, capsys):
    from test_e2e import suite

    from harness.__main__ import main

    spec = suite("s", "tasks.math.MathTask")
    spec["algorithms"] = {
        "sdpo": {"class_path": "algorithms.sdpo.SDPO", "init_args": {"reprompt": {"max_reprompt_len": 0}}}
    }
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"suites": [spec]}))
    assert main(["run", str(tmp_path / "b.yaml"), "--results", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "algorithms.sdpo.init_args.reprompt.max_reprompt_len: must be >= 1 (got 0)" in err and err.count("\n") == 1


PAPERS_DEFAULTS = {
    # lasgroup/SDPO at 0e6d510: verl/trainer/config/actor/actor.yaml `self_distillation` and
    # `loss_agg_mode`; verl/trainer/config/sdpo.yaml sets `policy_loss.loss_mode: sdpo` (the
    # distillation alone) and is_clip 2.0
    "full_logit_distillation": True,
    "distillation_topk": 100,
    "distillation_add_tail": True,
    "alpha": 0.5,
    "success_reward_threshold": 0.5,
    "teacher_regularization": "ema",
    "teacher_update_rate": 0.05,
    "max_reprompt_len": 10240,
    "dont_reprompt_on_self_success": True,
    "include_environment_feedback": True,
    "environment_feedback_only_without_solution": True,
    "is_clip": 2.0,
    "loss_agg_mode": "token-mean",
}


def test_defaults_are_the_papers_code_and_trls_are_settings():
    own = {k: p.default for k, p in inspect.signature(SDPO.__init__).parameters.items()}
    reprompt = Reprompt()
    paper = PAPERS_DEFAULTS
    assert own["distillation_mode"] == "topk_logits" and paper["full_logit_distillation"]
    assert own["distillation_topk"] == paper["distillation_topk"]
    assert own["distillation_add_tail"] == paper["distillation_add_tail"]
    assert own["distillation_alpha"] == paper["alpha"] and own["distillation_is_clip"] == paper["is_clip"]
    assert own["distillation_aggregation"] == paper["loss_agg_mode"] and own["distillation_weight"] == 1.0
    assert own["teacher_model_kind"] == paper["teacher_regularization"]
    assert own["teacher_update_rate"] == paper["teacher_update_rate"]
    for name in (
        "max_reprompt_len",
        "dont_reprompt_on_self_success",
        "include_environment_feedback",
        "environment_feedback_only_without_solution",
    ):
        assert getattr(reprompt, name) == paper[name], name
    # the threshold is `solved`'s, the same as the paper's 0.5 on a 0/1 reward
    assert reprompt.success_reward_threshold == 1.0 and not reprompt.feedback_on_success
    # the settings the TRL tests above run at are TRL's defaults
    trl = {f.name: f.default for f in fields(SDPOConfig)}
    assert {k: v for k, v in settings().items() if k in trl} == {k: trl[k] for k in settings() if k in trl}
    assert {k: trl[k] for k in TRL_RULE if k in trl} == {"environment_feedback_only_without_solution": False}
    SDPO.check_args(own)


# ---- the warm start's teacher examples


def test_a_teacher_example_shows_a_solution_or_a_failures_feedback_and_labels_the_completion(policy):
    """Each example: block + prompt unlabelled; the completion the demonstration (its block the
    demonstration as the solution) or a corrupted attempt labelled with its own tokens up to the
    first wrong one, which is the demonstration's, and nothing after (its block the solution or
    the attempt's feedback, never both). All three kinds occur."""
    import random

    from algorithms.sdpo import teacher_example

    _, tokenizer = policy
    task, reprompt, rng = MathTask(train_size=40, eval_size=2), Reprompt(), random.Random(0)
    kinds = set()
    for problem in task.train_problems():
        ids, labels = teacher_example(task, problem, tokenizer, reprompt, rng)
        start = next(i for i, label in enumerate(labels) if label != -100)
        text = tokenizer.decode(ids[:start])
        assert text.endswith(problem.prompt)
        block = text.removesuffix(problem.prompt)
        right = tokenizer(problem.demonstration, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        realized = ids[start:]
        if realized == right:
            assert labels[start:] == right and block == render_context(reprompt, problem.demonstration, None)
            kinds.add("copy")
            continue
        attempt = tokenizer.decode(realized[:-1])
        assert task.verify(problem, attempt).reward == 0.0
        slip = next(i for i, (a, b) in enumerate(zip(realized, right)) if a != b)
        assert labels[start:] == realized[:slip] + [right[slip]] + [-100] * (len(realized) - slip - 1)
        if block == render_context(reprompt, problem.demonstration, None):
            kinds.add("solution")
        else:
            assert block == render_context(reprompt, None, task.verify(problem, attempt).feedback)
            kinds.add("feedback")
    assert kinds == {"copy", "solution", "feedback"}


def test_teacher_examples_take_their_share_of_the_warm_start_and_none_changes_its_key(policy):
    import itertools

    from algorithms.hp_rlvr import HindsightTeaching
    from algorithms.sdpo import TeacherTeaching
    from harness.models import Demonstrations
    from harness.settings import WarmStartArgs
    from harness.start import warm_start_key

    _, tokenizer = policy
    task = MathTask(train_size=200, eval_size=2)
    marker = tokenizer("Correctly solve the original question.", add_special_tokens=False).input_ids

    def lines(*teachings):  # 8 batches of 32 examples, as run (packed or padded)
        data = Demonstrations(task, tokenizer, 32, 0, [HindsightTeaching(fraction=0.3), *teachings])
        return [
            ids
            for batch in itertools.islice(iter(data), 8)
            for part in batch["parts"]
            for ids in part["input_ids"].tolist()
        ]

    def teaching(lines):  # the examples in the teacher's layout: one block each
        return sum(ids[i : i + len(marker)] == marker for ids in lines for i in range(len(ids)))

    assert teaching(lines()) == 0
    assert 0.3 < teaching(lines(TeacherTeaching(fraction=0.4))) / 256 < 0.5
    sdpo = "algorithms.sdpo.SDPO"
    assert warm_start_key(WarmStartArgs()) == warm_start_key(WarmStartArgs(teach={sdpo: {"fraction": 0.0}}))
    assert warm_start_key(WarmStartArgs()) != warm_start_key(WarmStartArgs(teach={sdpo: {"fraction": 0.2}}))
    with pytest.raises(ValueError, match="teach: the fractions must sum to at most 1 \\(got 0.6 \\+ 0.5\\)"):
        WarmStartArgs(teach={"algorithms.hp_rlvr.HPRLVR": {"fraction": 0.6}, sdpo: {"fraction": 0.5}})


# ---- end to end


@pytest.mark.slow
def test_a_killed_run_resumes_with_its_ema_teacher_to_the_same_records(tmp_path, monkeypatch):
    """Two updates a step (old log-probs, the clip); killed during step 3, the checkpoint of step 2
    holds the EMA teacher and its update count, and the resumed step 3 is the uninterrupted one's."""
    from test_e2e import suite

    from algorithms.base import RLVRModule
    from harness.__main__ import main

    def run(results):
        spec = suite("sdpo", "test_e2e.ParityReward", update={"minibatches": 2}, trainer={"checkpoint_every_s": 0})
        spec["algorithms"] = {"sdpo": {"class_path": "algorithms.sdpo.SDPO", "init_args": {"group_size": 4}}}
        config = tmp_path / "b.yaml"
        config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
        return main(["run", str(config), "--results", str(results)])

    assert run(tmp_path / "straight") == 0
    original = RLVRModule.training_step

    def killed_in_step_3(self, batch, batch_idx):
        if self.rl_step == 2:
            raise RuntimeError("killed")
        return original(self, batch, batch_idx)

    monkeypatch.setattr(RLVRModule, "training_step", killed_in_step_3)
    with pytest.raises(RuntimeError, match="killed"):
        run(tmp_path / "resumed")
    run_dir = tmp_path / "resumed" / "sdpo" / "sdpo-seed0"
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["rlvr"]["optimizer_updates"] == 4
    state = checkpoint["state_dict"]
    assert any(not torch.equal(state[k], state["policy." + k[8:]]) for k in state if k.startswith("teacher."))
    monkeypatch.setattr(RLVRModule, "training_step", original)
    assert run(tmp_path / "resumed") == 0
    straight = pl.read_parquet(tmp_path / "straight" / "sdpo" / "sdpo-seed0" / "metrics.parquet")
    resumed = pl.read_parquet(run_dir / "metrics.parquet")
    assert (
        straight["updates"].to_list() == [2] * 3 and (straight["self_distillation/reprompt_sample_fraction"] > 0).all()
    )
    assert all(n > 0 for norms in straight["grad_norms"].to_list() for n in norms)
    for column in (
        "reward",
        "grad_norms",
        "loss",
        "self_distillation/distillation_loss",
        "self_distillation/logprob_gain_mean",
    ):
        assert resumed[column].to_list() == straight[column].to_list(), column


def test_special_token_text_in_feedback_stays_text_in_the_teachers_context(policy):
    """A test's message may quote the program's output: the end-of-text string in it must not
    become the token that ends the teacher's context."""
    _, tokenizer = policy
    rollouts = literal_rollouts(tokenizer)
    rollouts.verdicts = [Verdict(0.0, f"wrong: got {tokenizer.eos_token} and {tokenizer.pad_token}")] * 16
    contexts = [(None, True)] * 16
    views = teacher_views(rollouts, contexts, tokenizer, Reprompt())
    ends = [
        row[mask.bool()].tolist().count(tokenizer.eos_token_id)
        for row, mask in zip(views.input_ids, views.attention_mask)
    ]
    plain = [row.tolist().count(tokenizer.eos_token_id) for row, eligible in zip(rollouts.input_ids, rollouts.eligible)]
    assert ends == plain  # the rollout's own closing EOS only, none from the feedback
