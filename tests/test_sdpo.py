"""SDPO against TRL 1.16.0's `SDPOTrainer` on identical inputs: the sampled-token loss, its
importance-sampling clip and per-sequence aggregation, the blend with the policy loss, the choice
of teacher contexts and the teacher's inputs, the EMA update; then a short run on the tiny model."""

import copy
import inspect
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
from algorithms.sdpo import SDPO, Reprompt, render_context, teacher_contexts, teacher_views  # noqa: E402
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


def trl_loss(weight, is_clip, completion_ids, completion_mask, has_teacher, student, teacher, old, advantages):
    """TRL's `compute_loss` on a stub trainer: its forward passes replaced by the given logits
    (already at the temperature), one process, no gradient accumulation, loss_type dapo (its default)."""
    stub = SimpleNamespace(
        args=SimpleNamespace(
            distillation_weight=weight,
            distillation_mode="sampled_token",
            distillation_alpha=1.0,
            distillation_topk=None,
            distillation_is_clip=is_clip,
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


def our_loss(weight, is_clip, completion_ids, completion_mask, has_teacher, student, teacher, old, advantages):
    """The same through `policy_loss` and `SDPO.policy_objective`, on [n, L] rows whose first
    columns are the prompt."""
    widen = lambda t, value=0: torch.nn.functional.pad(t, (PROMPT_COLUMNS, 0), value=value)  # noqa: E731
    eligible = widen(completion_mask.bool(), False)
    distilled = eligible & (has_teacher[:, None] > 0)
    logprobs = widen(token_logprobs(student, completion_ids) * completion_mask)
    teacher_logprobs = widen(token_logprobs(teacher, completion_ids)) * distilled
    token_data = {"teacher_logprobs": teacher_logprobs, "distilled": distilled}
    if old is not None:  # the harness's old log-probs exist when a step has several updates
        token_data["old_logprobs"] = widen(old) * eligible
    reference = token_data.get("old_logprobs", logprobs.detach())
    surrogate, _ = policy_loss(logprobs, reference, advantages[:, None] * eligible, eligible, UpdateArgs())
    module = SimpleNamespace(distillation_weight=weight, distillation_is_clip=is_clip)
    return SDPO.policy_objective(module, SimpleNamespace(token_data=token_data), logprobs, surrogate)


@pytest.mark.parametrize("weight", [1.0, 0.0, 0.3])
@pytest.mark.parametrize("is_clip", [2.0, 0.5, None])
@pytest.mark.parametrize("with_old", [True, False])
def test_loss_and_gradient_match_trls_compute_loss(weight, is_clip, with_old):
    inputs = list(loss_inputs(seed=int(weight * 10) + 7))
    inputs[5] = inputs[5] if with_old else None
    student = inputs[3]
    expected, metrics = trl_loss(weight, is_clip, *inputs)
    (expected_grad,) = torch.autograd.grad(expected, student)
    ours, stats = our_loss(weight, is_clip, *inputs)
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


def test_the_clip_changes_the_loss_here():
    """The inputs above are ones where the clip matters: a clip of 2 or 0.5 is not a no-op."""
    inputs = loss_inputs(seed=17)
    unclipped, _ = our_loss(1.0, None, *inputs)
    for is_clip in (2.0, 0.5):
        clipped, _ = our_loss(1.0, is_clip, *inputs)
        assert not torch.isclose(clipped, unclipped)


def test_no_teacher_anywhere_gives_a_zero_loss_and_gradient_as_trls():
    inputs = loss_inputs(seed=3, no_teacher=True)
    expected, _ = trl_loss(1.0, 2.0, *inputs)
    ours, _ = our_loss(1.0, 2.0, *inputs)
    (grad,) = torch.autograd.grad(ours, inputs[3])
    assert ours.item() == expected.item() == 0.0 and not grad.any()


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


REPROMPTS = [
    Reprompt(),
    Reprompt(include_environment_feedback=False),
    Reprompt(environment_feedback_only_without_solution=True),
    Reprompt(dont_reprompt_on_self_success=False, success_reward_threshold=0.5),
    Reprompt(use_successful_as_teacher=False),
    Reprompt(max_reprompt_len=12, reprompt_template="<{solution}|{feedback}>{prompt}"),
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
        ("ema", Reprompt()),
        ("base", Reprompt(environment_feedback_only_without_solution=True)),
        ("live", Reprompt(include_environment_feedback=False)),
    ],
)
def test_credit_scores_each_rollout_under_the_teacher_on_trls_teacher_inputs(policy, kind, reprompt):
    """The teacher's log-probs of each rollout's tokens at the sampling temperature, as a plain
    forward pass of the teacher over TRL's teacher row (its padding removed) gives them; the
    teacher of `ema` and `base` is a model of its own (here made to differ from the policy)."""
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
    scores, distilled = rollouts.token_data["teacher_logprobs"], rollouts.token_data["distilled"]
    assert torch.equal(distilled, rollouts.eligible & output["self_distillation_mask"].bool()[:, None])
    for i, row in enumerate(rows):
        n = int(rollouts.eligible[i].sum())
        with torch.no_grad():
            logits = teacher(input_ids=row[None]).logits[0, -n - 1 : -1] / 0.7
        expected = selective_log_softmax(logits, row[-n:]) * distilled[i][rollouts.eligible[i]]
        torch.testing.assert_close(scores[i][rollouts.eligible[i]], expected, rtol=1e-5, atol=1e-5)
        assert not scores[i][~distilled[i]].any()


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
        ({"distillation_is_clip": 0.0}, "distillation_is_clip: must be > 0"),
        ({"teacher_update_rate": 0.0}, "teacher_update_rate: must be in (0, 1]"),
        ({"teacher_update_rate": 1.5}, "teacher_update_rate: must be in (0, 1]"),
        ({"teacher_sync_steps": 0}, "teacher_sync_steps: must be >= 1"),
        ({"scoring_tokens": 0}, "scoring_tokens: must be >= 1"),
        ({"group_size": 1}, "group_size: must be >= 2 (got 1)"),
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


def test_defaults_are_trls_but_for_the_feedback_and_the_wording():
    trl = {f.name: f.default for f in fields(SDPOConfig)}
    own = {k: p.default for k, p in inspect.signature(SDPO.__init__).parameters.items() if k in trl}
    reprompt = {k: v for k, v in asdict(Reprompt()).items() if k in trl and not k.endswith("_template")}
    assert reprompt.pop("include_environment_feedback") and not trl["include_environment_feedback"]
    assert len(own) == 6 and len(reprompt) == 5 and own | reprompt == {k: trl[k] for k in own | reprompt}
    SDPO.check_args(own)


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
