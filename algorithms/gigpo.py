"""GiGPO: Group-in-Group Policy Optimization (Feng et al., 2025, "Group-in-Group Policy Optimization
for LLM Agent Training", arXiv:2505.10978; reference implementation verl-agent). GRPO's credit for
the episode, plus a step-level credit: each turn's action against the actions the group's other
episodes (and its own, at another turn) took from the same environment state, its anchor state group.

For turn t (t = 1..T_i) of episode i in a group of G episodes of one game, R_i its reward (1 if
won, arriving at its last turn T_i) and s_(i,t) the observation text it acted on:

    A(i, t)      = A_episode(i) + step_weight * A_step(i, t)                            (Eq. 8)
    A_episode(i) = (R_i - mean R) / (std R + eps)         over the group's episodes      (Eq. 3)
    return(i, t) = sum_k gamma^k r_(i, t+k) = gamma^(T_i - t) R_i                        (Eq. 5)
    A_step(i, t) = (return(i, t) - mean) / (std + eps)    over the returns of every turn
                   (j, u) of the group with s_(j, u) = s_(i, t)                          (Eqs. 6-7)

Each turn's A goes to every token of its command. The states are `Rollouts.turn_states`: for
ALFWorld the prompt, then the game's raw answer to the previous command, as verl-agent's anchor
observation (so the turns after invalid commands, all answered "Nothing happens.", are one group,
there too). Checked against verl-agent's gigpo/core_gigpo.py at commit
d0b97244c50f17fb43a6ef0a15bca0e95a044ff7, whose choices these are, and against a transcription of
its code, with the invalid-action penalty, in tests/test_gigpo.py:
- the episode mean and std count each episode once per turn it played (its default,
  compute_mean_std_cross_steps); `per_turn_episode_stats: false` counts each once, as GRPO does;
- std is the sample std (n - 1); `scale_by_std: false` is its "mean_norm" mode (mean only);
- an episode cut by the turn limit is not bootstrapped: its rewards are 0, so are its returns;
- states are equal when their texts are, within one group of G; a state seen twice in one episode
  is two members of its group; a group of one has A_step = 0.
Its defaults: step_weight 1 and gamma 0.95 (every GiGPO example of verl-agent), eps 1e-6, and std
scaling as its ALFWorld example ("mean_std_norm"; its config's default is "mean_norm"). Two
differences: a group whose values are all equal gives exactly 0 here (there, up to rounding), as
GRPO's does; its ALFWorld reward is 10 for a win, ours 1: the same credit under std scaling
without the invalid-action penalty, but not with it, whose size counts against a win's (its 0.1
of a 10-point win is 0.01 of ours: `invalid_penalty: 0.01` in configs/zoo.yaml).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from statistics import mean, stdev
from typing import Any, NamedTuple

import torch
from torch import Tensor

from algorithms.grpo import GRPO
from algorithms.settings import GroupSize
from rollout.batch import Rollouts
from rollout.ranges import NonNegativeFloat, PositiveFloat, UnitInterval
from tasks.base import Task


class TurnCredit(NamedTuple):
    """Per episode, per turn: A, A_step, and the size of the turn's anchor state group."""

    advantages: list[list[float]]
    step: list[list[float]]
    anchor_sizes: list[list[int]]


def discounted_returns(step_rewards: Sequence[float], gamma: float) -> list[float]:
    """return_t = r_t + gamma * return_(t+1), 0 after the last turn played (nothing bootstrapped)."""
    returns, running = [], 0.0
    for reward in reversed(step_rewards):
        running = reward + gamma * running
        returns.append(running)
    return returns[::-1]


def normalised(
    values: Sequence[float],
    keys: Sequence[Hashable],
    scale_by_std: bool,
    eps: float,
    reference: tuple[Sequence[float], Sequence[Hashable]] | None = None,
) -> list[float]:
    """Each value against the mean (and sample std) of the values sharing its key (or of the
    `reference` values, with their keys, sharing it); exactly 0 where those are all equal, a key
    held once included."""
    members: dict[Hashable, list[float]] = defaultdict(list)
    for value, key in zip(*(reference or (values, keys))):
        members[key].append(value)
    centre = {key: mean(group) for key, group in members.items()}
    flat = {key for key, group in members.items() if min(group) == max(group)}
    spread = {key: stdev(group) for key, group in members.items() if key not in flat}
    out = []
    for value, key in zip(values, keys):
        if key in flat:
            out.append(0.0)  # nothing to tell apart
        else:
            centred = value - centre[key]
            out.append(centred / (spread[key] + eps) if scale_by_std else centred)
    return out


