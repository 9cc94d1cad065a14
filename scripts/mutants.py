"""Scripted mutants over the training path, the algorithms, the tasks and the leaderboard: one
plausible bug at a time, put into a scratch copy of the tree, and the tests that concern it run
there. A mutant is killed when they fail. Prints a markdown table (docs/mutants.md holds the last
one, with the command):

    python scripts/mutants.py [--only NAME ...] [--since REV] [--out FILE]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = [
    "tests/test_grpo.py",
    "tests/test_loss_trl.py",
    "tests/test_zoo.py",
    "tests/test_gigpo.py",
    "tests/test_surrogate.py",
    "tests/test_hp_rlvr.py",
    "tests/test_ppo.py",
    "tests/test_jsd.py",
]
TRAINING = ["tests/test_e2e.py", "tests/test_temperature.py"]
ENGINE = ["tests/test_engine.py"]
BOARD = ["tests/test_leaderboard.py", "tests/test_verdicts.py"]
TASKS = ["tests/test_math.py", "tests/test_code.py", "tests/test_feedback.py"]
STDIO = ["tests/test_sandbox_stdio.py", "tests/test_code_files.py"]
NAMESPACE = ["tests/test_sandbox_namespace.py"]
EVALUATE = ["tests/test_evaluate.py"]
LORA = ["tests/test_lora.py"]
NODES = ["tests/test_multinode.py"]
LOGGERS = ["tests/test_loggers.py"]
ROUND_TWO = ["tests/test_sandbox_attacks.py"]
UNJUDGED = ["tests/test_unjudged.py", "tests/test_alfworld_task.py"]
ROUND_THREE = "tests/test_sandbox_round_three.py::"  # #48: a mutant runs the tests of its own class
# #34: one-line bugs an independent mutation run found the tests did not catch, each now pinned by
# a test against a direct computation; a mutant runs only the file that pins it
SURVIVORS = [
    "tests/test_engine.py",
    "tests/test_leaderboard.py",
    "tests/test_driver.py::test_a_resumed_run_whose_any_one_setting_changed_starts_again",
    "tests/test_math.py",
    "tests/test_code.py",
    "tests/test_grpo.py",
    "tests/test_alfworld_task.py",
    "tests/test_hp_rlvr.py",
    "tests/test_surrogate.py",
]
ENGINE_PIN, BOARD_PIN, DRIVER_PIN, MATH_PIN, CODE_PIN, GRPO_PIN, ALFWORLD_PIN, HP_PIN, UPDATE_PIN = (
    [t] for t in SURVIVORS
)
# #34's new code (the vLLM engine, FSDP2, the driver's resume check, the settings' declared ranges
# and the config's checks, the zoo's algorithms): each mutant runs the test files of its own area
VLLM_TESTS = (  # the engine's fast tests, in file order (a second engine must come after the shared one's)
    "test_greedy_rollouts_equal_ours_before_and_after_an_optimizer_step",
    "test_sampled_logprobs_agree_with_the_policys_and_groups_draw_apart",
    "test_an_eos_ends_a_vllm_rollout_as_it_ends_ours",
    "test_a_top_p_below_the_second_tokens_share_samples_the_greedy_rollouts",
    "test_each_request_carries_a_seed_drawn_from_the_runs_rng",
    "test_a_turn_ends_at_its_own_stop_tokens",
    "test_a_lora_policy_reaches_the_engine_merged",
)
VLLM = [f"tests/test_vllm.py::{name}" for name in VLLM_TESTS]
FSDP = ["tests/test_fsdp.py"]
DRIVER = ["tests/test_driver.py"]
RANGES = ["tests/test_settings.py"]
CONFIG = ["tests/test_settings.py", "tests/test_config.py"]
ZOO = ["tests/test_zoo.py", "tests/test_loss_trl.py"]
SDPO = ["tests/test_sdpo.py"]
STOPS = ("\\nclass", "\\ndef", "\\n#", "\\nif", "\\nprint")  # as tasks/code.py spells them


def stop_line(stops) -> str:
    return "STOP_SEQUENCES = (" + ", ".join(f'"{s}"' for s in stops) + ")"


# (name, file, old text, new text, the tests that concern it)
MUTANTS = [
    # GRPO
    ("grpo: std scaling always on", "algorithms/grpo.py", "    if scale_by_std:\n", "    if True:\n", ALGORITHMS),
    (
        "grpo: groups strided across prompts",
        "algorithms/grpo.py",
        "group_advantages(rollouts.rewards.view(-1, self.group_size),",
        "group_advantages(rollouts.rewards.view(self.group_size, -1).T.contiguous(),",
        ALGORITHMS,
    ),
    (
        "grpo: population std",
        "algorithms/grpo.py",
        "rewards.std(-1, keepdim=True)",
        "rewards.std(-1, keepdim=True, correction=0)",
        ALGORITHMS,
    ),
    (
        "grpo: mean not subtracted",
        "algorithms/grpo.py",
        "rewards - rewards.mean(-1, keepdim=True)",
        "rewards",
        ALGORITHMS,
    ),
    # the shared update
    (
        "surrogate: min made max",
        "algorithms/loss.py",
        "-torch.minimum(ratio * advantages",
        "-torch.maximum(ratio * advantages",
        ALGORITHMS,
    ),
    (
        "surrogate: clip disabled",
        "algorithms/loss.py",
        "clipped = ratio.clamp(1 - args.clip_low, 1 + args.clip_high)",
        "clipped = ratio",
        ALGORITHMS,
    ),
    (
        "surrogate: aggregations swapped",
        "algorithms/loss.py",
        'if args.loss_aggregation == "token-mean":',
        'if args.loss_aggregation != "token-mean":',
        ALGORITHMS,
    ),
    (
        "surrogate: low clip counted for A > 0",
        "algorithms/loss.py",
        "low = (ratio < 1 - args.clip_low) & (advantages < 0) & eligible",
        "low = (ratio < 1 - args.clip_low) & (advantages > 0) & eligible",
        ALGORITHMS,
    ),
    (
        "update: ratio forced to 1 with mini-batches",
        "algorithms/base.py",
        'old = logprobs.detach() if single_update else batch.token_data["old_logprobs"]',
        "old = logprobs.detach()",
        ALGORITHMS + TRAINING,
    ),
    (
        "update: warm-up starts at lr 0",
        "algorithms/base.py",
        "lambda s: min(1.0, (s + 1) / warmup)",
        "lambda s: min(1.0, s / warmup)",
        TRAINING,
    ),
    (
        "update: lr read after the scheduler stepped",
        "algorithms/base.py",
        "        lr = scheduler.get_last_lr()[0]  # the rate these updates used\n        scheduler.step()\n",
        "        scheduler.step()\n        lr = scheduler.get_last_lr()[0]\n",
        TRAINING,
    ),
    (
        "update: token-mean over this process's tokens",
        "algorithms/base.py",
        "return distributed.total(float(eligible.sum())) / distributed.world_size()",
        "return float(eligible.sum())",
        ["tests/test_distributed.py"],
    ),
    (
        "kl: log-ratio reversed",
        "algorithms/loss.py",
        "    log_ratio = reference - logprobs",
        "    log_ratio = logprobs - reference",
        ALGORITHMS,
    ),
    # the shared update's variants and the field's baselines (issue 30)
    (
        "loss: clip_high ignored",
        "algorithms/loss.py",
        "clipped = ratio.clamp(1 - args.clip_low, 1 + args.clip_high)",
        "clipped = ratio.clamp(1 - args.clip_low, 1 + args.clip_low)",
        ALGORITHMS,
    ),
    (
        "loss: sequence ratio as a sum",
        "algorithms/loss.py",
        "log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)",
        "log_ratio = (log_ratio * mask).sum(-1).unsqueeze(-1)",
        ALGORITHMS,
    ),
    (
        "loss: sequence-product as a mean",
        "algorithms/loss.py",
        "log_ratio = (log_ratio * mask).sum(-1, keepdim=True)",
        "log_ratio = (log_ratio * mask).mean(-1, keepdim=True)",
        ALGORITHMS,
    ),
    (
        "loss: constant over this batch's longest",
        "algorithms/loss.py",
        "loss = (per_token * mask).sum() / (mask.shape[0] * max_tokens)",
        "loss = (per_token * mask).sum() / (mask.shape[0] * mask.sum(-1).max())",
        ALGORITHMS,
    ),
    (
        "loss: KL before the importance weights",
        "algorithms/loss.py",
        "        per_token = per_token + args.kl_coef * kl_penalty(logprobs, reference, args.kl_estimator)",
        "        per_token = per_token + kl_penalty(logprobs, reference, args.kl_estimator)",
        ALGORITHMS,
    ),
    ("loss: k1 sign", "algorithms/loss.py", "        return -log_ratio", "        return log_ratio", ALGORITHMS),
    (
        "rloo: own reward in its baseline",
        "algorithms/rloo.py",
        "(rewards.sum(-1, keepdim=True) - rewards) / (rewards.shape[-1] - 1)",
        "rewards.mean(-1, keepdim=True)",
        ALGORITHMS,
    ),
    (
        "dr_grpo: std scaling on",
        "algorithms/dr_grpo.py",
        "scale_by_std: bool = False",
        "scale_by_std: bool = True",
        ALGORITHMS,
    ),
    ("dapo: no clip-higher", "algorithms/dapo.py", '"clip_high": 0.28', '"clip_high": 0.2', ALGORITHMS),
    (
        "dapo: overlong ramp from max_tokens",
        "algorithms/dapo.py",
        "((max_tokens - buffer - lengths.float()) / buffer)",
        "((max_tokens - lengths.float()) / buffer)",
        ALGORITHMS,
    ),
    (
        "dapo: refills from the pair's stream",
        "algorithms/dapo.py",
        'random.Random(f"dapo/{self.seed}/{self.rl_step}/{batches - 1}/{distributed.rank()}")',
        'random.Random(f"{self.seed}/{self.rl_step}")',
        ALGORITHMS,
    ),
    (
        "dapo: discarded rollouts not counted",
        "algorithms/dapo.py",
        "        self.discarded_rollouts += spent - len(whole)\n",
        "",
        ALGORITHMS,
    ),
    (
        "dapo: only the missing prompts drawn (#50)",
        "algorithms/dapo.py",
        "rng.sample(range(len(pool)), wanted)]",
        "rng.sample(range(len(pool)), wanted - found)]",
        ["tests/test_zoo.py"],
    ),
    (
        "dapo: saturated groups keep the step its size (#50)",
        "algorithms/dapo.py",
        "            whole = self.groups(whole, list(range(min(found, wanted))))",
        "            whole = concatenate([whole, self.groups(first, self.split_groups(first)[1][: max(wanted - found, 0)])], 0) if found < wanted else self.groups(whole, list(range(wanted)))",
        ["tests/test_zoo.py"],
    ),
    (
        "dapo: the overlong penalty on the 0/1 scale (#50)",
        "algorithms/dapo.py",
        "        rewards = 2 * rollouts.rewards - 1  # DAPO's scale: +1 right, -1 wrong",
        "        rewards = rollouts.rewards",
        ["tests/test_zoo.py"],
    ),
    (
        "dapo: shaping on multi-turn tasks",
        "algorithms/dapo.py",
        "        if not self.task.multi_turn:",
        "        if True:",
        ALGORITHMS,
    ),
    ("gspo: token ratio", "algorithms/gspo.py", '        "ratio_level": "sequence",\n', "", ALGORITHMS),
    (
        "reinforce++: std of the group, not the batch",
        "algorithms/reinforce_pp.py",
        "centred = (rewards - rewards.mean(-1, keepdim=True)).view(-1, 1)",
        "centred = ((rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-4)).view(-1, 1)",
        ALGORITHMS,
    ),
    (
        "reinforce++: whitening mean over rollouts, not tokens",
        "algorithms/reinforce_pp.py",
        "    mean = distributed.total(float((advantages * mask).sum())) / count",
        "    mean = float(((advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean())",
        ALGORITHMS,
    ),
    ("gigpo: no step term", "algorithms/gigpo.py", "e + step_weight * a for", "e + 0 * a for", ALGORITHMS),
    (
        "gigpo: anchors by trajectory, not state",
        "algorithms/gigpo.py",
        "anchors = [(group[i], states[i][t])",
        "anchors = [(group[i], i)",
        ALGORITHMS,
    ),
    (
        "gigpo: anchors across games",
        "algorithms/gigpo.py",
        "anchors = [(group[i], states[i][t])",
        "anchors = [(0, states[i][t])",
        ALGORITHMS,
    ),
    (
        "gigpo: no discount",
        "algorithms/gigpo.py",
        "running = reward + gamma * running",
        "running = reward + running",
        ALGORITHMS,
    ),
    (
        "gigpo: turn off by one",
        "algorithms/gigpo.py",
        "turn = (starts.long().cumsum(-1) - 1).clamp(min=0)",
        "turn = starts.long().cumsum(-1).clamp(max=per_turn.shape[1] - 1)",
        ALGORITHMS,
    ),
    ("gigpo: single-turn task accepted", "algorithms/gigpo.py", "if not task.multi_turn:", "if False:", ALGORITHMS),
    (
        "update: zero-gradient updates counted per step",
        "algorithms/base.py",
        '"zero_grad_updates": sum(n == 0.0 for n in norms),',
        '"zero_grad_updates": int(norms[0] == 0.0),',
        TRAINING,
    ),
    (
        "record: reward_std over the whole step",
        "algorithms/base.py",
        "rewards.view(-1, self.group_size).std(-1).mean()",
        "rewards.std()",
        TRAINING + ["tests/test_grpo.py", "tests/test_alfworld_task.py"],
    ),
    (
        "scoring: training log-probs at T = 1",
        "algorithms/base.py",
        "            self.sampling.temperature,\n            batch.eligible if positions is None else positions,",
        "            1.0,\n            batch.eligible if positions is None else positions,",
        TRAINING,
    ),
    (
        "resume: wall-clock reset to 0",
        "algorithms/base.py",
        'self.rl_step, self.wall_clock_s = state["rl_step"], state["wall_clock_s"]',
        'self.rl_step, self.wall_clock_s = state["rl_step"], 0.0',
        TRAINING,
    ),
    (
        "evaluation: sampled instead of greedy",
        "algorithms/base.py",
        "mine[i : i + self.eval_args.batch_size], 1, greedy=True)",
        "mine[i : i + self.eval_args.batch_size], 1, greedy=False)",
        TRAINING,
    ),
    (
        "pass@k: biased estimator",
        "algorithms/base.py",
        "1.0 - k / i for i in",
        "1.0 - 1 / i for i in",
        ["tests/test_feedback.py"],
    ),
    # sampling
    (
        "decoding: EOS not eligible",
        "rollout/decoding.py",
        "after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0",
        "after_eos = is_eos.long().cumsum(-1) > 0",
        ENGINE,
    ),
    (
        "decoding: top-p ignored",
        "rollout/decoding.py",
        "    if top_p < 1.0:\n        ordered,",
        "    if False:\n        ordered,",
        ENGINE,
    ),
    (
        "positions: left padding not skipped",
        "rollout/batch.py",
        "return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)",
        "return torch.arange(attention_mask.shape[1]).expand_as(attention_mask)",
        ENGINE,
    ),
    # HP-RLVR
    (
        "hp-rlvr: feedback dropped from the block",
        "algorithms/hp_rlvr.py",
        "verdict = [] if feedback is None else encode(template.feedback + feedback)",
        "verdict = []",
        ALGORITHMS + ["tests/test_feedback.py"],
    ),
    (
        "hp-rlvr: EOS kept in the block",
        "algorithms/hp_rlvr.py",
        "if future and future[-1] == tokenizer.eos_token_id:",
        "if False:",
        ALGORITHMS + ["tests/test_feedback.py"],
    ),
    (
        "hp-rlvr: the segment's own tokens in its block",
        "algorithms/hp_rlvr.py",
        "render_block(tokenizer, template, ids[b:end], said[i], encode)",
        "render_block(tokenizer, template, ids[a:end], said[i], encode)",
        ALGORITHMS,
    ),
    (
        "hp-rlvr: JSD at T = 1",
        "algorithms/hp_rlvr.py",
        "w.append(jsd_weights(p_logits, q_logits, temperature))",
        "w.append(jsd_weights(p_logits, q_logits))",
        ALGORITHMS,
    ),
    (
        "hp-rlvr: JSD not halved",
        "algorithms/hp_rlvr.py",
        "(0.5 * (kl_p + kl_q) / _LN2)",
        "((kl_p + kl_q) / _LN2)",
        ALGORITHMS,
    ),
    (
        "hp-rlvr: credit's sign reversed",
        "algorithms/hp_rlvr.py",
        "advantages = weights * (rewards - baseline)[:, None]",
        "advantages = weights * (baseline - rewards)[:, None]",
        ALGORITHMS,
    ),
    (
        "hp-rlvr: baseline sees the current reward",
        "algorithms/hp_rlvr.py",
        # the baseline read after this step's judged rewards went into the tracker
        "        baseline = self.baseline(prompt_ids).to(rewards.device)  # before this step's rewards are seen\n"
        "        # every process keeps the same tracker: it learns from the whole step's judged rollouts\n"
        "        gathered = distributed.gather((prompt_ids, rewards, rollouts.judged.cpu()))\n"
        "        judged_ids = [i for ids, _, ok in gathered for i, keep in zip(ids, ok.tolist()) if keep]\n"
        "        if judged_ids:\n"
        "            self.baseline.update(judged_ids, torch.cat([r.cpu()[ok] for _, r, ok in gathered]))\n",
        "        gathered = distributed.gather((prompt_ids, rewards, rollouts.judged.cpu()))\n"
        "        judged_ids = [i for ids, _, ok in gathered for i, keep in zip(ids, ok.tolist()) if keep]\n"
        "        if judged_ids:\n"
        "            self.baseline.update(judged_ids, torch.cat([r.cpu()[ok] for _, r, ok in gathered]))\n"
        "        baseline = self.baseline(prompt_ids).to(rewards.device)\n",
        ALGORITHMS,
    ),
    (
        "hp-rlvr: no discount",
        "algorithms/hp_rlvr.py",
        "(d * alpha + r, d * beta + (1.0 - r))",
        "(alpha + r, beta + (1.0 - r))",
        ALGORITHMS,
    ),
    (
        "hp-rlvr: task mean not bias-corrected",
        "algorithms/hp_rlvr.py",
        "return self.ema / (1 - self.args.mean_momentum**self.steps)",
        "return self.ema",
        ALGORITHMS,
    ),
    (
        "hp-rlvr: mean-rescaled multiplies",
        "algorithms/hp_rlvr.py",
        "weights = (weights / mean).clamp(max=self.rescale_clip)",
        "weights = (weights * mean).clamp(max=self.rescale_clip)",
        ALGORITHMS,
    ),
    (
        "hp-rlvr: warm-start slip left uncorrected",
        "algorithms/hp_rlvr.py",
        "    return realized[:slip] + right[slip : slip + 1] + realized[slip + 1 :]",
        "    return realized",
        ALGORITHMS,
    ),
    # PPO
    (
        "ppo: gamma and lambda swapped",
        "algorithms/ppo.py",
        "gae(rewards, values, eligible, self.gamma, self.lam)",
        "gae(rewards, values, eligible, self.lam, self.gamma)",
        ALGORITHMS,
    ),
    (
        "ppo: whitening without centring",
        "algorithms/ppo.py",
        "(advantages - picked.mean()) / (picked.std() + 1e-8)",
        "advantages / (picked.std() + 1e-8)",
        ALGORITHMS,
    ),
    (
        "ppo: value loss max made min",
        "algorithms/ppo.py",
        "0.5 * torch.maximum((values - returns) ** 2",
        "0.5 * torch.minimum((values - returns) ** 2",
        ALGORITHMS,
    ),
    (
        "ppo: GAE without the value bootstrap",
        "algorithms/ppo.py",
        "packed_rewards[:, :n] + gamma * packed_values[:, 1:] - packed_values[:, :n]",
        "packed_rewards[:, :n] - packed_values[:, :n]",
        ALGORITHMS,
    ),
    (
        "ppo: reward at the first eligible token",
        "algorithms/ppo.py",
        "last = eligible.long().cumsum(-1).argmax(-1)",
        "last = eligible.long().argmax(-1)",
        ALGORITHMS,
    ),
    # the negative control
    (
        "control: not shuffled",
        "algorithms/shuffled_grpo.py",
        "shuffled = per_rollout[torch.randperm(len(per_rollout), generator=generator).to(per_rollout.device)]",
        "shuffled = per_rollout",
        ALGORITHMS,
    ),
    # tasks
    (
        "math: first mark, not the last",
        "tasks/math.py",
        "completion.rsplit(ANSWER_MARK, 1)[1]",
        "completion.split(ANSWER_MARK, 1)[1]",
        TASKS,
    ),
    (
        "math: feedback quotes the answer",
        "tasks/math.py",
        'f"wrong: expected {expected}{where}"',
        'f"expected {expected}, got {answer}{where}"',
        TASKS,
    ),
    (
        "math: integers compared as text",
        "tasks/math.py",
        "return int(expected) == int(answer)",
        "return expected == answer",
        TASKS,
    ),
    ("code: stop sequences dropped", "tasks/code.py", "STOP_SEQUENCES = (", "STOP_SEQUENCES = () and (", TASKS),
    # the leaderboard
    ("leaderboard: interval over sqrt(n - 1)", "harness/leaderboard.py", "/ math.sqrt(n)", "/ math.sqrt(n - 1)", BOARD),
    ("leaderboard: normal quantile", "harness/leaderboard.py", "float(stats.t.ppf(0.975, n - 1))", "1.96", BOARD),
    (
        "leaderboard: speedup inverted",
        "harness/leaderboard.py",
        '(pl.col("reference_s") / pl.col("wall_clock_s"))',
        '(pl.col("wall_clock_s") / pl.col("reference_s"))',
        BOARD,
    ),
    (
        "leaderboard: zero-gradient fraction per step",
        "harness/leaderboard.py",
        'float(metrics["zero_grad_updates"].sum() / records)',
        'float((metrics["zero_grad_updates"] > 0).mean())',
        BOARD + TRAINING,
    ),
    (
        "verdicts: one-sided McNemar",
        "harness/verdicts.py",
        "stats.binomtest(only_mine, only_mine + only_theirs, 0.5).pvalue",
        'stats.binomtest(only_mine, only_mine + only_theirs, 0.5, alternative="greater").pvalue',
        BOARD,
    ),
    (
        "verdicts: the seeds' spread taken at its word (no prior)",
        "harness/verdicts.py",
        "    prior = (1 + SEED_RATIO) * ms_e",
        "    prior = 0.0 * ms_e",
        BOARD,
    ),
    (
        "verdicts: the problems' noise left out of the two-way variance",
        "harness/verdicts.py",
        "    total = seed_part + ms_p\n",
        "    total = seed_part + 0.0 * ms_p\n",
        BOARD,
    ),
    (
        "leaderboard: gain reversed",
        "harness/leaderboard.py",
        'gain = g["accuracy_after"] - g["accuracy_before"]',
        'gain = g["accuracy_before"] - g["accuracy_after"]',
        BOARD,
    ),
    # code problems from files, judged on standard input and output
    (
        "stdio: lines compared, not tokens",
        "tasks/sandbox/judge.py",
        "mine, theirs = got.split(), expected.split()",
        "mine, theirs = got.splitlines(), expected.splitlines()",
        STDIO,
    ),
    (
        "stdio: the tolerance ignored",
        "tasks/sandbox/judge.py",
        "if not math.isclose(x, y, rel_tol=tolerance, abs_tol=tolerance):",
        "if x != y:",
        STDIO,
    ),
    ("stdio: no partial score", "tasks/sandbox/judge.py", "        write_record(score=passed / total)\n", "", STDIO),
    (
        "stdio: no per-case limit",
        "tasks/sandbox/candidate.py",
        "deadline, pause, status = time.monotonic() + limit_s, 0.0002, None",
        "deadline, pause, status = time.monotonic() + 3600, 0.0002, None",
        STDIO,
    ),
    (
        "code files: MBPP's every assert shown",
        "tasks/code_files.py",
        'example = example or (asserts[0] if asserts else "")',
        'example = example or "\\n".join(asserts)',
        STDIO,
    ),
    # what the tests see of the program (issue #33, classes 1-3)
    (
        "judge: every name the program binds",
        "tasks/sandbox/judge.py",
        "or not name.isidentifier() or name not in wanted:",
        "or not name.isidentifier():",
        NAMESPACE,
    ),
    (
        "judge: the prompt not run",
        "tasks/sandbox/judge.py",
        "        stubs = _run_prompt(prompt, namespace)\n",
        "        stubs = None\n",
        NAMESPACE,
    ),
    (
        "judge: StopIteration passed through",
        "tasks/sandbox/judge.py",
        "if cls in (StopIteration, StopAsyncIteration) and not stop:",
        "if cls is None and not stop:",
        NAMESPACE,
    ),
    (
        "judge: mutations not put back",
        "tasks/sandbox/judge.py",
        "                        _put_back(given[key], _decode(value))\n",
        "                        pass\n",
        NAMESPACE,
    ),
    (
        "candidate: own classes unnamed",
        "tasks/sandbox/candidate.py",
        "base = next((c for c in type(exc).__mro__ if c in exceptions), None)",
        "base = type(exc) if type(exc) in exceptions else None",
        NAMESPACE,
    ),
    # checkpoints evaluated without training
    (
        "evaluate: a kept policy drawn at step 0",
        "harness/evaluate.py",
        "module.rl_step = checkpoint.draw_step",
        "module.rl_step = 0",
        EVALUATE,
    ),
    (
        "evaluate: gathered items in rank order",
        "rollout/distributed.py",
        "return [shares[i % len(shares)][i // len(shares)] for i in range(total)]",
        "return [item for share in shares for item in share]",
        ["tests/test_distributed.py"] + EVALUATE,
    ),
    # LoRA
    (
        "lora: merged without the adapter",
        "rollout/lora.py",
        "tensor = tensor + layers[owner].get_delta_weight(ADAPTER).to(tensor.dtype)",
        "tensor = tensor",
        LORA,
    ),
    ("lora: the reference keeps its adapters", "rollout/lora.py", "layer.enable_adapters(False)", "pass", LORA),
    (
        "lora: the whole policy checkpointed",
        "algorithms/base.py",
        "if has_adapters(self.policy):  # of the policy, the adapters only",
        "if False:",
        LORA,
    ),
    # past one machine
    (
        "nodes: num_nodes not given to Lightning",
        "harness/driver.py",
        '        "num_nodes": args.num_nodes,\n',
        "",
        NODES,
    ),
    (
        "slurm: every run submitted",
        "harness/__main__.py",
        "jobs = submit(args.config, planned, args.results",
        "jobs = submit(args.config, plan(benchmark), args.results",
        ["tests/test_slurm.py"],
    ),
    (
        "loggers: no hyperparameters",
        "harness/driver.py",
        "        logger.log_hyperparams(spec)\n",
        "        pass\n",
        LOGGERS,
    ),
    (
        "loggers: W&B run not closed",
        "harness/driver.py",
        "            logger.experiment.finish()\n",
        "            pass\n",
        LOGGERS,
    ),
    # the sandbox's second round: state across runs, the host's files, CPU, unjudged verdicts
    (
        "view: host paths bound writable",
        "tasks/sandbox/kernel.py",
        'steps.append(("bind", path, place(path, os.path.isdir(path)), MS_RDONLY | MS_NOSUID | MS_NODEV))',
        'steps.append(("bind", path, place(path, os.path.isdir(path)), MS_NOSUID | MS_NODEV))',
        ROUND_TWO,
    ),
    (
        "view: the candidate not chrooted",
        "tasks/sandbox/layout.py",
        '            os.chroot(job["view_root"])',
        "            pass",
        ROUND_TWO,
    ),
    (
        "worker: one network namespace for all its jobs",
        "tasks/sandbox/pool.py",
        'JOB_NAMESPACES = ("net", "pid", "mount")',
        'JOB_NAMESPACES = ("pid", "mount")',
        ROUND_TWO,
    ),
    (
        "cpu: no CPU group for a slot",
        "tasks/sandbox/host.py",
        '        "cpu_cgroup": _cgroup_root(CPU_CGROUP_V1, "cpu.shares") if root else None,',
        '        "cpu_cgroup": None,',
        ROUND_TWO,
    ),
    (
        "unjudged: only the unjudged rollout left out, not its group",
        "rollout/batch.py",
        "whole = self.judged.view(-1, group_size).all(-1).repeat_interleave(group_size)",
        "whole = self.judged",
        UNJUDGED,
    ),
    (
        "unjudged: the baseline learns from every rollout",
        "algorithms/hp_rlvr.py",
        "judged_ids = [i for ids, _, ok in gathered for i, keep in zip(ids, ok.tolist()) if keep]",
        "judged_ids = [i for ids, _, ok in gathered for i in ids]; gathered = [(a, b, torch.ones_like(c)) for a, b, c in gathered]",
        UNJUDGED,
    ),
    (
        "unjudged: a failed game judged as lost",
        "tasks/alfworld/task.py",
        "                failed=r.observation if isinstance(r, FailedStep) else None,\n",
        "                failed=None,\n",
        UNJUDGED,
    ),
    # #34's survivors, each pinned by a test of its own (docs/mutants.md)
    (
        "pin: decoding: top-p nucleus from the logits at T = 1",
        "rollout/decoding.py",
        "        probs = ordered.softmax(-1)\n",
        "        probs = (ordered * temperature).softmax(-1)\n",
        ENGINE_PIN,
    ),
    (
        "pin: decoding: top-p nucleus from the logits at T^2",
        "rollout/decoding.py",
        "        probs = ordered.softmax(-1)\n",
        "        probs = (ordered / temperature).softmax(-1)\n",
        ENGINE_PIN,
    ),
    (
        "pin: truncated: an EOS outside the completion counted",
        "rollout/batch.py",
        "return (~((self.input_ids == eos_token_id) & self.eligible).any(-1)).tolist()",
        "return (~(self.input_ids == eos_token_id).any(-1)).tolist()",
        ENGINE_PIN,
    ),
    (
        "pin: verdicts: detectable difference splits odd noise the other way",
        "harness/verdicts.py",
        "stats.binomtest(math.ceil(discordant / 2) + extra",
        "stats.binomtest(discordant // 2 + extra",
        BOARD_PIN,
    ),
    (
        "pin: leaderboard: final rewards from the best evaluation",
        "harness/leaderboard.py",
        'last_rewards = evals["rewards"][-1].to_list()',
        'last_rewards = evals["rewards"][int(evals["accuracy"].arg_max())].to_list()',
        BOARD_PIN,
    ),
    (
        "pin: leaderboard: final pass@k from the best evaluation",
        "harness/leaderboard.py",
        "evals[c][-1] if c in evals.columns else None for c in sampled",
        "evals[c].max() if c in evals.columns else None for c in sampled",
        BOARD_PIN,
    ),
    (
        "pin: leaderboard: a missing speedup counted as 0",
        "harness/leaderboard.py",
        'speedups = g["speedup"].drop_nulls()',
        'speedups = g["speedup"].fill_null(0.0)',
        BOARD_PIN,
    ),
    (
        "pin: driver: trainer precision not compared on resume",
        "harness/driver.py",
        'if k not in NOT_IN_SPEC["trainer"]}',
        'if k not in (*NOT_IN_SPEC["trainer"], "precision")}',
        DRIVER_PIN,
    ),
    (
        "pin: driver: sampling.max_new_tokens not compared on resume",
        "harness/driver.py",
        "**{name: asdict(value) for name, value in settings.items()},",
        '**{name: {k: v for k, v in asdict(value).items() if k != "max_new_tokens"} for name, value in settings.items()},',
        DRIVER_PIN,
    ),
    (
        "pin: math: the first \\boxed{}, not the last",
        "tasks/math.py",
        'start = text.rfind("\\\\boxed{")',
        'start = text.find("\\\\boxed{")',
        MATH_PIN,
    ),
    (
        "pin: code: a fenced answer run without its prompt's code",
        "tasks/code.py",
        'return (block if code is None else code + "\\n\\n" + block), tests, code',
        "return block, tests, code",
        CODE_PIN,
    ),
    *[
        (
            f"pin: code: not cut at {stop}",
            "tasks/code.py",
            stop_line(STOPS),
            stop_line(s for s in STOPS if s != stop),
            CODE_PIN,
        )
        for stop in STOPS
    ],
    ("pin: grpo: eps 1e-8", "algorithms/grpo.py", "= 1e-4, **base)", "= 1e-8, **base)", GRPO_PIN),
    (
        "pin: alfworld: a win read from the episode's end",
        "tasks/alfworld/task.py",
        "                reward=float(r.won),",
        "                reward=float(r.done),",
        ALFWORLD_PIN,
    ),
    (
        "pin: control: one permutation for every step",
        "algorithms/shuffled_grpo.py",
        "(self.seed * 1_000_003 + self.rl_step) * 1009",
        "(self.seed * 1_000_003) * 1009",
        GRPO_PIN,
    ),
    (
        "pin: hp-rlvr: feedback mode not passed to the views",
        "algorithms/hp_rlvr.py",
        "hindsight_views(rollouts, self.segments, self.tokenizer, self.template, self.feedback)",
        "hindsight_views(rollouts, self.segments, self.tokenizer, self.template)",
        HP_PIN,
    ),
    (
        "pin: update: clip fractions of the first mini-batch only",
        "algorithms/base.py",
        "float(np.mean([c[k] for c in clipped]))",
        "float(clipped[0][k])",
        UPDATE_PIN,
    ),
    (
        "pin: update: mini-batches strided across groups",
        "algorithms/base.py",
        "chunks = list(groups.view(args.minibatches, -1).unbind())",
        "chunks = list(groups.flatten().view(-1, args.minibatches).T.unbind())",
        UPDATE_PIN,
    ),
    # #34's new code: the vLLM engine
    (
        "vllm: no weights pushed after an update",
        "rollout/vllm_engine.py",
        "            reload(self.llm, self.model)\n",
        "            pass\n",
        VLLM,
    ),
    (
        "vllm: sampled at T = 1",
        "rollout/vllm_engine.py",
        "temperature=0.0 if greedy else self.sampling.temperature,",
        "temperature=0.0 if greedy else 1.0,",
        VLLM,
    ),
    (
        "vllm: top-p not passed",
        "rollout/vllm_engine.py",
        "top_p=1.0 if greedy else self.sampling.top_p,",
        "top_p=1.0,",
        VLLM,
    ),
    (
        "vllm: request seeds from the engine's own stream, not the run's RNG",
        "rollout/vllm_engine.py",
        "seed=int(torch.randint(2**31 - 1, ())),",
        "seed=None,",
        VLLM,
    ),
    (
        "vllm: log-probs before the temperature",
        "rollout/vllm_engine.py",
        'logprobs_mode="processed_logprobs",',
        'logprobs_mode="raw_logprobs",',
        VLLM,
    ),
    (
        "vllm: a turn stopped at EOS only, not at its stop tokens",
        "rollout/vllm_engine.py",
        "stop_token_ids=list(stop_ids),",
        "stop_token_ids=[self.tokenizer.eos_token_id],",
        VLLM,
    ),
    # FSDP2
    (
        "fsdp: the trunk called without gathering the root unit",
        "rollout/sharding.py",
        'return getattr(model, "rlvr_trunk", None) or model.base_model',
        "return model.base_model",
        FSDP,
    ),
    (
        "fsdp: decoder layers not units of their own",
        "rollout/sharding.py",
        "        for layer in model.base_model.layers:\n            fully_shard(layer, **options)\n",
        "",
        FSDP,
    ),
    (
        "fsdp: bf16-mixed gathers float32",
        "rollout/sharding.py",
        'bf16 = str(self.precision_plugin.precision).startswith("bf16")',
        "bf16 = False",
        FSDP,
    ),
    (
        "fsdp: the engine gets each process's shard, not the whole tensor",
        "rollout/sharding.py",
        "(tensor.full_tensor() if isinstance(tensor, DTensor) else tensor)",
        "(tensor.to_local() if isinstance(tensor, DTensor) else tensor)",
        FSDP,
    ),
    # the driver: what makes a run start again rather than resume, and the run plan
    (
        "driver-resume: the algorithm's own arguments not compared on resume",
        "harness/driver.py",
        '"algorithm": {"class_path": suite.algorithms[algorithm].class_path, "init_args": own},',
        '"algorithm": {"class_path": suite.algorithms[algorithm].class_path},',
        DRIVER,
    ),
    (
        "driver-resume: the task's arguments not compared on resume",
        "harness/driver.py",
        '"task": suite.task_key(),',
        '"task": suite.task.class_path,',
        DRIVER,
    ),
    (
        "driver-resume: a finished run kept whatever its settings",
        "harness/driver.py",
        "        if before != spec:\n",
        '        if before != spec and not (run_dir / "run.json").exists():\n',
        DRIVER,
    ),
    (
        "driver-resume: a changed setting named without its parents",
        "harness/driver.py",
        'out += changed_settings(a, b, f"{prefix}{key}.")',
        'out += changed_settings(a, b, f"{key}.")',
        DRIVER,
    ),
    (
        "driver-plan: runs planned algorithm by algorithm, not seed by seed",
        "harness/plan.py",
        "for s in benchmark.suites for seed in s.seeds for a in s.algorithms]",
        "for s in benchmark.suites for a in s.algorithms for seed in s.seeds]",
        DRIVER,
    ),
    # declared ranges
    (
        "ranges: open and closed low ends swapped",
        "rollout/ranges.py",
        "not (value > self.low if self.low_open else value >= self.low)",
        "not (value >= self.low if self.low_open else value > self.low)",
        RANGES,
    ),
    (
        "ranges: an open high end taken as closed",
        "rollout/ranges.py",
        "(value < self.high if self.high_open else value <= self.high)",
        "value <= self.high",
        RANGES,
    ),
    (
        "ranges: an optional value not checked",
        "rollout/ranges.py",
        "return violation(arms[0], value) if len(arms) == 1 else None",
        "return None",
        RANGES,
    ),
    (
        "ranges: a list's entries not checked",
        "rollout/ranges.py",
        "if origin in (list, tuple) and isinstance(value, (list, tuple)):",
        "if origin is tuple and isinstance(value, (list, tuple)):",
        RANGES,
    ),
    (
        "ranges: Distinct compares neighbours only",
        "rollout/ranges.py",
        "if isinstance(mark, Distinct) and len(set(value)) != len(value):",
        "if isinstance(mark, Distinct) and any(a == b for a, b in zip(value, value[1:])):",
        RANGES,
    ),
    (
        "ranges: True taken for the number 1",
        "rollout/ranges.py",
        "if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):",
        "if not isinstance(value, (int, float)) or math.isnan(value):",
        RANGES,
    ),
    # the config's checks
    (
        "config: an Annotated hint's type not coerced",
        "harness/config.py",
        "        value = coerce(get_args(hint)[0], value, where)\n",
        "",
        CONFIG,
    ),
    (
        "config: YAML 1.2 floats need a dot",
        "harness/config.py",
        r"(?:\.[0-9_]*)?[eE]",
        r"\.[0-9_]*[eE]",
        CONFIG,
    ),
    (
        "config: a key repeated only when it follows itself",
        "harness/config.py",
        "            seen.add(key)\n",
        "            seen = {key}\n",
        CONFIG,
    ),
    (
        "config: a bool taken for a seed",
        "harness/config.py",
        "not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)",
        "not all(isinstance(s, int) for s in seeds)",
        CONFIG,
    ),
    (
        "config: a sentencepiece tokenizer (tokenizer.model) refused",
        "harness/config.py",
        "if not any((folder / name).is_file() for name in TOKENIZER_FILES):",
        'if not (folder / "tokenizer.json").is_file():',
        CONFIG,
    ),
    (
        "config: more GPUs than the machine has, under accelerator auto",
        "harness/config.py",
        'if t.accelerator != "cpu" and gpus and t.devices > gpus:',
        'if t.accelerator == "gpu" and gpus and t.devices > gpus:',
        CONFIG,
    ),
    # the zoo: Dr. GRPO, REINFORCE++, RLOO, SDPO
    (
        "zoo: dr-grpo: each rollout's own length, not a constant",
        "algorithms/dr_grpo.py",
        'update_overrides = {"loss_aggregation": "constant"}',
        'update_overrides = {"loss_aggregation": "sequence-mean"}',
        ZOO,
    ),
    (
        "zoo: dr-grpo: constant divisor the batch's width, not max_new_tokens",
        "algorithms/base.py",
        "max_tokens=args.max_tokens or self.sampling.max_new_tokens,",
        "max_tokens=args.max_tokens or batch.eligible.shape[1],",
        ZOO,
    ),
    (
        "zoo: dr-grpo: update.max_tokens ignored",
        "algorithms/base.py",
        "max_tokens=args.max_tokens or self.sampling.max_new_tokens,",
        "max_tokens=self.sampling.max_new_tokens,",
        ZOO,
    ),
    (
        "zoo: reinforce++: sample variance, not the population's",
        "algorithms/reinforce_pp.py",
        "variance = distributed.total(float(((advantages - mean).pow(2) * mask).sum())) / count",
        "variance = distributed.total(float(((advantages - mean).pow(2) * mask).sum())) / max(count - 1, 1.0)",
        ZOO,
    ),
    (
        "zoo: reinforce++: scaled without centring",
        "algorithms/reinforce_pp.py",
        "return (advantages - mean) / math.sqrt(max(variance, 1e-8)) * mask",
        "return advantages / math.sqrt(max(variance, 1e-8)) * mask",
        ZOO,
    ),
    (
        "zoo: reinforce++: whitening counts this process's tokens only",
        "algorithms/reinforce_pp.py",
        "count = max(distributed.total(float(mask.sum())), 1.0)",
        "count = max(float(mask.sum()), 1.0)",
        ZOO,
    ),
    (
        "zoo: rloo: the others' mean over G, not G - 1",
        "algorithms/rloo.py",
        "/ (rewards.shape[-1] - 1)",
        "/ rewards.shape[-1]",
        ZOO,
    ),
    (
        "zoo: rloo: a token ratio, not the sequence's",
        "algorithms/rloo.py",
        '"ratio_level": "sequence-product"',
        '"ratio_level": "token"',
        ZOO,
    ),
    (
        "zoo: rloo: token-mean, not a mean over rollouts",
        "algorithms/rloo.py",
        '"loss_aggregation": "sequence-mean"',
        '"loss_aggregation": "token-mean"',
        ZOO,
    ),
    (
        "zoo: sdpo: the group's last success shown, not its first",
        "algorithms/sdpo.py",
        "solution = successes[0] if successes else None",
        "solution = successes[-1] if successes else None",
        SDPO,
    ),
    ("zoo: sdpo: blank feedback shown", "algorithms/sdpo.py", 'and feedback.strip() != ""', 'and feedback != ""', SDPO),
    (
        "zoo: sdpo: the teacher scores at T = 1",
        "algorithms/sdpo.py",
        "model, views.input_ids, views.attention_mask, rows, cols, self.sampling.temperature, self.scoring_tokens",
        "model, views.input_ids, views.attention_mask, rows, cols, 1.0, self.scoring_tokens",
        SDPO,
    ),
    (
        "zoo: sdpo: EMA rate applied to the teacher's side",
        "algorithms/sdpo.py",
        "target.mul_(1.0 - rate).add_(source, alpha=rate)",
        "target.mul_(rate).add_(source, alpha=1.0 - rate)",
        SDPO,
    ),
    (
        "zoo: sdpo: the base teacher drifts as an EMA",
        "algorithms/sdpo.py",
        '        if self.teacher_model_kind == "ema":\n            optimizers[0]',
        "        if self.teacher is not None:\n            optimizers[0]",
        SDPO,
    ),
    # #50: SDPO as the paper's code builds it, TRL's as settings
    (
        "sdpo: the aggregations swapped",
        "algorithms/sdpo.py",
        '    if aggregation == "token-mean":',
        '    if aggregation == "sequence-mean":',
        SDPO,
    ),
    (
        "sdpo: the divergence's weights swapped",
        "algorithms/sdpo.py",
        "return ((1 - alpha) * to_mixture(student) + alpha * to_mixture(teacher)).sum(-1)",
        "return (alpha * to_mixture(student) + (1 - alpha) * to_mixture(teacher)).sum(-1)",
        SDPO,
    ),
    (
        "sdpo: the top k renormalised instead of a tail bucket",
        "algorithms/sdpo.py",
        "            student, teacher = with_tail(student), with_tail(teacher)",
        "            student, teacher = student.log_softmax(-1), teacher.log_softmax(-1)",
        SDPO,
    ),
    (
        "sdpo: the support is the teacher's top k",
        "algorithms/sdpo.py",
        "support = student_logits.detach().topk(",
        "support = teacher_logits.detach().topk(",
        SDPO,
    ),
    (
        "sdpo: feedback shown beside a solution, not without one",
        "algorithms/sdpo.py",
        "and not (reprompt.environment_feedback_only_without_solution and solution is not None)",
        "and not (reprompt.environment_feedback_only_without_solution and solution is None)",
        SDPO,
    ),
    (
        "sdpo: a success's feedback shown",
        "algorithms/sdpo.py",
        "and (reprompt.feedback_on_success or rewards[i] < reprompt.success_reward_threshold)",
        "and (reprompt.feedback_on_success or rewards[i] <= 1.0)",
        SDPO,
    ),
    (
        "sdpo: the probe's block holds the feedback too",
        "algorithms/sdpo.py",
        "contexts = [(i, False) if i in shown else (None, False) for i in range(len(rollouts))]",
        "contexts = [(i, True) if i in shown else (None, False) for i in range(len(rollouts))]",
        SDPO,
    ),
    (
        "sdpo: a teacher example's wrong token labelled as written",
        "algorithms/sdpo.py",
        "        targets = corrected_targets(realized, right)",
        "        targets = realized",
        SDPO,
    ),
    (
        "sdpo: a teacher example labelled past its wrong token",
        "algorithms/sdpo.py",
        "        trainable = [keep and t <= slip for t, keep in enumerate(trainable)]",
        "        trainable = [keep for t, keep in enumerate(trainable)]",
        SDPO,
    ),
    (
        "sdpo: teacher examples take the hindsight examples' share",
        "harness/models.py",
        "elif layout_draw < self.hindsight_fraction + self.teacher_fraction:",
        "elif layout_draw < self.teacher_fraction:",
        SDPO,
    ),
    # #36: the reference's name, intervals as [low, high], one rule for relative paths
    (
        "names: a run recorded under the old name loses its reference",
        "harness/records.py",
        '    if "baseline" in info and "reference" not in info:',
        '    if "baseline" in info and "reference" in info:',
        BOARD,
    ),
    (
        "names: the exact interval as a half-width",
        "harness/leaderboard.py",
        "    return [float(interval.low), float(interval.high)]",
        "    return (interval.high - interval.low) / 2",
        BOARD,
    ),
    (
        "names: the t-interval about zero, not the mean",
        "harness/leaderboard.py",
        "    return [float(values.mean()) - half, float(values.mean()) + half]",
        "    return [-half, half]",
        BOARD,
    ),
    (
        "paths: a config's relative path read from the working directory",
        "harness/config.py",
        "    return path if folder is None or Path(path).is_absolute() else str(folder / path)",
        "    return path",
        CONFIG,
    ),
    (
        "paths: a path argument left at its default not resolved",
        "harness/config.py",
        "            value = args.get(name, defaults.get(name))",
        "            value = args.get(name)",
        CONFIG,
    ),
    (
        "paths: the config's folder not passed to its suites",
        "harness/config.py",
        'parse_suite(s, f"suites[{i}]", path.parent)',
        'parse_suite(s, f"suites[{i}]")',
        CONFIG,
    ),
    (
        "passes: rows not put back in place",
        "rollout/scoring.py",
        "    back = torch.argsort(torch.cat(placed))",
        "    back = torch.cat(placed)",
        ENGINE,
    ),
    (
        "passes: a pass padded to the longest row of the batch",
        "rollout/scoring.py",
        "        hi = last[order[end - 1]] + 1",
        "        hi = width",
        ENGINE,
    ),
    (
        "passes: the longest group first",
        "rollout/scoring.py",
        "    order = sorted(range(len(last)), key=last.__getitem__)  # stable: ties keep their order",
        "    order = sorted(range(len(last)), key=last.__getitem__, reverse=True)",
        ENGINE,
    ),
    (
        "passes: update.scoring_tokens not passed to the scoring",
        "algorithms/base.py",
        "            slots=self.update_args.scoring_tokens,",
        "            slots=None,",
        ["tests/test_surrogate.py"],
    ),
    (
        "passes: PPO's pass not split",
        "algorithms/ppo.py",
        "        if slots is not None:",
        "        if False:",
        ["tests/test_ppo.py"],
    ),
    (
        "skip: groups without positions still scored",
        "rollout/scoring.py",
        "        if scored.any() and not scored.all():",
        "        if False:",
        ENGINE,
    ),
    (
        "skip: placed back in scoring order, not in place",
        "rollout/scoring.py",
        "            return part.new_zeros(positions.shape).index_put((rows,), part)",
        "            return part.new_zeros(positions.shape).index_put((torch.arange(len(rows)),), part)",
        ENGINE,
    ),
    (
        "skip: groups with advantages of one sign taken for zero",
        "algorithms/base.py",
        '        signal = (batch.token_data["advantages"] != 0) & batch.eligible',
        '        signal = (batch.token_data["advantages"] > 0) & batch.eligible',
        ["tests/test_surrogate.py"],
    ),
    (
        "skip: a step without signal scores nothing",
        "algorithms/base.py",
        "        groups[0] |= not groups.any()",
        "        pass",
        ["tests/test_surrogate.py"],
    ),
    (
        "skip: applied with a KL term",
        "algorithms/base.py",
        "            and args.kl_coef == 0",
        "            and True",
        ["tests/test_surrogate.py"],
    ),
    (
        "attention: grouped heads read in place where a gradient is taken",
        "rollout/attention.py",
        "    if not grouped or needs_grad or plain",
        "    if not grouped or plain",
        ["tests/test_attention.py"],
    ),
    (
        "attention: no mask made for the policy's attention",
        "rollout/attention.py",
        "AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)",
        "pass",
        ["tests/test_attention.py"],
    ),
    (
        "add: --add replaces the published runs",
        "harness/leaderboard.py",
        "            runs = added(runs, published)",
        "            pass",
        [f"{DRIVER[0]}::test_published_records_alone_publish_the_same_leaderboard"],
    ),
    (
        "add: a kept run's namesake kept beside the new one",
        "harness/records.py",
        "    kept = [run for run in published if name_of(run) not in names]",
        "    kept = list(published)",
        BOARD,
    ),
    (
        "add: a run of another suite's start kept",
        "harness/records.py",
        "        if differs is not None:",
        "        if differs is None:",
        BOARD,
    ),
    # #47: provenance and its refusals
    (
        "provenance: a resume from other starting weights continued",
        "harness/driver.py",
        '    check_same_start([("the run", recorded), ("its resume", origin)], run_dir.name)',
        "    pass",
        ["tests/test_provenance.py"],
    ),
    (
        "provenance: --add beside runs without a digest",
        "harness/records.py",
        "        unrecorded_pass=False,",
        "        unrecorded_pass=True,",
        ["tests/test_provenance.py"],
    ),
    (
        "provenance: a suite's runs paired from other starting weights",
        "harness/leaderboard.py",
        '            check_same_start([(name_of(run), run[0]) for run in runs], f"suite {suite_dir.name}")',
        "            pass",
        ["tests/test_provenance.py"],
    ),
    (
        "provenance: the weights digest of the names alone",
        "harness/provenance.py",
        '        h.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")',
        "        pass",
        ["tests/test_provenance.py"],
    ),
    (
        "kernels: MKL's strict mode left out",
        "rollout/kernels.py",
        '    "MKL_CBWR": "AVX2,STRICT",',
        '    "MKL_CBWR": "AUTO",',
        ["tests/test_kernels.py"],
    ),
    # #49: behaviours an independent mutation round found unpinned
    (
        "pin: pass@k at n - c = k",
        "algorithms/base.py",
        "    if n - c < k:",
        "    if n - c <= k:",
        ["tests/test_feedback.py"],
    ),
    (
        "pin: the interquartile mean as the median",
        "harness/across_tasks.py",
        "    return float(stats.trim_mean(np.concatenate(samples), 0.25))",
        "    return float(np.median(np.concatenate(samples)))",
        ["tests/test_across_tasks.py"],
    ),
    (
        "pin: rank() ignores srun's SLURM_PROCID",
        "rollout/distributed.py",
        '    launched = os.environ.get("RANK") or (os.environ.get("SLURM_PROCID") if "SLURM_NTASKS" in os.environ else None)',
        '    launched = os.environ.get("RANK")',
        ["tests/test_distributed.py::test_before_the_process_group_the_rank_is_the_launchers"],
    ),
    (
        "pin: the step-0 evaluation's key without max_new_tokens",
        "harness/driver.py",
        '                "max_new_tokens": module.sampling.max_new_tokens,',
        "",
        ["tests/test_driver.py::test_the_step_zero_evaluation_is_reused_only_at_the_same_length_limit"],
    ),
    (
        "pin: a run folder without spec.json skipped as finished",
        "harness/driver.py",
        "        if before != spec:",
        "        if before is not None and before != spec:",
        ["tests/test_driver.py::test_a_folder_without_its_settings_is_moved_aside_not_skipped_or_resumed"],
    ),
    (
        "pin: DAPO's loss aggregation the suite's",
        "algorithms/dapo.py",
        '"clip_high": 0.28, "loss_aggregation": "token-mean"}',
        '"clip_high": 0.28}',
        ["tests/test_zoo.py::test_dapos_own_defaults_token_mean_and_a_fifth_of_the_length_as_its_overlong_buffer"],
    ),
    (
        "pin: DAPO's overlong buffer a quarter of the length",
        "algorithms/dapo.py",
        "self.sampling.max_new_tokens // 5 if overlong_buffer is None",
        "self.sampling.max_new_tokens // 4 if overlong_buffer is None",
        ["tests/test_zoo.py::test_dapos_own_defaults_token_mean_and_a_fifth_of_the_length_as_its_overlong_buffer"],
    ),
    (
        "pin: verify/unjudged counts groups",
        "algorithms/base.py",
        '"verify/unjudged": int((~judged).sum()),',
        '"verify/unjudged": int((~judged).view(-1, self.group_size).any(-1).sum()),',
        ["tests/test_unjudged.py"],
    ),
    (
        "pin: a float tolerance relative only",
        "tasks/sandbox/judge.py",
        "math.isclose(x, y, rel_tol=tolerance, abs_tol=tolerance)",
        "math.isclose(x, y, rel_tol=tolerance)",
        [
            "tests/test_sandbox_stdio.py::test_the_output_rule_tokens_alike_and_numbers_within_the_tolerance_absolute_or_relative"
        ],
    ),
    (
        "pin: numbers compared as numbers without a tolerance",
        "tasks/sandbox/judge.py",
        "        if tolerance is None:\n            return False",
        "        if tolerance is None:\n            tolerance = 0.0",
        [
            "tests/test_sandbox_stdio.py::test_the_output_rule_tokens_alike_and_numbers_within_the_tolerance_absolute_or_relative"
        ],
    ),
    (
        "pin: evaluate's higher and lower swapped",
        "harness/evaluate.py",
        'else "higher"\n                if paired_higher([(rewards, first)])\n                else "lower",',
        'else "lower"\n                if paired_higher([(rewards, first)])\n                else "higher",',
        ["tests/test_evaluate.py::test_the_comparison_with_the_first_checkpoint_says_which_way_it_goes"],
    ),
    (
        "pin: evaluate's fingerprint without the modification time",
        "harness/evaluate.py",
        "[f.stat().st_size, f.stat().st_mtime_ns]",
        "[f.stat().st_size]",
        ["tests/test_evaluate.py::test_a_weights_folder_rewritten_at_the_same_size_is_evaluated_again"],
    ),
    (
        "pin: SLURM's tasks a node and nodes forced to 1",
        "harness/slurm.py",
        'executor.update_parameters(tasks_per_node=tasks, nodes=nodes if cluster != "local" else 1)',
        "executor.update_parameters(tasks_per_node=1, nodes=1)",
        ["tests/test_slurm.py::test_under_slurm_a_run_asks_for_a_task_a_device_on_each_of_its_nodes"],
    ),
    (
        "pin: a stdio run's whole limit without its cases (task)",
        "tasks/code.py",
        "return tests.budget_s(self.timeout_s) if isinstance(tests, StdioCases) else self.timeout_s",
        "return self.timeout_s",
        ["tests/test_code_files.py::test_a_stdio_runs_whole_limit_grows_with_its_cases"],
    ),
    (
        "pin: a stdio run's whole limit without its cases (budget)",
        "tasks/sandbox/verdict.py",
        "return start_s + self.case_timeout_s * len(self.inputs)",
        "return start_s + self.case_timeout_s",
        ["tests/test_code_files.py::test_a_stdio_runs_whole_limit_grows_with_its_cases"],
    ),
    (
        "pin: a case allowed twice its limit",
        "tasks/sandbox/candidate.py",
        "deadline, pause, status = time.monotonic() + limit_s, 0.0002, None",
        "deadline, pause, status = time.monotonic() + 2 * limit_s, 0.0002, None",
        ["tests/test_sandbox_stdio.py::test_a_case_is_stopped_at_its_own_limit_not_later"],
    ),
    (
        "pin: a stub starting with an import taken as written",
        "tasks/sandbox/judge.py",
        "    bare = (ast.Pass, ast.Import, ast.ImportFrom)",
        "    bare = (ast.Pass,)",
        [
            "tests/test_sandbox_namespace.py::test_a_stub_whose_body_is_an_import_and_a_docstring_is_the_programs_to_write"
        ],
    ),
    (
        "pin: a partial score counted as a pass",
        "rollout/batch.py",
        "    return reward >= 1.0",
        "    return reward > 0.5",
        ["tests/test_feedback.py::test_a_partial_score_is_no_pass_for_pass_at_k_the_paired_test_or_the_outcome"],
    ),
    (
        "pin: sampled pass@k counts any reward as a pass",
        "algorithms/base.py",
        "passed += solved(rewards).sum(-1).tolist()",
        "passed += (rewards > 0).sum(-1).tolist()",
        ["tests/test_feedback.py::test_a_partial_score_is_no_pass_for_pass_at_k_the_paired_test_or_the_outcome"],
    ),
    (
        "pin: evaluate's key without the sampling settings",
        "harness/evaluate.py",
        '                "sampling": asdict(settings["sampling"]),\n',
        "",
        ["tests/test_evaluate.py::test_an_evaluation_is_read_back_only_under_the_same_sampling"],
    ),
    (
        "pin: the summary's IQM interval pooled over tasks",
        "harness/across_tasks.py",
        "        low, high = interval(iqm, mine)",
        "        low, high = interval(iqm, [np.concatenate(mine)])",
        ["tests/test_across_tasks.py::test_the_summarys_intervals_resample_within_each_task"],
    ),
    (
        "pin: the summary's P(improvement) interval pooled over tasks",
        "harness/across_tasks.py",
        'row["p_low"], row["p_high"] = interval(probability_of_improvement, pairs)',
        'row["p_low"], row["p_high"] = interval(probability_of_improvement, [np.concatenate(pairs[::2]), np.concatenate(pairs[1::2])])',
        ["tests/test_across_tasks.py::test_the_summarys_intervals_resample_within_each_task"],
    ),
    (
        "ppo: advantages whitened per process (#50)",
        "algorithms/ppo.py",
        "    if distributed.world_size() == 1:",
        "    if True:",
        ["tests/test_ppo.py::test_advantages_are_whitened_over_every_processs_tokens"],
    ),
    (
        "reinforce++: unbiased variance (#50, OpenRLHF's parity)",
        "algorithms/reinforce_pp.py",
        "    variance = distributed.total(float(((advantages - mean).pow(2) * mask).sum())) / count",
        "    variance = distributed.total(float(((advantages - mean).pow(2) * mask).sum())) / (count - 1)",
        ["tests/test_zoo.py::test_reinforce_pp_equals_openrlhfs_code_on_the_action_tokens"],
    ),
    (
        "ppo: GAE's lambda ignored (#50, verl's parity)",
        "algorithms/ppo.py",
        "    decay = torch.where(distance >= 0, (gamma * lam) ** distance.clamp(min=0), 0.0)",
        "    decay = torch.where(distance >= 0, gamma ** distance.clamp(min=0), 0.0)",
        ["tests/test_ppo.py::test_gae_and_whitening_equal_verls_on_the_mask"],
    ),
    (
        "gigpo: the invalid-action penalty on the step level only (#50)",
        "algorithms/gigpo.py",
        "    scores = [rewards[i] - penalty[i][t] for i, t in turns]",
        "    scores = [rewards[i] for i, t in turns]",
        ["tests/test_gigpo.py::test_literal_numbers_with_verl_agents_invalid_action_penalty"],
    ),
    (
        "gigpo: the invalid-action penalty off the step level (#50, verl-agent's parity)",
        "algorithms/gigpo.py",
        "    returns = [[value - cost for value, cost in zip(row, costs)] for row, costs in zip(raw, penalty)]",
        "    returns = raw",
        ["tests/test_gigpo.py::test_gigpo_with_the_invalid_action_penalty_equals_verl_agents_code"],
    ),
    (
        "alfworld: every command recorded as taken (#50)",
        "tasks/alfworld/task.py",
        "                valid=r.observation.strip() != INVALID_ANSWER,",
        "                valid=True,",
        ["tests/test_feedback.py::test_alfworld_feedback_is_the_outcome_only"],
    ),
    (
        "fidelity: lift without the uniform share (#51)",
        "algorithms/fidelity.py",
        "    uniform = sum(on_error) / len(on_error)",
        "    uniform = 1.0",
        ["tests/test_fidelity.py"],
    ),
    (
        "fidelity: praise counted as blame (#51)",
        "algorithms/fidelity.py",
        "    weights = [max(a, 0.0) if succeeded else max(-a, 0.0) for a in advantages]",
        "    weights = [abs(a) for a in advantages]",
        ["tests/test_fidelity.py"],
    ),
    (
        "math: the steps after the first wrong one left out (#51)",
        "tasks/math.py",
        "            spans = [step.span() for step in steps[k:]]",
        "            spans = [steps[k].span()]",
        ["tests/test_fidelity.py"],
    ),
    (
        "alfworld: the first error taken from a later wrong command (#51, planned up to it)",
        "tasks/alfworld/task.py",
        "        return next(wrong_commands(game, completion, max_turns), None)",
        "        return ([*wrong_commands(game, completion, max_turns)] or [None])[-1]",
        ["tests/test_alfworld_task.py::test_error_spans_are_the_commands_that_leave_every_shortest_plan"],
    ),
    (
        "alfworld: the first error planned through the whole episode (#51)",
        "tasks/alfworld/task.py",
        "        return next(wrong_commands(game, completion, max_turns), None)",
        "        wrong = [*wrong_commands(game, completion, max_turns)]\n        return wrong[0] if wrong else None",
        ["tests/test_alfworld_task.py::test_the_first_error_is_planned_only_up_to_it"],
    ),
    (
        "fidelity: a rollout's error located again by each reader (#51)",
        "algorithms/fidelity.py",
        "    rows = [row for row in rows if row not in located]\n",
        "    rows = list(rows)\n",
        ["tests/test_fidelity.py::test_a_steps_fidelity_reads_the_located_rollouts_with_their_own_tokens"],
    ),
    (
        "alfworld: forked pools terminated (#52, the bench's hang)",
        "tasks/workers.py",
        "Pool(processes, initializer=_default_sigterm) as pool:\n"
        "        results = pool.starmap(function, jobs, chunksize=1)\n        pool.close()\n        pool.join()\n",
        "Pool(processes) as pool:\n        results = pool.starmap(function, jobs, chunksize=1)\n",
        ["tests/test_alfworld_games.py::test_forked_workers_end_under_a_trainer_that_keeps_sigterm"],
    ),
    (
        "alfworld: games step beside decoding whatever the cores (#52)",
        "rollout/episodes.py",
        '    return engine.model.device.type != "cpu" or (os.cpu_count() or 1) > torch.get_num_threads()\n',
        "    return True\n",
        ["tests/test_alfworld_task.py::test_games_step_beside_decoding_only_where_a_core_is_spare"],
    ),
    (
        "alfworld: a command looked for among one fewer derived commands (#52)",
        "tasks/alfworld/env.py",
        "        while len(self.derived) <= (i if i >= 0 else len(self) + i):\n",
        "        while len(self.derived) < (i if i >= 0 else len(self) + i):\n",
        ["tests/test_alfworld_games.py::test_an_env_that_lists_no_commands_plays_as_stock_and_derives_fewer"],
    ),
    # #54: reasoning-gym's task
    (
        "reasoning-gym: the scorer not confined",
        "tasks/reasoning_gym/worker.py",
        "            if not confined:\n                confine()\n",
        "            if not confined:\n                pass\n",
        [
            "tests/test_reasoning_gym.py::test_an_answer_the_scorer_evaluates_reaches_nothing_and_one_that_hangs_scores_zero"
        ],
    ),
    (
        "reasoning-gym: the generators under the caller's hash seed",
        "tasks/reasoning_gym/scorer.py",
        '"PYTHONHASHSEED": HASH_SEED, ',
        "",
        ["tests/test_reasoning_gym.py::test_a_split_is_the_same_in_processes_with_different_hash_seeds"],
    ),
    (
        "reasoning-gym: a question met before taken again",
        "tasks/reasoning_gym/task.py",
        "                if question in seen or len(out) == count:",
        "                if len(out) == count:",
        ["tests/test_reasoning_gym.py::test_splits_are_disjoint_deduplicated_and_mixed_in_every_prefix"],
    ),
    (
        "reasoning-gym: another problem's answer not probed",
        "tasks/reasoning_gym/task.py",
        "            elif other is not None and wrong >= 1.0:",
        "            elif False:",
        ["tests/test_reasoning_gym.py::test_a_broken_scorer_is_refused_with_its_name"],
    ),
    (
        "reasoning-gym: a partial score rewarded without partial credit",
        "tasks/reasoning_gym/task.py",
        "            elif self.partial_credit and score > 0:",
        "            elif score > 0:",
        ["tests/test_reasoning_gym.py::test_partial_credit_is_the_scorers_value_only_when_asked"],
    ),
    # #54: OpenEnv's task
    (
        "openenv: two resets of one seed not compared",
        "tasks/openenv/task.py",
        "            if first != again:",
        "            if False:",
        ["tests/test_openenv.py::test_an_environment_that_drops_its_seed_is_refused"],
    ),
    (
        "openenv: an episode's reset not compared with its problem's start",
        "tasks/openenv/task.py",
        "            if answer_text(first, False) == p.prompt",
        "            if True",
        ["tests/test_openenv.py::test_an_episode_whose_reset_differs_from_its_problem_is_unjudged"],
    ),
    (
        "openenv: the environment's exception judged as the policy's failure",
        "tasks/openenv/worker.py",
        '            return Answer("\\n", "", True, failed=f"the environment raised {error!r}"[:200])',
        '            return Answer("\\n", "", True)',
        ["tests/test_openenv.py::test_the_environments_exception_is_unjudged_and_a_refused_action_the_policys"],
    ),
    # #48: the sandbox's third round
    (
        "round three: what a case left running goes on",
        "tasks/sandbox/candidate.py",
        "        pass\n    _end_leftovers()\n",
        "        pass\n",
        [ROUND_THREE + "test_work_left_running_by_a_case_does_not_reach_the_next_one"],
    ),
    (
        "round three: a script not ended as the interpreter ends it",
        "tasks/sandbox/candidate.py",
        "            _finalize(atexit)\n",
        "",
        [ROUND_THREE + "test_honest_stdio_programs_of_every_common_shape_pass_and_their_broken_variants_fail"],
    ),
    (
        "round three: a case's report taken as written",
        "tasks/sandbox/candidate.py",
        "        return _checked_report(report)",
        "        return report",
        [ROUND_THREE + "test_a_case_cannot_choose_the_judges_words_through_its_report_pipe"],
    ),
    (
        "round three: feedback not made valid text",
        "rollout/batch.py",
        'text = self.feedback.encode("utf-8", "replace").decode("utf-8")',
        "text = self.feedback",
        [ROUND_THREE + "test_any_verdicts_feedback_is_made_valid_text_and_bounded"],
    ),
    (
        "round three: integers within a tolerance",
        "tasks/sandbox/judge.py",
        "        if _integer(a) and _integer(b):",
        "        if False:",
        [
            "tests/test_sandbox_stdio.py::test_the_output_rule_tokens_alike_and_numbers_within_the_tolerance_absolute_or_relative"
        ],
    ),
    (
        "round three: the whole of /proc in the view",
        "tasks/sandbox/kernel.py",
        '    steps.append(("proc", place("/proc", True), masks))',
        '    steps.append(("bind", "/proc", place("/proc", True), MS_NOSUID | MS_NODEV | MS_NOEXEC))',
        [ROUND_THREE + "test_the_machines_counters_that_a_concurrent_run_moves_are_not_in_view"],
    ),
    (
        "round three: the counters left unmasked without subsets",
        "tasks/sandbox/kernel.py",
        "    for path in masks:\n",
        "    for path in ():\n",
        [ROUND_THREE + "test_without_procfs_subsets_the_machines_counters_are_masked_one_by_one"],
    ),
    (
        "round three: RWF_NOWAIT allowed",
        "tasks/sandbox/syscall_filter.py",
        '        for name in ("preadv2", "pwritev2"):  # flags: the sixth argument',
        "        for name in ():  # flags: the sixth argument",
        [ROUND_THREE + "test_whether_a_page_is_cached_cannot_be_asked_without_waiting"],
    ),
    (
        "round three: a Counter not rebuilt",
        "tasks/sandbox/candidate.py",
        "        if kind is collections.Counter:",
        "        if False:",
        [
            ROUND_THREE
            + "test_honest_function_call_programs_of_the_standard_librarys_values_pass_and_their_broken_variants_fail"
        ],
    ),
    (
        "round three: a stand-in compared with the tests' values",
        "tasks/sandbox/judge.py",
        "            return _operation(name, self, other) if type(other) is Remote else NotImplemented",
        "            return _operation(name, self, other)",
        [ROUND_THREE + "test_an_object_of_the_programs_never_decides_a_comparison_with_a_value_of_the_tests"],
    ),
    (
        "round three: arithmetic on a held object answered plain",
        "tasks/sandbox/candidate.py",
        "                if name in ARITHMETIC:",
        "                if False:",
        [ROUND_THREE + "test_an_object_of_the_programs_never_decides_a_comparison_with_a_value_of_the_tests"],
    ),
    (
        "round three: objects given before the tests call a class",
        "tasks/sandbox/judge.py",
        "            if is_class and not objects_on:",
        "            if not objects_on:",
        [ROUND_THREE + "test_an_object_of_the_programs_is_refused_while_the_tests_use_none_of_its_classes"],
    ),
    (
        "round three: the tests' callable handed over",
        "tasks/sandbox/judge.py",
        "        if callable(value):\n            callbacks.append(value)",
        "        if False:\n            callbacks.append(value)",
        [
            ROUND_THREE
            + "test_honest_programs_with_their_own_classes_or_the_tests_callables_pass_and_their_broken_variants_fail"
        ],
    ),
    (
        "round three: the judge as the OOM killer's equal of the worker",
        "tasks/sandbox/layout.py",
        "    _oom_score_adj(500)\n",
        "",
        [ROUND_THREE + "test_out_of_memory_the_candidate_goes_first_then_its_judge_never_the_worker_before_them"],
    ),
]


def scratch_copy() -> Path:
    """The working tree as git sees it (tracked files, and new ones it does not ignore) in a scratch
    folder (runs/ and caches left behind, and of results/ only the compact records: runs.json, which
    tests/test_leaderboard.py checks against the configs, and the studies' records, from which
    tests/test_verdicts.py measures its planning figures)."""
    folder = Path(tempfile.mkdtemp(prefix="mutants-"))
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in files:
        records = name.endswith(("/runs.json", "/steps.parquet", "/evaluations.parquet"))
        published = name.startswith("results/") and not records
        if published or not (ROOT / name).is_file():  # a tracked file deleted here
            continue
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return folder


def run(folder: Path, tests: list[str], timeout_s: int) -> tuple[bool, float]:
    """(whether the tests failed, seconds); `python -m pytest` from the copy imports the copy."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=folder,
            capture_output=True,
            timeout=timeout_s,
        )
        failed = done.returncode != 0
    except subprocess.TimeoutExpired:
        failed = True
    return failed, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="mutants whose name contains one of these")
    parser.add_argument("--since", help="only mutants of files changed since this git revision")
    parser.add_argument("--out", help="write the table here too")
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or any(o in m[0] for o in args.only)]
    if args.since:
        changed = subprocess.run(
            ["git", "diff", "--name-only", args.since], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
        chosen = [m for m in chosen if m[1] in changed]
    folder = scratch_copy()
    probe = subprocess.run(
        [sys.executable, "-c", "import algorithms; print(algorithms.__file__)"],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    assert probe.stdout.startswith(str(folder)), f"the copy does not import itself: {probe.stdout} {probe.stderr}"
    failed, _ = run(folder, sorted({t for m in chosen for t in m[4]}), args.timeout)
    assert not failed, "the tests fail on the unmutated tree"
    rows, killed = [], 0
    for name, path, old, new, tests in chosen:
        source = (folder / path).read_text()
        assert source.count(old) == 1, f"{name}: its text occurs {source.count(old)} times in {path}"
        (folder / path).write_text(source.replace(old, new))
        try:
            failed, seconds = run(folder, tests, args.timeout)
        finally:
            (folder / path).write_text(source)
        killed += failed
        rows.append(f"| {name} | `{path}` | {'killed' if failed else '**survived**'} | {seconds:.0f} |")
        print(rows[-1], flush=True)
    table = "\n".join(
        [
            f"{killed} of {len(chosen)} mutants killed ({100 * killed / len(chosen):.0f}%).",
            "",
            "| mutant | file | result | test seconds |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
