"""HP-RLVR: Hindsight-Privileged RLVR (single rollout, hindsight token credit).

One rollout y = y_1..y_T per prompt x, verdict (r, f). The generating snapshot pi_old scores
each eligible token twice:

    causal view     p_t = pi_old( . | x, y_<t)
    hindsight view  q_t = pi_old( . | H_s, x, y_<t)      t in segment s of K contiguous segments

where the privileged block H_s holds what the rollout did after segment s and the verifier's
feedback, never segment s itself (a token in its own context would just be copied). Then

    w_t = JSD(p_t, q_t) / ln 2                     in [0, 1]
    b(x) = historical baseline (earlier steps only)
    A_t = w_t * (r - b(x))   on eligible tokens    |A_t| <= 1

and the shared clipped surrogate does the rest. No reference solution, no critic.
Sections below follow that order: arguments, the weight, the hindsight view, the baseline,
the credit, and the warm-start examples that teach a tiny model to read the block.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import asdict, dataclass, field
from typing import Annotated, Literal

import torch
from torch import Tensor

from algorithms.base import RLVRModule
from algorithms.teaching import Teaching
from rollout import distributed
from rollout.batch import Rollouts, as_text, left_padded, position_ids, solved
from rollout.decoding import eval_mode
from rollout.ranges import NonNegativeFloat, PositiveFloat, PositiveInt, Range, UnitInterval, check_fields
from rollout.scoring import masked_mean
from rollout.sharding import gathered, trunk

# Module-level alias so tests can monkeypatch `algorithms.hp_rlvr.F` to watch the chunking.
F = torch.nn.functional

_LN2 = math.log(2.0)


# ---- Arguments


@dataclass
class HindsightTemplate:
    """Text around the privileged block, which goes before the prompt so that the scored tokens
    keep their positions relative to the prompt. Rendered (math task, segment 1 of 2 scored):

        Later: 14-27=-12 #### -12 Verdict: wrong: expected -13; step 2 should give -13
        Q: 14-3*9
        A: 3*9=27|  -> the tokens of " 14-27=-12 ..." before the block's part are scored here

    Short on purpose: a character-level tiny model pays one token per character.
    """

    open: str = "Later:"
    feedback: str = " Verdict: "
    close: str = "\n"
    truncated: str = " ..."
    max_future_tokens: PositiveInt = 256
    """A longer future keeps its first tokens and ends with `truncated`; scored tokens are never cut."""

    def __post_init__(self):
        check_fields(self)


@dataclass
class HindsightTeaching(Teaching):
    """The warm start's examples in the hindsight layout (`hindsight_example`), so that a tiny
    model learns to read the block: `model.warm_start.teach: {algorithms.hp_rlvr.HPRLVR:
    {fraction: 0.3}}`."""

    segments: PositiveInt = 4
    """The segments a demonstration is cut into, one of them scored, as HP-RLVR's `segments` cuts a
    rollout: the base reads the blocks of the K a suite's HP-RLVR will use."""
    feedback: list[str] = field(default_factory=lambda: ["full"])
    """What of the verdict the examples' blocks hold (HP-RLVR's `feedback`), one drawn per example:
    a base meant for the feedback ablation reads every mode it will be given."""

    def __post_init__(self):
        super().__post_init__()
        modes = ("full", "outcome", "none")
        if not self.feedback or any(m not in modes for m in self.feedback):
            raise ValueError(f"feedback: expected a list of {', '.join(modes)} (got {self.feedback})")

    def example(self, task, problem, tokenizer, rng: random.Random) -> tuple[list[int], list[int]]:
        mode = self.feedback[0] if len(self.feedback) == 1 else rng.choice(self.feedback)
        return hindsight_example(task, problem, tokenizer, HindsightTemplate(), self.segments, rng, mode)

    def key(self) -> dict:
        # the names these settings had in the warm start's own, so that cached weights keep their keys
        return {
            "hindsight_fraction": self.fraction,
            "hindsight_segments": self.segments,
            "hindsight_feedback": self.feedback,
        }

    def templates(self) -> dict:
        return {"hindsight_template": asdict(HindsightTemplate())} if self.fraction > 0 else {}