def gigpo_advantages(
    rewards: Sequence[float],
    states: Sequence[Sequence[str]],
    group_size: int,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    per_turn_episode_stats: bool = True,
    invalid: Sequence[Sequence[bool]] | None = None,
    invalid_penalty: float = 0.0,
) -> TurnCredit:
    """Episodes [k * group_size, (k + 1) * group_size) are group k (one game); rewards[i] arrives at
    episode i's last turn; states[i][t] is the state its turn t acted on (every episode has a turn);
    invalid[i][t]: the environment did not take that turn's command, which costs `invalid_penalty`."""
    group = [i // group_size for i in range(len(rewards))]
    turns = [(i, t) for i, s in enumerate(states) for t in range(len(s))]
    penalty = (
        [[invalid_penalty * bad for bad in row] for row in invalid] if invalid else [[0.0] * len(s) for s in states]
    )
    # episode level: each turn's score is its episode's reward less the turn's own penalty (as
    # verl-agent scores a step sample); the group's mean and std over every turn's score, or over
    # each episode's first turn only
    scores = [rewards[i] - penalty[i][t] for i, t in turns]
    keys = [group[i] for i, _ in turns]
    firsts = [k for k, (_, t) in enumerate(turns) if t == 0]
    stats = None if per_turn_episode_stats else ([scores[k] for k in firsts], [keys[k] for k in firsts])
    episode = normalised(scores, keys, scale_by_std, eps, stats)
    # step level: the turns that acted on one state in one group, compared by discounted return,
    # less the turn's own penalty (verl-agent takes it from the step's return, after discounting)
    raw = [discounted_returns([0.0] * (len(s) - 1) + [r], gamma) for r, s in zip(rewards, states)]
    returns = [[value - cost for value, cost in zip(row, costs)] for row, costs in zip(raw, penalty)]
    anchors = [(group[i], states[i][t]) for i, t in turns]
    step = normalised([returns[i][t] for i, t in turns], anchors, scale_by_std, eps)
    combined = [e + step_weight * a for e, a in zip(episode, step)]
    members = Counter(anchors)
    return TurnCredit(*(by_episode(flat, states) for flat in (combined, step, [members[a] for a in anchors])))


def by_episode(flat: Sequence, states: Sequence[Sequence[str]]) -> list[list]:
    """Values listed turn by turn, episode after episode, as one list per episode."""
    values = iter(flat)
    return [[next(values) for _ in s] for s in states]


class GiGPO(GRPO):
    def __init__(
        self,
        group_size: GroupSize = 8,
        step_weight: NonNegativeFloat = 1.0,
        gamma: UnitInterval = 0.95,
        scale_by_std: bool = True,
        eps: PositiveFloat = 1e-6,
        per_turn_episode_stats: bool = True,
        invalid_penalty: NonNegativeFloat = 0.0,
        **base,
    ):
        """step_weight: omega, the step-level credit's weight. gamma: the discount of step returns.
        scale_by_std: divide both levels by their group's std (verl-agent's mean_std_norm).
        per_turn_episode_stats: the episode level's mean and std weigh episodes by their turns.
        invalid_penalty: taken from a turn's episode score and from its return, where its
        command was not well formed (verl-agent's invalid_action_penalty_coef, 0.1 of a 10-point
        win in its ALFWorld recipe, where an action is invalid when it cannot be parsed from the
        output; here when it fits none of the game's command templates, `Answer.valid`, not when
        the game could not carry it out). Its recipe's KL loss is the shared update's:
        `update: {kl_coef: 0.01}` (k3)."""
        super().__init__(group_size=group_size, scale_by_std=scale_by_std, eps=eps, **base)
        self.step_weight, self.gamma, self.per_turn_episode_stats = step_weight, gamma, per_turn_episode_stats
        self.invalid_penalty = invalid_penalty

    @classmethod
    def check_task(cls, task: type[Task], args: dict[str, Any]) -> None:
        if not task.multi_turn:
            raise ValueError(
                f"GiGPO needs a multi-turn task (its step groups are turns that acted on one environment state); "
                f"{task.__name__} is single-turn"
            )

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        eligible = rollouts.eligible
        starts = eligible & ~torch.nn.functional.pad(eligible, (1, 0))[:, :-1]  # each turn's first token
        if starts.sum(-1).tolist() != [len(s) for s in rollouts.turn_states]:
            raise ValueError("turn_states: GiGPO needs one state per turn (run of eligible tokens) of every rollout")
        if self.invalid_penalty and len(rollouts.turn_valid) != len(rollouts):
            raise ValueError("turn_valid: GiGPO's invalid_penalty needs the task to record which commands it took")
        invalid = [[not ok for ok in row] for row in rollouts.turn_valid] if self.invalid_penalty else None
        credit = gigpo_advantages(
            rollouts.rewards.tolist(),
            rollouts.turn_states,
            self.group_size,
            self.gamma,
            self.step_weight,
            self.scale_by_std,
            self.eps,
            self.per_turn_episode_stats,
            invalid,
            self.invalid_penalty,
        )
        per_turn = torch.nn.utils.rnn.pad_sequence([torch.tensor(a) for a in credit.advantages], batch_first=True)
        turn = (starts.long().cumsum(-1) - 1).clamp(min=0)  # the turn each token belongs to
        advantages = per_turn.to(eligible.device).gather(1, turn) * eligible
        step, sizes = sum(credit.step, []), sum(credit.anchor_sizes, [])
        return advantages, {
            "credit/step_abs_mean": float(mean(abs(a) for a in step)),
            "credit/frac_turns_shared_state": float(mean(n > 1 for n in sizes)),
            "credit/anchor_group_size_mean": float(mean(sizes)),
            **(
                {"credit/frac_turns_invalid": float(mean(not ok for row in rollouts.turn_valid for ok in row))}
                if rollouts.turn_valid
                else {}
            ),
        }
