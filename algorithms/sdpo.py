"""SDPO: Self-Distillation Policy Optimization. G rollouts per prompt; the policy is distilled
toward itself reading privileged context (a successful rollout of the same group, the verifier's
feedback), blended with GRPO's policy gradient.

Rollout y_i of prompt x, verdict (r_i, f_i), group advantage A_i (GRPO's, the credit). Rollout i
gets a teacher context c_i when its group holds a successful rollout other than itself (r_j >=
`success_reward_threshold`; the first such j in group order is the solution) or its feedback f_i
is non-empty (`Reprompt` holds TRL's switches of this rule); the distilled tokens D are its
eligible tokens then, none otherwise. Then

    s_t = log pi_theta(y_t | x, y_<t)                current policy, with gradient
    q_t = log pi_teacher(y_t | c_i, x, y_<t)         teacher, no gradient (scored in `credit`)
    l_t = (s_t - q_t).detach() * s_t                 sampled-token reverse KL (alpha = 1)
          * min(exp(s_t - s_old_t), is_clip).detach()    when a step has several updates
    L_distill = mean over the mini-batch's rollouts of (sum_{t in D_i} l_t / |D_i|)
    loss = (1 - distillation_weight) * L_policy + distillation_weight * L_distill

with L_policy the shared clipped surrogate on A_i. The teacher is an EMA of the policy (`ema`,
rate `teacher_update_rate` after every `teacher_sync_steps` optimizer updates), the starting
policy (`base`) or the policy that sampled (`live`). It scores the rollouts once, in `credit`,
as the step begins; with several updates a step TRL scores each mini-batch under the teacher as it
is by then (the EMA one sync further on, `live` the updated policy).

Paper: Hübotter et al., "Reinforcement Learning via Self-Distillation", arXiv:2601.20802 (2026).
Checked against TRL 1.16.0's `SDPOTrainer` (trl.experimental.sdpo) on identical inputs
(tests/test_sdpo.py): its loss, importance-sampling clip, aggregation, blend, EMA update and
`SuccessfulRolloutTeacherContextBuilder`'s choice of teacher contexts.

Teacher context. TRL writes the context after the prompt in the user turn; here it is a
plain-text block in front of the rollout's prompt, so that prompt and completion keep the tokens
they were sampled with (a tiny model has no chat turn to put it in). Rendered (math, G = 4, rollout
2 wrong, rollout 1 the group's first success):

    Correct solution:
     3*9=27 14-27=-13 #### -13
    Feedback on your earlier attempt:
    wrong: expected -13; step 2 should give -13
    Correctly solve the question.
    Q: 14-3*9
    A: 3*9=27 14-27=-12 #### -12<eos>     <- rollout 2's own tokens, the scored ones
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from algorithms.grpo import GRPO
from algorithms.hp_rlvr import next_token_hidden
from algorithms.settings import GroupSize
from rollout.batch import Rollouts, left_padded
from rollout.decoding import eval_mode
from rollout.ranges import PositiveFloat, PositiveInt, Probability, UnitInterval, check_fields
from rollout.scoring import masked_mean, token_logprobs
from rollout.sharding import FSDP2, gathered, is_sharded

PROMPT = "{prompt}"


@dataclass
class Reprompt:
    """Which rollouts get a teacher context and how it reads (TRL's reprompting arguments)."""

    success_reward_threshold: UnitInterval = 1.0
    """A rollout with at least this reward is a success, shown to the others of its group."""
    use_successful_as_teacher: bool = True
    dont_reprompt_on_self_success: bool = True
    """A success is never shown its own completion as the solution."""
    include_environment_feedback: bool = True
    """Show the rollout's own verifier feedback (TRL's default is False: its feedback is an
    optional dataset column; our verifiers always give one, and the method is defined by it)."""
    environment_feedback_only_without_solution: bool = False
    reprompt_template: str = "{solution}{feedback}Correctly solve the question.\n{prompt}"
    """Must end with {prompt}: the block goes before the rollout's own prompt tokens."""
    solution_template: str = "Correct solution:\n{successful_previous_attempt}\n"
    feedback_template: str = "Feedback on your earlier attempt:\n{feedback_raw}\n"
    max_reprompt_len: PositiveInt = 10240
    """The block and prompt keep their last this many tokens (the scored tokens are never cut)."""

    def __post_init__(self):
        check_fields(self)
        if not self.reprompt_template.endswith(PROMPT) or self.reprompt_template.count(PROMPT) != 1:
            raise ValueError(f"reprompt_template: must end with {PROMPT}, once (got {self.reprompt_template!r})")
        for name, fields in (
            ("reprompt_template", {"solution": "", "feedback": "", "prompt": ""}),
            ("solution_template", {"successful_previous_attempt": ""}),
            ("feedback_template", {"feedback_raw": ""}),
        ):
            try:
                getattr(self, name).format(**fields)
            except (KeyError, IndexError, ValueError) as error:
                raise ValueError(f"{name}: must use only {{{'}, {'.join(fields)}}} ({error!r})") from None


def teacher_contexts(
    rewards: list[float], feedbacks: list[str], group_size: int, reprompt: Reprompt
) -> list[tuple[int | None, bool]]:
    """Per rollout (the index of the rollout shown as its solution or None, whether its feedback
    is shown): TRL's `SuccessfulRolloutTeacherContextBuilder` rule. Neither: no teacher."""
    contexts = []
    for i, feedback in enumerate(feedbacks):
        group = range(i - i % group_size, i - i % group_size + group_size)
        successes = [
            j
            for j in group
            if reprompt.use_successful_as_teacher
            and rewards[j] >= reprompt.success_reward_threshold
            and not (reprompt.dont_reprompt_on_self_success and j == i)
        ]
        solution = successes[0] if successes else None
        use_feedback = (
            reprompt.include_environment_feedback
            and feedback.strip() != ""
            and not (reprompt.environment_feedback_only_without_solution and solution is not None)
        )
        contexts.append((solution, use_feedback))
    return contexts


def render_context(reprompt: Reprompt, solution: str | None, feedback: str | None) -> str:
    """The block's text (the reprompt template up to its {prompt})."""
    solution_text = "" if solution is None else reprompt.solution_template.format(successful_previous_attempt=solution)
    feedback_text = "" if feedback is None else reprompt.feedback_template.format(feedback_raw=feedback)
    return reprompt.reprompt_template.removesuffix(PROMPT).format(solution=solution_text, feedback=feedback_text)


@dataclass
class TeacherViews:
    """One row per rollout with a teacher context: block, prompt, and the rollout's tokens. The
    token at (`teacher_rows[k]`, `teacher_cols[k]`) is the one at (`rows[k]`, `cols[k]`) of the batch."""

    input_ids: Tensor
    attention_mask: Tensor
    rows: Tensor
    cols: Tensor
    teacher_rows: Tensor
    teacher_cols: Tensor


def teacher_views(
    rollouts: Rollouts, contexts: list[tuple[int | None, bool]], tokenizer, reprompt: Reprompt
) -> TeacherViews | None:
    """The teacher's inputs (None when no rollout has a teacher context)."""
    has_tokens = rollouts.eligible.any(-1).tolist()
    chosen, texts = [], []
    for i, (solution, feedback) in enumerate(contexts):
        if (solution is not None or feedback) and has_tokens[i]:
            shown = None if solution is None else rollouts.completions[solution]
            chosen.append(i)
            texts.append(render_context(reprompt, shown, rollouts.verdicts[i].feedback if feedback else None))
    if not chosen:
        return None
    blocks = tokenizer(texts, add_special_tokens=False).input_ids  # one call for the step
    ids_of, mask_of, eligible_of = (
        t.tolist() for t in (rollouts.input_ids, rollouts.attention_mask, rollouts.eligible)
    )
    sequences, pairs = [], []  # pairs: (row, col, teacher row, teacher col before left padding)
    for i, block in zip(chosen, blocks):
        ids, attended = ids_of[i], mask_of[i]
        cols = [c for c, e in enumerate(eligible_of[i]) if e]
        end = max(c for c, m in enumerate(attended) if m) + 1
        prefix = (block + [ids[c] for c in range(cols[0]) if attended[c]])[-reprompt.max_reprompt_len :]
        pairs += [(i, c, len(sequences), c - cols[0] + len(prefix)) for c in cols]
        sequences.append(prefix + ids[cols[0] : end])
    input_ids, attention_mask = left_padded(sequences, tokenizer.pad_token_id, rollouts.input_ids.device)
    width = input_ids.shape[1]
    rows, cols, teacher_rows, teacher_cols = torch.tensor(pairs, device=input_ids.device).unbind(-1)
    shift = width - torch.tensor([len(s) for s in sequences], device=input_ids.device)
    return TeacherViews(input_ids, attention_mask, rows, cols, teacher_rows, teacher_cols + shift[teacher_rows])


def distillation_loss(
    logprobs: Tensor, teacher_logprobs: Tensor, distilled: Tensor, old: Tensor | None, is_clip: float | None
) -> tuple[Tensor, Tensor]:
    """(the loss: mean over rollouts of each one's mean over its distilled tokens, the token-mean
    for the record), TRL's sampled-token objective; [n, L] inputs, `distilled` bool."""
    per_token = (logprobs - teacher_logprobs).detach() * logprobs  # gradient s - q: the reverse KL's
    if is_clip is not None and old is not None:  # correct for the policy having moved since sampling
        per_token = per_token * (logprobs - old).detach().clamp(-20.0, 20.0).exp().clamp(max=is_clip)
    return masked_mean(per_token, distilled, -1).mean(), masked_mean(per_token.detach(), distilled)


class SDPO(GRPO):
    def __init__(
        self,
        group_size: GroupSize = 8,
        scale_by_std: bool = True,
        eps: PositiveFloat = 1e-4,
        distillation_weight: UnitInterval = 1.0,
        distillation_mode: Literal["sampled_token"] = "sampled_token",
        distillation_is_clip: PositiveFloat | None = 2.0,
        teacher_model_kind: Literal["ema", "base", "live"] = "ema",
        teacher_update_rate: Probability = 0.05,
        teacher_sync_steps: PositiveInt = 1,
        reprompt: Reprompt | dict | None = None,
        scoring_tokens: PositiveInt = 2048,
        **base,
    ):
        """distillation_weight: the distillation loss's share (1: distillation alone, TRL's default;
        0: GRPO). distillation_is_clip: cap of the importance ratio on the distillation loss (None:
        none). teacher_model_kind, teacher_update_rate, teacher_sync_steps: the teacher (module
        docstring). reprompt: the teacher context (`Reprompt`). scoring_tokens: token slots in one
        teacher pass (`next_token_hidden`)."""
        super().__init__(group_size=group_size, scale_by_std=scale_by_std, eps=eps, **base)
        self.distillation_weight, self.distillation_is_clip = distillation_weight, distillation_is_clip
        self.distillation_mode, self.teacher_model_kind = distillation_mode, teacher_model_kind
        self.teacher_update_rate, self.teacher_sync_steps = teacher_update_rate, teacher_sync_steps
        self.reprompt = Reprompt(**reprompt) if isinstance(reprompt, dict) else reprompt or Reprompt()
        self.scoring_tokens = scoring_tokens
        # Its own copy for `ema` and `base` (saved in checkpoints with the policy); `live` reads the policy.
        live = teacher_model_kind == "live"
        self.teacher = None if live else copy.deepcopy(self.policy).requires_grad_(False)
        self.optimizer_updates = 0  # counts to `teacher_sync_steps`

    @classmethod
    def check_args(cls, args):
        super().check_args(args)
        if isinstance(args.get("reprompt"), dict):
            Reprompt(**args["reprompt"])

    # ---- stage 3: GRPO's advantage, and the teacher's log-probs of the rollouts' tokens

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        advantages, stats = super().credit(rollouts)
        feedbacks = [v.feedback for v in rollouts.verdicts]
        contexts = teacher_contexts(rollouts.rewards.tolist(), feedbacks, self.group_size, self.reprompt)
        teacher, distilled = self.teacher_logprobs(rollouts, contexts)
        rollouts.token_data["teacher_logprobs"], rollouts.token_data["distilled"] = teacher, distilled
        n, threshold = len(rollouts), self.reprompt.success_reward_threshold
        return advantages, stats | {
            "self_distillation/success_group_fraction": float(
                (rollouts.rewards.view(-1, self.group_size) >= threshold).any(-1).float().mean()
            ),
            "self_distillation/success_sample_fraction": sum(s is not None for s, _ in contexts) / n,
            "self_distillation/feedback_available_fraction": sum(f.strip() != "" for f in feedbacks) / n,
            "self_distillation/feedback_used_fraction": sum(f for _, f in contexts) / n,
            "self_distillation/reprompt_sample_fraction": float(distilled.any(-1).float().mean()),
            # the teacher's log-prob over the sampler's: the per-token signal the distillation follows
            "self_distillation/logprob_gain_mean": float(masked_mean(teacher - rollouts.sample_logprobs, distilled)),
        }

    @torch.no_grad()
    def teacher_logprobs(self, rollouts: Rollouts, contexts: list[tuple[int | None, bool]]) -> tuple[Tensor, Tensor]:
        """([N, L] teacher log-probs of the distilled tokens at the sampling temperature, 0
        elsewhere; [N, L] bool: the distilled tokens, TRL's loss_mask)."""
        teacher = torch.zeros(rollouts.input_ids.shape, device=rollouts.input_ids.device)
        distilled = torch.zeros_like(rollouts.eligible)
        views = teacher_views(rollouts, contexts, self.tokenizer, self.reprompt)
        model = self.policy if self.teacher is None else self.teacher
        # gathered on every process, with views to score or none: under FSDP each then runs the
        # passes its own views need, and no pass is a collective
        with eval_mode(model), gathered(model):
            if views is None:
                return teacher, distilled
            rows, cols, slots = views.teacher_rows, views.teacher_cols, self.scoring_tokens
            hidden = next_token_hidden(model, views.input_ids, views.attention_mask, rows, cols, slots)
            head, realized = model.get_output_embeddings(), rollouts.input_ids[views.rows, views.cols]
            for k in range(0, len(realized), 1024):  # a chunk of positions projected to the vocabulary at a time
                at = slice(k, k + 1024)
                picked = token_logprobs(head(hidden[at])[None], realized[at][None], self.sampling.temperature)[0]
                teacher[views.rows[at], views.cols[at]] = picked
        distilled[views.rows, views.cols] = True
        return teacher, distilled

    # ---- stage 4: the distillation term blended into the shared surrogate

    def policy_objective(self, batch: Rollouts, logprobs: Tensor, surrogate: Tensor) -> tuple[Tensor, dict[str, float]]:
        distillation, token_mean = distillation_loss(
            logprobs,
            batch.token_data["teacher_logprobs"],
            batch.token_data["distilled"],
            batch.token_data.get("old_logprobs"),
            self.distillation_is_clip,
        )
        w = self.distillation_weight
        stats = {
            "self_distillation/distillation_loss": float(token_mean),
            "self_distillation/policy_loss": float(surrogate.detach()),
        }
        return (1 - w) * surrogate + w * distillation, stats

    # ---- the EMA teacher: updated after every optimizer update, sharded and saved like the policy

    def configure_optimizers(self):
        optimizers, schedulers = super().configure_optimizers()
        if self.teacher_model_kind == "ema":
            optimizers[0].register_step_post_hook(lambda *_: self.after_update())
        return optimizers, schedulers

    @torch.no_grad()
    def after_update(self) -> None:
        self.optimizer_updates += 1
        if self.optimizer_updates % self.teacher_sync_steps == 0:
            rate = self.teacher_update_rate
            for target, source in zip(self.teacher.parameters(), self.policy.parameters(), strict=True):
                target.mul_(1.0 - rate).add_(source, alpha=rate)  # TRL's SyncRefModelCallback, as written

    def configure_model(self) -> None:
        super().configure_model()
        strategy = self.trainer.strategy
        if self.teacher is not None and isinstance(strategy, FSDP2) and not is_sharded(self.teacher):
            strategy.shard(self.teacher)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["rlvr"]["optimizer_updates"] = self.optimizer_updates

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self.optimizer_updates = checkpoint["rlvr"]["optimizer_updates"]