@dataclass
class BaselineArgs:
    """Per-prompt discounted Beta tracker (as in single-stream policy optimization), shrunk
    toward the task-wide running mean reward."""

    discount: UnitInterval = 0.9
    """Forgetting factor of a prompt's pseudo-counts between its visits."""
    prior_strength: NonNegativeFloat = 2.0
    """Pseudo-counts of the task-wide mean in every prompt's estimate."""
    mean_momentum: Annotated[float, Range(0, 1, high_open=True)] = 0.9
    """EMA momentum of the task-wide mean, updated once per step and bias-corrected (as Adam's
    moments are), so that after the first step it is that step's mean, not a blend with a guess."""
    initial_mean: float = 0.0
    """Task-wide mean before any rollout has been seen: the first step's baseline. 0 makes the
    first update push up successes only. A guess far above the policy's success rate (0.5 for
    a policy at 20%) gives nearly every rollout a negative advantage until the mean catches up:
    here that pushed down the sampled tokens for ~20 steps and cost 2-3 points of accuracy."""

    def __post_init__(self):
        check_fields(self)


# ---- Token weight: normalized Jensen-Shannon divergence between the causal and hindsight views


@torch.no_grad()
def jsd_weights(
    causal_logits: Tensor, hindsight_logits: Tensor, temperature: float = 1.0, chunk_size: int = 128
) -> Tensor:
    """logits [..., V] (same shape) -> normalized JSD per position [...], float32 in [0, 1].

        P = softmax(causal / T),  Q = softmax(hindsight / T),  M = (P + Q) / 2
        w = JSD(P, Q) / ln 2,     JSD = 1/2 KL(P || M) + 1/2 KL(Q || M)      over the full vocabulary

    Everything is in log space and float32 (whatever the input dtype): log M = logaddexp(log P, log Q) - ln 2,
    never log((P + Q) / 2), which underflows for the tail of a large vocabulary. Entries with P = 0 (-inf logits,
    masked vocabulary) contribute 0 to KL(P || M) (0 * log 0 = 0), so they give no NaN. Rows are processed
    `chunk_size` at a time, so the float32 intermediates are O(chunk_size x V), not O(T x V).
    """
    if causal_logits.shape != hindsight_logits.shape:
        raise ValueError(f"shape mismatch: {tuple(causal_logits.shape)} vs {tuple(hindsight_logits.shape)}")
    vocab = causal_logits.shape[-1]
    out = torch.empty(causal_logits.shape[:-1], dtype=torch.float32, device=causal_logits.device)
    causal, hindsight, flat_out = causal_logits.reshape(-1, vocab), hindsight_logits.reshape(-1, vocab), out.view(-1)
    for start in range(0, causal.shape[0], chunk_size):
        rows = slice(start, start + chunk_size)
        log_p = F.log_softmax(causal[rows].float() / temperature, dim=-1)
        log_q = F.log_softmax(hindsight[rows].float() / temperature, dim=-1)
        log_m = torch.logaddexp(log_p, log_q) - _LN2
        # where(log_p > -inf, ...) implements 0 * anything = 0; where log P is finite, log M is too (log M >= log P - ln 2).
        kl_p = torch.where(log_p > -math.inf, log_p.exp() * (log_p - log_m), 0.0).sum(-1)
        kl_q = torch.where(log_q > -math.inf, log_q.exp() * (log_q - log_m), 0.0).sum(-1)
        flat_out[rows] = (0.5 * (kl_p + kl_q) / _LN2).clamp_(0.0, 1.0)
    return out


# ---- Hindsight view: the rollout's own tokens, scored after a block that holds their future


@dataclass
class HindsightBatch:
    """One sequence per (rollout, segment). Column `hindsight_cols[j]` of row `hindsight_rows[j]`
    holds the same token id as column `causal_cols[j]` of rollout `causal_rows[j]`."""

    input_ids: Tensor
    attention_mask: Tensor
    causal_rows: Tensor
    causal_cols: Tensor
    hindsight_rows: Tensor
    hindsight_cols: Tensor
    segment_of: Tensor  # segment index of each scored token
    block_spans: list[tuple[int, int]]  # [start, end) of each row's block, for tests and rendering


