"""SDPO: Self-Distillation Policy Optimization. G rollouts per prompt; the policy is distilled
toward itself reading privileged context (a successful rollout of the same group, or the
verifier's feedback on a failure), optionally blended with GRPO's policy gradient.

Rollout y_i of prompt x, verdict (r_i, f_i). The teacher context c_i, as the paper's code builds
it (`Reprompt`, `teacher_contexts`): the group's first success other than y_i itself (r_j >=
`success_reward_threshold`) as the solution; the feedback f_i only when y_i failed and no
solution is shown. A rollout with neither has no teacher and is not distilled; D_i is the
eligible tokens of one that has. At each distilled token t, at the sampling temperature,

    S_t = pi_theta( . | x, y_<t)                  student, with gradient
    T_t = pi_teacher( . | c_i, x, y_<t)           teacher, no gradient
    l_t = D_alpha(S_t, T_t) on the student's top-k tokens plus one tail bucket
          (alpha 0: KL(T||S), 1: KL(S||T), between: (1-a) KL(S||M) + a KL(T||M), M = (1-a) S + a T)
          * min(pi_theta(y_t) / pi_old(y_t), is_clip).detach()    when a step has several updates
    L_distill = sum of l_t over the mini-batch's distilled tokens / their number
    loss = (1 - distillation_weight) * L_policy + distillation_weight * L_distill

with L_policy the shared clipped surrogate on GRPO's advantages (the paper's runs use the
distillation alone, `distillation_weight` 1). The teacher scores each mini-batch as the update
reaches it: an EMA of the policy (`ema`, rate `teacher_update_rate` after every
`teacher_sync_steps` optimizer updates; the paper's code moves it once a step, the same at one
update a step), the starting policy (`base`) or the policy as it is (`live`).

TRL's SDPOTrainer is the same method with other defaults, each a setting here: the sampled-token
objective l_t = (log S_t(y_t) - log T_t(y_t)).detach() * log S_t(y_t) (`distillation_mode:
sampled_token`, alpha 1), a mean over rollouts of each one's token-mean (`distillation_aggregation:
sequence-mean`), feedback shown beside a solution and on successes
(`Reprompt(environment_feedback_only_without_solution=False, feedback_on_success=True)`).

Paper: Hübotter et al., "Reinforcement Learning via Self-Distillation", arXiv:2601.20802 (2026).
References: the paper's code (lasgroup/SDPO 0e6d510: `compute_self_distillation_loss` in
verl/trainer/ppo/core_algos.py, `_maybe_build_self_distillation_batch` in
verl/trainer/ppo/ray_trainer.py, the defaults in verl/trainer/config/actor/actor.yaml), transcribed
in tests/test_sdpo.py; TRL 1.16.0's `SDPOTrainer` (trl.experimental.sdpo), called there.

Teacher context. The paper's code writes it after the prompt in the user turn; here it is a
plain-text block in front of the rollout's prompt, so that prompt and completion keep the tokens
they were sampled with (a tiny model has no chat turn to put it in). Rendered (math, G = 4, rollout
2 wrong, rollout 1 the group's first success):

    Correct solution:
     3*9=27 14-27=-13 #### -13
    Correctly solve the original question.
    Q: 14-3*9
    A: 3*9=27 14-27=-12 #### -12<eos>     <- rollout 2's own tokens, the scored ones

A model reads this block only if something taught it to: `warm_start.teach: {algorithms.sdpo.SDPO:
{fraction: ...}}` lays that share of the warm start's examples out this way (`TeacherTeaching`,
`teacher_example`), and the probe recorded each step (`self_distillation/probe_logprob_gain`) is
the policy's mean log-prob gain on a successful rollout's own tokens when the block shows that
rollout as the solution: about 0 for a model that ignores the block, up to
`self_distillation/probe_headroom` (their mean -log p without the block) for one that copies from it.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import random
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from torch import Tensor

from algorithms.grpo import GRPO
from algorithms.hp_rlvr import completion_tokens, corrected_targets, next_token_hidden, slip_of
from algorithms.settings import GroupSize
from algorithms.teaching import Teaching
from rollout.batch import Rollouts, as_text, left_padded, position_ids, solved
from rollout.decoding import eval_mode
from rollout.ranges import PositiveFloat, PositiveInt, Probability, Range, UnitInterval, check_fields
from rollout.scoring import token_logprobs
from rollout.sharding import FSDP2, gathered, is_sharded, trunk

PROMPT = "{prompt}"
RatioCap = Annotated[float, Range(1)]
"""At least 1: a cap below it would scale every token of an on-policy step down (the paper's code
does so, TRL's does not without old log-probs); at 1 or more the two agree."""


@dataclass
class Reprompt:
    """Which rollouts get a teacher context and how it reads. Defaults: the paper's code (its
    actor.yaml), but for the threshold (ours is `rollout.batch.solved`'s; the paper's 0.5 is the
    same on a 0/1 reward) and the block's place before the prompt."""

    success_reward_threshold: UnitInterval = 1.0
    """A rollout with at least this reward is a success, shown to the others of its group."""
    use_successful_as_teacher: bool = True
    dont_reprompt_on_self_success: bool = True
    """A success is never shown its own completion as the solution."""
    include_environment_feedback: bool = True
    """Show the verifier's feedback (False: the paper's scalar-reward setting, solutions only)."""
    environment_feedback_only_without_solution: bool = True
    """Feedback only where no solution is shown (the paper's; TRL's default shows both)."""
    feedback_on_success: bool = False
    """Show a success's own feedback. The paper's verifiers give none on a success; ours do
    ("correct", "won in 4 turns"), which TRL's rule would distil a lone success toward."""
    reprompt_template: str = "{solution}{feedback}Correctly solve the original question.\n{prompt}"
    """Must end with {prompt}: the block goes before the rollout's own prompt tokens."""
    solution_template: str = "Correct solution:\n{successful_previous_attempt}\n"
    feedback_template: str = "The following is feedback from your unsuccessful earlier attempt:\n{feedback_raw}\n"
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
    is shown). Neither: no teacher."""
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
            and (reprompt.feedback_on_success or rewards[i] < reprompt.success_reward_threshold)
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
    token at (`teacher_rows[k]`, `teacher_cols[k]`) is the one at (`rows[k]`, `cols[k]`) of the
    batch; k runs over the rollouts' eligible tokens in row-major order."""

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
            said = as_text(rollouts.verdicts[i].feedback, tokenizer) if feedback else None
            texts.append(render_context(reprompt, shown, said))
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


