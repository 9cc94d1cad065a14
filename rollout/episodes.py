"""Multi-turn episodes as growing token rows: the loop every environment task plays (ALFWorld's
games, OpenEnv's environments). Each turn the policy writes one command, up to a newline, and
the environment's answer is appended as context (never eligible), so every algorithm's update
and HP-RLVR's hindsight view read an episode as one row, exactly as the policy saw and sampled it.

As text (a demonstration, a completion), an episode is command, newline, answer, each answer
ending with "\n> " while the episode goes on (`answer_text`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

import torch

from rollout.batch import Problem, Rollouts, left_padded, stacked_left
from rollout.conversation import conversation

if TYPE_CHECKING:
    from rollout.decoding import RolloutEngine

COMMAND_END = "\n"
PROMPT_MARK = "\n> "
"""Ends an answer (and a prompt) after which the episode goes on: the policy's turn."""


@dataclass(frozen=True)
class Answer:
    """An environment's answer to one command."""

    text: str
    """What the policy reads next: appended to its row, never eligible."""
    state: str
    """The state the next command acts from (GiGPO groups turns by it)."""
    done: bool
    """The episode is over: the environment ended it, or the turn limit did."""
    truncated: bool = False
    """The turn limit ended the episode here, not the environment."""
    reward: float = 0.0
    """The reward this command earned, as the environment gives it."""
    valid: bool = True
    """The command was well formed: one the environment can read (GiGPO's invalid-action penalty
    reads it, as verl-agent's reads whether an action could be parsed)."""
    failed: str | None = None
    """The environment's own failure, not the policy's (the rollout is then unjudged): why."""


class Environments(Protocol):
    """Episodes stepped in lockstep, already reset to a batch's episodes, in their order."""

    @property
    def active(self) -> list[bool]: ...

    # Optional: `start(commands)`, {episode: command} of the episodes whose command has ended while
    # the policy decodes the others', to step meanwhile; the next `step` gives them the same.

    def step(self, commands: Sequence[str | None]) -> list[Answer | None]:
        """Each going episode's answer to its command (None for an ended one, given None)."""
        ...


def play(
    engine: RolloutEngine,
    episodes: Sequence[Problem],
    environments: Environments,
    max_turns: int,
    group_size: int,
    greedy: bool = False,
) -> tuple[Rollouts, list[list[Answer]]]:
    """Play `episodes` (consecutive groups of `group_size` share a prompt) for at most `max_turns`
    turns: the rollouts, without verdicts (the task's, from the answers), and each episode's
    answers in order. The turns'
    commands go to `environments` stripped of whitespace; the starting state of each is its prompt."""
    tokenizer = engine.tokenizer
    rows = [list(engine.prompt_ids(p.prompt)) for p in episodes]  # copies: turns are appended
    prompt_lengths = [len(r) for r in rows]
    eligible = [[False] * len(r) for r in rows]
    logprobs = [[0.0] * len(r) for r in rows]
    answers: list[list[Answer]] = [[] for _ in episodes]
    observed = [p.prompt for p in episodes]  # the state each turn acts from
    turn_states: list[list[str]] = [[] for _ in episodes]
    end = tokenizer("x" + COMMAND_END, add_special_tokens=False).input_ids[-1]
    stop_ids = sorted({end, tokenizer.eos_token_id})
    # the episodes' KV caches carry over from turn to turn; a group's first turn is prefilled once
    dialogue = conversation(engine, stop_ids, engine.sampling.max_new_tokens, greedy, group_size=group_size)
    start = getattr(environments, "start", None) if spare_cores(engine) else None
    for _ in range(max_turns):
        active = [i for i, going in enumerate(environments.active) if going]
        if not active:
            break

        def ended(positions: list[int], tokens: list[list[int]]) -> None:
            texts = tokenizer.batch_decode(tokens, skip_special_tokens=True)
            start({active[p]: text.strip() for p, text in zip(positions, texts)})

        turns = dialogue.turn(active, [rows[i] for i in active], on_stop=ended if start else None)
        commands: list[str | None] = [None] * len(episodes)  # None: the episode has ended
        # one tokenizer call a turn for all episodes, not one per episode
        for i, text in zip(active, tokenizer.batch_decode([turn.tokens for turn in turns], skip_special_tokens=True)):
            commands[i] = text.strip()
        stepped = environments.step(commands)
        results = [stepped[i] for i in active]
        texts = tokenizer([r.text for r in results], add_special_tokens=False).input_ids
        for i, turn, result, text in zip(active, turns, results, texts):
            rows[i] += turn.tokens
            eligible[i] += [True] * len(turn.tokens)
            logprobs[i] += turn.logprobs
            rows[i] += text
            eligible[i] += [False] * len(text)
            logprobs[i] += [0.0] * len(text)
            answers[i].append(result)
            turn_states[i].append(observed[i])
            observed[i] = result.state
    device = engine.model.device
    input_ids, attention_mask = left_padded(rows, tokenizer.pad_token_id, device)
    rollouts = Rollouts(
        problems=list(episodes),
        input_ids=input_ids,
        attention_mask=attention_mask,
        eligible=stacked_left(eligible, False, torch.bool).to(device),
        sample_logprobs=stacked_left(logprobs, 0.0, torch.float32).to(device),
        completions=tokenizer.batch_decode([r[n:] for r, n in zip(rows, prompt_lengths)], skip_special_tokens=True),
    )
    rollouts.turn_states = turn_states
    rollouts.turn_valid = [[a.valid for a in own] for own in answers]
    # cut by the turn limit (a command ends with a newline, not EOS: EOS says nothing here)
    rollouts.truncated = [bool(own) and own[-1].truncated for own in answers]
    return rollouts, answers


def spare_cores(engine: RolloutEngine) -> bool:
    """Whether environments may step while the policy decodes: where decoding leaves them a core
    (an accelerator decodes, or the CPU has more cores than torch's threads). Where torch's
    threads fill every core, workers stepping beside them slow each decoding pass by more than
    they save (docs/performance.md, "Game steps beside decoding")."""
    return engine.model.device.type != "cpu" or (os.cpu_count() or 1) > torch.get_num_threads()


def answer_text(observation: str, done: bool) -> str:
    """An answer as the policy reads it: the observation, then its turn while the episode goes on."""
    return observation + (COMMAND_END if done else PROMPT_MARK)


def split_demonstration(text: str) -> list[tuple[str, str]]:
    """(command, answer) pairs of an episode's text (command, newline, answer ending with "\n> "
    while the episode goes on)."""
    pairs = []
    for chunk in text.split(PROMPT_MARK):
        command, _, answer = chunk.partition(COMMAND_END)
        pairs.append((command, answer))
    # Re-attach the "> " that the split consumed, so that pieces tokenise as the rollout did.
    return [(c, a + (PROMPT_MARK if i < len(pairs) - 1 else "")) for i, (c, a) in enumerate(pairs)]


def transcript_example(prompt: str, demonstration: str, tokenizer) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of a warm-start example of an episode: the loss on the commands alone,
    each tokenised as the rollout tokenises it, the answers context."""
    encode = lambda text: tokenizer(text, add_special_tokens=False).input_ids  # noqa: E731
    ids = encode(prompt)
    labels = [-100] * len(ids)
    for command, answer in split_demonstration(demonstration):
        action, context = encode(command + COMMAND_END), encode(answer)
        ids += action + context
        labels += action + [-100] * len(context)
    return ids, labels