def segment_bounds(start: int, length: int, segments: int) -> list[tuple[int, int]]:
    """K contiguous, non-empty spans covering [start, start + length), sizes differing by <= 1."""
    k = min(segments, length)
    sizes = [length // k + (i < length % k) for i in range(k)]
    bounds, at = [], start
    for size in sizes:
        bounds.append((at, at + size))
        at += size
    return bounds


def segments_of(cols: list[int], segments: int) -> list[tuple[int, int]]:
    """[a, b) column spans to score apart. One run of eligible tokens (a single-turn completion)
    is cut into `segments` pieces; several runs (a multi-turn episode's commands, with the
    environment's answers between them) are grouped, whole turns at a time, into at most
    `segments` spans, so the block after a span starts with the environment's answer to it."""
    runs, start = [], cols[0]
    for prev, col in zip(cols, cols[1:]):
        if col != prev + 1:
            runs.append((start, prev + 1))
            start = col
    runs.append((start, cols[-1] + 1))
    if len(runs) == 1:
        return segment_bounds(start, cols[-1] + 1 - start, segments)
    groups = segment_bounds(0, len(runs), segments)
    return [(runs[g0][0], runs[g1 - 1][1]) for g0, g1 in groups]


FeedbackMode = Literal["full", "outcome", "none"]


def block_feedback(verdict, mode: FeedbackMode) -> str | None:
    """What of the verdict the block holds: the verifier's feedback ("full"), whether the rollout
    succeeded ("outcome"), or nothing ("none", the block is the future alone)."""
    if mode == "full":
        return verdict.feedback
    if mode == "outcome":
        return "success" if solved(verdict.reward) else "failure"
    return None


def render_block(
    tokenizer, template: HindsightTemplate, future: list[int], feedback: str | None, encode=None
) -> list[int]:
    """`feedback`: None leaves the verdict out. `encode`: text -> token ids (default: the
    tokenizer; `hindsight_views` passes a memo, as the same few texts recur in every block)."""
    encode = encode or (lambda text: tokenizer(text, add_special_tokens=False).input_ids)
    if future and future[-1] == tokenizer.eos_token_id:
        future = future[:-1]  # "it ended" is no information; an EOS mid-sequence would be noise
    if len(future) > template.max_future_tokens:
        future = future[: template.max_future_tokens] + encode(template.truncated)
    verdict = [] if feedback is None else encode(template.feedback + as_text(feedback, tokenizer))
    return encode(template.open) + future + verdict + encode(template.close)


def hindsight_views(
    rollouts: Rollouts, segments: int, tokenizer, template: HindsightTemplate, feedback: FeedbackMode = "full"
) -> HindsightBatch:
    rows, spans, causal, hindsight, segment_of = [], [], [], [], []
    said = [block_feedback(v, feedback) for v in rollouts.verdicts]
    said = [None if f is None else as_text(f, tokenizer) for f in said]
    # Every rollout's feedback (and the template's pieces) tokenized in one call: one call per
    # text cost more than the rest of building the views (~80 us each on a 32-rollout step).
    texts = list(
        dict.fromkeys(
            [template.open, template.close, template.truncated] + [template.feedback + f for f in said if f is not None]
        )
    )
    memo: dict[str, list[int]] = dict(zip(texts, tokenizer(texts, add_special_tokens=False).input_ids))

    def encode(text: str) -> list[int]:
        if text not in memo:
            memo[text] = tokenizer(text, add_special_tokens=False).input_ids
        return memo[text]

    all_ids, all_mask, all_eligible = (
        rollouts.input_ids.tolist(),
        rollouts.attention_mask.tolist(),
        rollouts.eligible.tolist(),
    )
    for i, (ids, attended, eligible) in enumerate(zip(all_ids, all_mask, all_eligible)):
        cols = [c for c, e in enumerate(eligible) if e]
        if not cols:
            continue
        first = cols[0]
        end = max(c for c, m in enumerate(attended) if m) + 1
        prompt = [ids[c] for c in range(first) if attended[c]]
        for s, (a, b) in enumerate(segments_of(cols, segments)):
            block = render_block(tokenizer, template, ids[b:end], said[i], encode)
            row = len(rows)
            rows.append(block + prompt + ids[first:b])
            spans.append((0, len(block)))
            offset = len(block) + len(prompt) - first
            scored = [t for t in cols if a <= t < b]  # in a multi-turn row, the commands only
            causal += [(i, t) for t in scored]
            hindsight += [(row, t + offset) for t in scored]
            segment_of += [s] * len(scored)
    input_ids, mask = left_padded(rows, tokenizer.pad_token_id, rollouts.input_ids.device)
    shift = [input_ids.shape[1] - len(r) for r in rows]  # left padding moves every column of a row right
    hindsight = [(r, c + shift[r]) for r, c in hindsight]
    spans = [(a + shift[r], b + shift[r]) for r, (a, b) in enumerate(spans)]
    device = rollouts.input_ids.device
    as_tensor = lambda pairs, k: torch.tensor([p[k] for p in pairs], device=device)  # noqa: E731
    return HindsightBatch(
        input_ids,
        mask,
        as_tensor(causal, 0),
        as_tensor(causal, 1),
        as_tensor(hindsight, 0),
        as_tensor(hindsight, 1),
        torch.tensor(segment_of, device=device),
        spans,
    )


@torch.no_grad()
def next_token_hidden(
    model, input_ids: Tensor, attention_mask: Tensor, rows: Tensor, cols: Tensor, max_tokens: int
) -> Tensor:
    """Final hidden states that predict the tokens at (rows, cols), i.e. taken at cols - 1.
    Only these are projected to the vocabulary later, so no [B, T, V] tensor is ever built.

    Rows run in passes of similar length (sorted by their span of real tokens), each pass cut to
    the columns its rows use and holding at most `max_tokens` token slots (one row at least): on
    the CPU, passes of ~2k slots ran 35-45% faster than one pass over a step's 128 hindsight rows,
    from the padding they skip and the activations that stay in cache."""
    device = input_ids.device
    rows, cols = rows.to(device), cols.to(device)
    real = attention_mask.bool()
    width = real.shape[1]
    first = real.int().argmax(-1).tolist()
    last = (width - 1 - real.flip(-1).int().argmax(-1)).tolist()
    spans = [b - a + 1 for a, b in zip(first, last)]
    passes: list[list[int]] = [[]]
    for row in sorted(range(len(spans)), key=spans.__getitem__):  # shortest first: a row is its pass's longest
        if passes[-1] and (len(passes[-1]) + 1) * spans[row] > max_tokens:
            passes.append([])
        passes[-1].append(row)
    out: Tensor | None = None
    where = torch.empty(input_ids.shape[0], dtype=torch.long, device=device)  # row -> its index in its pass
    for rows_of_pass in passes:
        lo, hi = min(first[r] for r in rows_of_pass), max(last[r] for r in rows_of_pass) + 1
        members = torch.tensor(rows_of_pass, device=device)
        ids, mask = input_ids[members, lo:hi], attention_mask[members, lo:hi]
        hidden = trunk(model)(
            input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=False
        ).last_hidden_state
        where[members] = torch.arange(len(members), device=device)
        pick = torch.isin(rows, members).nonzero().flatten()
        if out is None:
            out = hidden.new_empty((len(rows), hidden.shape[-1]))
        out[pick] = hidden[where[rows[pick]], cols[pick] - 1 - lo]
    return out


# ---- Historical baseline: b(x) from earlier steps only


class HistoricalBaseline:
    """b(x) = (alpha_x + n0 * m) / (alpha_x + beta_x + n0), with (alpha_x, beta_x) the discounted
    success / failure counts of x's earlier rollouts and m the task-wide running mean. A prompt
    never seen gets b = m. `update` runs after the step's credit, so the current reward never
    enters its own baseline."""

    def __init__(self, args: BaselineArgs):
        self.args = args
        self.counts: dict[str, tuple[float, float]] = {}
        self.ema, self.steps = 0.0, 0

    @property
    def task_mean(self) -> float:
        if self.steps == 0:
            return self.args.initial_mean
        return self.ema / (1 - self.args.mean_momentum**self.steps)

    def __call__(self, prompt_ids: list[str]) -> Tensor:
        n0, m = self.args.prior_strength, self.task_mean
        values = []
        for pid in prompt_ids:
            alpha, beta = self.counts.get(pid, (0.0, 0.0))
            values.append((alpha + n0 * m) / (alpha + beta + n0))
        return torch.tensor(values)

    def update(self, prompt_ids: list[str], rewards: Tensor) -> None:
        d = self.args.discount
        for pid, r in zip(prompt_ids, rewards.tolist()):
            alpha, beta = self.counts.get(pid, (0.0, 0.0))
            self.counts[pid] = (d * alpha + r, d * beta + (1.0 - r))
        mu = self.args.mean_momentum
        self.ema, self.steps = mu * self.ema + (1 - mu) * float(rewards.mean()), self.steps + 1

    def state_dict(self) -> dict:
        return {"counts": dict(self.counts), "ema": self.ema, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.counts, self.ema, self.steps = dict(state["counts"]), state["ema"], state["steps"]


# ---- The algorithm


class HPRLVR(RLVRModule):
    group_size = 1
    teaching = HindsightTeaching

    def __init__(
        self,
        segments: PositiveInt = 4,
        weighting: Literal["hindsight", "uniform", "mean-rescaled"] = "hindsight",
        feedback: FeedbackMode = "full",
        rescale_clip: PositiveFloat = 5.0,
        template: HindsightTemplate | dict | None = None,
        baseline: BaselineArgs | dict | None = None,
        scoring_tokens: PositiveInt = 2048,
        **base,
    ):
        """segments: K, hindsight passes per rollout. weighting: 'hindsight' (w = JSD, the method),
        'uniform' (w = 1: single-rollout REINFORCE with the same baseline), 'mean-rescaled'
        (w / mean of the rollout's w, clipped at `rescale_clip`). feedback: what of the verdict the
        hindsight block holds (`block_feedback`: the verifier's feedback, the outcome only, or
        none; the ablation of what the hindsight view is told). scoring_tokens: token slots in
        one scoring pass (`next_token_hidden`); the default suits a CPU, an accelerator wants more."""
        super().__init__(**base)
        self.segments, self.weighting, self.rescale_clip, self.feedback = segments, weighting, rescale_clip, feedback
        self.template = HindsightTemplate(**template) if isinstance(template, dict) else template or HindsightTemplate()
        baseline = BaselineArgs(**baseline) if isinstance(baseline, dict) else baseline or BaselineArgs()
        self.baseline = HistoricalBaseline(baseline)
        self.scoring_tokens = scoring_tokens

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        rewards = rollouts.rewards
        prompt_ids = [p.id for p in rollouts.problems]
        baseline = self.baseline(prompt_ids).to(rewards.device)  # before this step's rewards are seen
        # every process keeps the same tracker: it learns from the whole step's judged rollouts
        gathered = distributed.gather((prompt_ids, rewards, rollouts.judged.cpu()))
        judged_ids = [i for ids, _, ok in gathered for i, keep in zip(ids, ok.tolist()) if keep]
        if judged_ids:
            self.baseline.update(judged_ids, torch.cat([r.cpu()[ok] for _, r, ok in gathered]))
        if self.weighting == "uniform":
            weights, stats = rollouts.eligible.float(), {}
        else:
            weights, stats = self.hindsight_weights(rollouts)
            if self.weighting == "mean-rescaled":
                mean = masked_mean(weights, rollouts.eligible, -1, keepdim=True).clamp(min=1e-8)
                weights = (weights / mean).clamp(max=self.rescale_clip) * rollouts.eligible
        advantages = weights * (rewards - baseline)[:, None]  # A_t = w_t (r - b(x))
        rollouts.token_data["token_weights"] = weights  # kept beside the step's completions
        stats["credit/baseline_mean"] = float(baseline.mean())
        stats["credit/baseline_prompts"] = len(self.baseline.counts)
        stats["credit/weight_mean"] = float(masked_mean(weights, rollouts.eligible))
        return advantages, stats

    @torch.no_grad()
    def hindsight_weights(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        views = hindsight_views(rollouts, self.segments, self.tokenizer, self.template, self.feedback)
        slots = self.scoring_tokens
        realized = rollouts.input_ids[views.causal_rows, views.causal_cols]
        w, agree, realized_top = [], [], []
        # gathered: each process runs the passes its own rows need (under FSDP, no collective in them)
        with eval_mode(self.policy), gathered(self.policy):
            causal_h = next_token_hidden(
                self.policy, rollouts.input_ids, rollouts.attention_mask, views.causal_rows, views.causal_cols, slots
            )
            hindsight_h = next_token_hidden(
                self.policy, views.input_ids, views.attention_mask, views.hindsight_rows, views.hindsight_cols, slots
            )
            head, temperature = self.policy.get_output_embeddings(), self.sampling.temperature
            for start in range(0, len(realized), 1024):  # project to the vocabulary a chunk at a time
                p_logits, q_logits = head(causal_h[start : start + 1024]), head(hindsight_h[start : start + 1024])
                w.append(jsd_weights(p_logits, q_logits, temperature))
                agree.append(p_logits.argmax(-1) == q_logits.argmax(-1))
                realized_top.append(q_logits.argmax(-1) == realized[start : start + 1024])
        w = torch.cat(w)
        weights = torch.zeros(rollouts.input_ids.shape, device=w.device)
        weights[views.causal_rows, views.causal_cols] = w
        success = solved(rollouts.rewards[views.causal_rows])
        stats = {
            "hindsight/w_mean_success": float(w[success].mean()) if success.any() else float("nan"),
            "hindsight/w_std_success": float(w[success].std()) if success.sum() > 1 else float("nan"),
            "hindsight/w_mean_failure": float(w[~success].mean()) if (~success).any() else float("nan"),
            "hindsight/w_std_failure": float(w[~success].std()) if (~success).sum() > 1 else float("nan"),
            "hindsight/w_median": float(w.median()),
            "hindsight/w_gini": gini(w),
            "hindsight/top1_agree": float(torch.cat(agree).float().mean()),
            "hindsight/top1_realized": float(torch.cat(realized_top).float().mean()),
            "hindsight/scored_tokens": int(len(w)),
            "hindsight/sequences": int(views.input_ids.shape[0]),
        }
        return weights, stats

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["rlvr"]["baseline"] = self.baseline.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self.baseline.load_state_dict(checkpoint["rlvr"]["baseline"])


def gini(values: Tensor) -> float:
    """0 when every token weighs the same, near 1 when a few tokens carry all the weight."""
    v = values.flatten().sort().values.double()
    n = v.numel()
    if n == 0 or v.sum() <= 0:
        return 0.0
    index = torch.arange(1, n + 1, dtype=torch.float64, device=v.device)
    return float(((2 * index - n - 1) * v).sum() / (n * v.sum()))


# ---- Warm-start examples that teach a small model to read the block
#
# A pretrained model can use a block of hindsight in context; a tiny model warm-started on plain
# demonstrations cannot. These examples lay demonstrations out exactly as `hindsight_views`
# does and train only the scored segment. Successful ones teach "the later tokens in the block
# follow"; failed ones (a task-made slip, e.g. one wrong step propagated) keep the failed
# trajectory as input and target the correct token at the first slip, so that under hindsight
# the model disagrees with exactly the token that went wrong.


def hindsight_example(
    task,
    problem,
    tokenizer,
    template: HindsightTemplate,
    segments: int,
    rng: random.Random,
    feedback: FeedbackMode = "full",
):
    """(input_ids, labels) of one hindsight-format warm-start example (labels -100 = no loss),
    segmented as `hindsight_views` segments a rollout (whole turns for multi-turn tasks), its
    block holding the verdict as `feedback` says."""
    prompt, right, trainable = completion_tokens(task, problem, tokenizer)
    wrong_text = task.corrupt(problem, rng) if rng.random() < 0.5 else None
    if wrong_text is None:
        realized, targets, verdict = right, right, task.verify_trusted(problem, problem.demonstration)
    else:
        _, realized, trainable = completion_tokens(
            task, dataclasses.replace(problem, demonstration=wrong_text), tokenizer
        )
        targets = corrected_targets(realized, right)
        verdict = task.verify_trusted(problem, wrong_text)
    a, b = rng.choice(segments_of([t for t, keep in enumerate(trainable) if keep], segments))
    block = render_block(tokenizer, template, realized[b:], block_feedback(verdict, feedback))
    prefix = block + prompt
    labels = [targets[t] if a <= t < b and trainable[t] else -100 for t in range(b)]
    return prefix + realized[:b], [-100] * len(prefix) + labels


def slip_of(realized: list[int], right: list[int]) -> int:
    """The position of a failed attempt's first token off the demonstration."""
    return next((i for i, (a, b) in enumerate(zip(realized, right)) if a != b), min(len(realized), len(right)))


def corrected_targets(realized: list[int], right: list[int]) -> list[int]:
    """A failed attempt's tokens as labels, its first token off the demonstration replaced by the
    demonstration's: where the attempt went wrong, the example teaches the right token."""
    slip = slip_of(realized, right)
    return realized[:slip] + right[slip : slip + 1] + realized[slip + 1 :]


def completion_tokens(task, problem, tokenizer) -> tuple[list[int], list[int], list[bool]]:
    """(prompt ids, completion ids, which completion ids the policy writes), tokenised as the
    task's own warm-start examples are."""
    ids, labels = task.supervised_example(problem, tokenizer)
    first = next(i for i, label in enumerate(labels) if label != -100)
    return ids[:first], ids[first:], [label != -100 for label in labels[first:]]