def logits_at(
    model, input_ids: Tensor, attention_mask: Tensor, rows: Tensor, cols: Tensor, temperature: float, slots: int
) -> Tensor:
    """[M, V] float32 next-token logits / T that predict the tokens at (rows, cols), without
    gradient, in passes of at most `slots` token slots: only those hidden states are projected."""
    hidden = next_token_hidden(model, input_ids, attention_mask, rows, cols, slots)
    return model.get_output_embeddings()(hidden).float() / temperature


# ---- the objective, per distilled token


def with_tail(logprobs: Tensor) -> Tensor:
    """Top-k log-probs [..., k] and one more bucket holding the mass they leave out."""
    captured = logprobs.logsumexp(-1, keepdim=True).clamp(max=-1e-7)
    return torch.cat([logprobs, torch.log(-torch.expm1(captured))], -1)


def divergence(student: Tensor, teacher: Tensor, alpha: float) -> Tensor:
    """D_alpha over the last dim of two log-prob tensors (module docstring): alpha 0 the forward
    KL(T||S), 1 the reverse KL(S||T), between the generalised Jensen-Shannon divergence."""
    if alpha == 0.0:
        return (teacher.exp() * (teacher - student)).sum(-1)
    if alpha == 1.0:
        return (student.exp() * (student - teacher)).sum(-1)
    mixture = torch.logaddexp(student + math.log(1 - alpha), teacher + math.log(alpha))
    to_mixture = lambda p: p.exp() * (p - mixture)  # noqa: E731
    return ((1 - alpha) * to_mixture(student) + alpha * to_mixture(teacher)).sum(-1)


def token_divergence(
    student_logits: Tensor,
    teacher_logits: Tensor,
    realized: Tensor,
    mode: str,
    alpha: float,
    topk: int | None,
    add_tail: bool,
) -> Tensor:
    """[M] per-token distillation loss l_t from [M, V] logits (already at the temperature) and the
    [M] realized tokens."""
    student, teacher = student_logits.log_softmax(-1), teacher_logits.log_softmax(-1)
    if mode == "sampled_token":  # gradient of l_t: (log S - log T) * grad log S, the reverse KL's on y_t
        s, t = (lp.gather(-1, realized[:, None]).squeeze(-1) for lp in (student, teacher))
        return (s - t).detach() * s
    if mode == "topk_logits":
        support = student_logits.detach().topk(min(topk, student.shape[-1]), -1).indices  # the student's top k
        student, teacher = student.gather(-1, support), teacher.gather(-1, support)
        if add_tail:
            student, teacher = with_tail(student), with_tail(teacher)
        else:  # the divergence of the two distributions conditioned on the support
            student, teacher = student.log_softmax(-1), teacher.log_softmax(-1)
    return divergence(student, teacher, alpha)


