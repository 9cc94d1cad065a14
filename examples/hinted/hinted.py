"""A privileged-context algorithm added from outside the project, with the warm-start examples
that teach its context: nothing of the harness changes for it (examples/hinted/hinted.yaml runs it).

HintedGRPO: GRPO's group advantage, each eligible token weighted by how far a hint (the problem's
answer, shown before the prompt) moves the policy's log-prob of it from the one it was sampled at:

    w_t = 1 - exp(-|log pi_old(y_t | hint, x, y_<t) - log pi_old(y_t | x, y_<t)|)    in [0, 1)
    A_t = w_t * A_i                                                                  A_i: GRPO's

A tiny model reads the hint only if its warm start taught it to: `HintTeaching` lays a share of
the warm start's examples out with the hint before the prompt, the share the config's
`model.warm_start.teach: {hinted.HintedGRPO: {fraction: ...}}` gives.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.grpo import GRPO
from algorithms.teaching import Teaching
from rollout.batch import Rollouts, left_padded, position_ids
from rollout.decoding import eval_mode

HINT = "Answer: {answer}\n"


def hint_ids(problem, tokenizer) -> list[int]:
    return tokenizer(HINT.format(answer=problem.answer), add_special_tokens=False).input_ids


@dataclass
class HintTeaching(Teaching):
    """Demonstrations with their answer shown before the prompt, learnt after it as usual."""

    def example(self, task, problem, tokenizer, rng: random.Random) -> tuple[list[int], list[int]]:
        ids, labels = task.supervised_example(problem, tokenizer)
        hint = hint_ids(problem, tokenizer)
        return hint + ids, [-100] * len(hint) + labels

    def templates(self) -> dict:
        return {"hint_template": HINT}  # another wording is another base


class HintedGRPO(GRPO):
    teaching = HintTeaching

    def credit(self, rollouts: Rollouts) -> tuple[Tensor, dict[str, float]]:
        advantages, stats = super().credit(rollouts)
        moved = (self.hinted_logprobs(rollouts) - rollouts.sample_logprobs).abs()
        weights = (1 - torch.exp(-moved)) * rollouts.eligible
        stats["hint/weight_mean"] = float(weights[rollouts.eligible].mean()) if rollouts.eligible.any() else 0.0
        return advantages * weights, stats

    @torch.no_grad()
    def hinted_logprobs(self, rollouts: Rollouts) -> Tensor:
        """[N, L] log-probs of each row's tokens, at the sampling temperature, with its hint before it."""
        hints = [hint_ids(problem, self.tokenizer) for problem in rollouts.problems]
        hint, hint_mask = left_padded(hints, self.tokenizer.pad_token_id, rollouts.input_ids.device)
        ids = torch.cat([hint, rollouts.input_ids], 1)
        mask = torch.cat([hint_mask, rollouts.attention_mask], 1)
        with eval_mode(self.policy):
            logits = self.policy(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits
        logprobs = torch.log_softmax(logits[:, hint.shape[1] - 1 : -1].float() / self.sampling.temperature, -1)
        return logprobs.gather(-1, rollouts.input_ids[..., None]).squeeze(-1) * rollouts.eligible