def aggregate(per_token: Tensor, rows: Tensor, rollouts: int, aggregation: str) -> Tensor:
    """The distillation loss from the [K] losses of the distilled tokens, `rows` [K] their rollout:
    `token-mean` over the tokens (the paper's), or `sequence-mean`, the mean over all `rollouts`
    of each one's token-mean, 0 for a rollout without a teacher (TRL's)."""
    if aggregation == "token-mean":
        return per_token.sum() / max(len(per_token), 1)
    sums = per_token.new_zeros(rollouts).index_add(0, rows, per_token)
    counts = per_token.new_zeros(rollouts).index_add(0, rows, torch.ones_like(per_token))
    return (sums / counts.clamp(min=1)).mean()


# ---- the warm start's examples of the teacher's block


def teacher_example(task, problem, tokenizer, reprompt: Reprompt, rng: random.Random) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of one warm-start example in the teacher's layout, labels -100 off the
    completion. Half the time the completion is a corrupted attempt (`Task.corrupt`), labelled
    up to its first wrong token, which is labelled with the demonstration's (what follows a wrong
    token is not taught: it continues from the wrong value, and a label there would teach
    inconsistent arithmetic to the policy itself); its block holds either the demonstration as the
    solution or the attempt's feedback (never both, as the teacher's rule). Otherwise the
    completion is the demonstration and the block holds it."""
    prompt, right, trainable = completion_tokens(task, problem, tokenizer)
    wrong_text = task.corrupt(problem, rng) if rng.random() < 0.5 else None
    if wrong_text is None:
        realized, targets, block = right, right, render_context(reprompt, problem.demonstration, None)
    else:
        _, realized, trainable = completion_tokens(
            task, dataclasses.replace(problem, demonstration=wrong_text), tokenizer
        )
        slip = slip_of(realized, right)
        targets = corrected_targets(realized, right)
        trainable = [keep and t <= slip for t, keep in enumerate(trainable)]
        if rng.random() < 0.5:
            block = render_context(reprompt, problem.demonstration, None)
        else:
            block = render_context(reprompt, None, task.verify_trusted(problem, wrong_text).feedback)
    prefix = (tokenizer(block, add_special_tokens=False).input_ids + prompt)[-reprompt.max_reprompt_len :]
    labels = [target if keep else -100 for target, keep in zip(targets, trainable)]
    return prefix + realized, [-100] * len(prefix) + labels


@dataclass
class TeacherTeaching(Teaching):
    """The warm start's examples in the teacher's layout (`teacher_example`), so that a tiny model
    learns to read the teacher block: `model.warm_start.teach: {algorithms.sdpo.SDPO: {fraction: 0.2}}`."""

    def example(self, task, problem, tokenizer, rng: random.Random) -> tuple[list[int], list[int]]:
        return teacher_example(task, problem, tokenizer, Reprompt(), rng)

    def key(self) -> dict:
        # its name in the warm start's own settings; left out at 0, as before it existed
        return {"teacher_fraction": self.fraction} if self.fraction else {}

    def templates(self) -> dict:
        return {"teacher_template": dataclasses.asdict(Reprompt())} if self.fraction > 0 else {}


def check_sampled_token(mode: str, alpha: float) -> None:
    """The sampled-token objective is the reverse KL alone: it takes no other alpha."""
    if mode == "sampled_token" and alpha != 1.0:
        raise ValueError(f"distillation_alpha: sampled_token is the reverse KL alone, 1.0 (got {alpha})")


class SDPO(GRPO):
    teaching = TeacherTeaching

    def __init__(
        self,
        group_size: GroupSize = 8,
        scale_by_std: bool = True,
        eps: PositiveFloat = 1e-4,
        distillation_weight: UnitInterval = 1.0,
        distillation_mode: Literal["topk_logits", "full_logits", "sampled_token"] = "topk_logits",
        distillation_topk: PositiveInt = 100,
        distillation_add_tail: bool = True,
        distillation_alpha: UnitInterval = 0.5,
        distillation_aggregation: Literal["token-mean", "sequence-mean"] = "token-mean",
        distillation_is_clip: RatioCap | None = 2.0,
        teacher_model_kind: Literal["ema", "base", "live"] = "ema",
        teacher_update_rate: Probability = 0.05,
        teacher_sync_steps: PositiveInt = 1,
        reprompt: Reprompt | dict | None = None,
        probe_rollouts: PositiveInt = 8,
        scoring_tokens: PositiveInt = 2048,
        **base,
    ):
        """distillation_weight: the distillation loss's share (1: distillation alone, the paper's;
        0: GRPO). distillation_mode, _topk, _add_tail, _alpha, _aggregation: the objective (module
        docstring; defaults the paper's code's, TRL's are sampled_token, alpha 1, sequence-mean).
        distillation_is_clip: cap of the importance ratio on the distillation loss (None: none).
        teacher_model_kind, teacher_update_rate, teacher_sync_steps: the teacher. reprompt: the
        teacher context (`Reprompt`). probe_rollouts: successes a step the probe reads.
        scoring_tokens: token slots in one student or teacher pass (`next_token_hidden`)."""
        super().__init__(group_size=group_size, scale_by_std=scale_by_std, eps=eps, **base)
        check_sampled_token(distillation_mode, distillation_alpha)
        self.distillation_weight, self.distillation_is_clip = distillation_weight, distillation_is_clip
        self.distillation_mode, self.distillation_topk = distillation_mode, distillation_topk
        self.distillation_add_tail, self.distillation_alpha = distillation_add_tail, distillation_alpha
        self.distillation_aggregation = distillation_aggregation
        self.teacher_model_kind = teacher_model_kind
        self.teacher_update_rate, self.teacher_sync_steps = teacher_update_rate, teacher_sync_steps
        self.reprompt = Reprompt(**reprompt) if isinstance(reprompt, dict) else reprompt or Reprompt()
        self.probe_rollouts, self.scoring_tokens = probe_rollouts, scoring_tokens
        # Its own copy for `ema` and `base` (saved in checkpoints with the policy); `live` reads the policy.
        live = teacher_model_kind == "live"
        self.teacher = None if live else copy.deepcopy(self.policy).requires_grad_(False)
        self.optimizer_updates = 0  # counts to `teacher_sync_steps`

    @classmethod
    def check_args(cls, args):
        super().check_args(args)
        defaults = inspect.signature(cls.__init__).parameters
        check_sampled_token(
            args.get("distillation_mode", defaults["distillation_mode"].default),
            args.get("distillation_alpha", defaults["distillation_alpha"].default),
        )
        if isinstance(args.get("reprompt"), dict):
            Reprompt(**args["reprompt"])

    # ---- stage 3: GRPO's advantage (used at distillation_weight < 1), and who gets a teacher

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        advantages, stats = super().credit(rollouts)
        feedbacks = [v.feedback for v in rollouts.verdicts]
        contexts = teacher_contexts(rollouts.rewards.tolist(), feedbacks, self.group_size, self.reprompt)
        distilled = [(s is not None or f) and e for (s, f), e in zip(contexts, rollouts.eligible.any(-1).tolist())]
        n, threshold = len(rollouts), self.reprompt.success_reward_threshold
        return advantages, stats | {
            "self_distillation/success_group_fraction": float(
                (rollouts.rewards.view(-1, self.group_size) >= threshold).any(-1).float().mean()
            ),
            "self_distillation/success_sample_fraction": sum(s is not None for s, _ in contexts) / n,
            "self_distillation/feedback_available_fraction": sum(f.strip() != "" for f in feedbacks) / n,
            "self_distillation/feedback_used_fraction": sum(f for _, f in contexts) / n,
            "self_distillation/reprompt_sample_fraction": sum(distilled) / n,
        }

    # ---- stage 4: the student's logits, the teacher's on the same tokens, the distillation loss

    def score(self, batch: Rollouts) -> tuple[Tensor, dict[str, Tensor]]:
        # the teacher as it is when the update reaches this mini-batch (the references' order)
        views = self.views_of(batch)
        teacher_logits = self.teacher_logits(views)
        # the student: one pass over the mini-batch, with gradient (as the shared update's default)
        rows, cols = batch.eligible.nonzero(as_tuple=True)
        mask = batch.attention_mask
        hidden = trunk(self.policy)(
            input_ids=batch.input_ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=False
        )
        head = self.policy.get_output_embeddings()
        logits = head(hidden.last_hidden_state[rows, cols - 1]).float() / self.sampling.temperature
        picked = logits.log_softmax(-1).gather(-1, batch.input_ids[rows, cols, None]).squeeze(-1)
        logprobs = picked.new_zeros(batch.eligible.shape).index_put((rows, cols), picked)
        return logprobs, {"student_logits": logits, "teacher_logits": teacher_logits, "views": views}

    def views_of(self, batch: Rollouts) -> TeacherViews | None:
        """The teacher's inputs for a mini-batch (it holds whole groups)."""
        feedbacks = [v.feedback for v in batch.verdicts]
        contexts = teacher_contexts(batch.rewards.tolist(), feedbacks, self.group_size, self.reprompt)
        return teacher_views(batch, contexts, self.tokenizer, self.reprompt)

    @torch.no_grad()
    def teacher_logits(self, views: TeacherViews | None) -> Tensor | None:
        """[K, V] the teacher's logits / T at the views' tokens, as the teacher is now."""
        model = self.policy if self.teacher is None else self.teacher
        # gathered on every process, with views to score or none: under FSDP each then runs the
        # passes its own views need, and no pass is a collective
        with eval_mode(model), gathered(model):
            if views is None:
                return None
            rows, cols = views.teacher_rows, views.teacher_cols
            return logits_at(
                model, views.input_ids, views.attention_mask, rows, cols, self.sampling.temperature, self.scoring_tokens
            )

    def policy_objective(
        self, batch: Rollouts, logprobs: Tensor, surrogate: Tensor, outputs: dict[str, Tensor]
    ) -> tuple[Tensor, dict[str, float]]:
        student_logits = outputs["student_logits"]  # at the eligible tokens, row-major
        views, teacher_logits = outputs["views"], outputs["teacher_logits"]  # at the distilled ones
        if views is None:  # nothing to distil: a zero loss that keeps the student's graph
            distillation, token_mean, gain = student_logits.sum() * 0.0, 0.0, float("nan")
        else:
            position = torch.full(batch.eligible.shape, -1, dtype=torch.long, device=logprobs.device)
            position[batch.eligible] = torch.arange(len(student_logits), device=logprobs.device)
            student = student_logits[position[views.rows, views.cols]]
            realized = batch.input_ids[views.rows, views.cols]
            per_token = token_divergence(
                student,
                teacher_logits,
                realized,
                self.distillation_mode,
                self.distillation_alpha,
                self.distillation_topk,
                self.distillation_add_tail,
            )
            s = logprobs[views.rows, views.cols]
            old = batch.token_data.get("old_logprobs")
            old = s.detach() if old is None else old[views.rows, views.cols]
            if self.distillation_is_clip is not None:  # correct for the policy having moved since sampling
                per_token = per_token * (s - old).detach().clamp(-20.0, 20.0).exp().clamp(max=self.distillation_is_clip)
            distillation = aggregate(per_token, views.rows, batch.eligible.shape[0], self.distillation_aggregation)
            token_mean = float(per_token.detach().mean())
            teacher = token_logprobs(teacher_logits[None], realized[None])[0]
            gain = float((teacher - old).mean())  # the teacher's log-prob of y_t over the student's before the update
        w = self.distillation_weight
        stats = {
            "self_distillation/distillation_loss": token_mean,
            "self_distillation/policy_loss": float(surrogate.detach()),
            "self_distillation/logprob_gain_mean": gain,
        }
        return (1 - w) * surrogate + w * distillation, stats

    # ---- the probe: can the policy read the block at all?

    @torch.no_grad()
    def diagnostics(self, rollouts: Rollouts) -> dict[str, float]:
        eligible = rollouts.eligible.any(-1).tolist()
        shown = [i for i, r in enumerate(rollouts.rewards.tolist()) if solved(r) and eligible[i]]
        shown = shown[: self.probe_rollouts]
        if not shown:
            return {
                "self_distillation/probe_logprob_gain": float("nan"),
                "self_distillation/probe_headroom": float("nan"),
            }
        contexts = [(i, False) if i in shown else (None, False) for i in range(len(rollouts))]
        views = teacher_views(rollouts, contexts, self.tokenizer, self.reprompt)
        temperature, slots = self.sampling.temperature, self.scoring_tokens
        with eval_mode(self.policy), gathered(self.policy):
            read = logits_at(
                self.policy,
                views.input_ids,
                views.attention_mask,
                views.teacher_rows,
                views.teacher_cols,
                temperature,
                slots,
            )
            plain = logits_at(
                self.policy, rollouts.input_ids, rollouts.attention_mask, views.rows, views.cols, temperature, slots
            )
        realized = rollouts.input_ids[views.rows, views.cols][None]
        before = token_logprobs(plain[None], realized)[0]
        gain = token_logprobs(read[None], realized)[0] - before
        return {
            "self_distillation/probe_logprob_gain": float(gain.mean()),
            # the most a block could add: -log p of the same tokens without it
            "self_distillation/probe_headroom": float(-before.mean()),
        }

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
