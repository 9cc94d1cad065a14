"""The step-0 evaluation, measured once per suite: every algorithm of a suite starts from the same
weights, so the first run's is reused by the others."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from harness.locks import exclusive
from harness.records import (
    write_json,
)


def start_evaluation(
    suite_dir: Path, weights: Path, module, task_key: dict, precision: str = "32-true"
) -> tuple[str, dict[str, float]]:
    """(the key of this run's step-0 evaluation, the step-0 accuracies the suite has measured).
    Every algorithm of a suite starts from the same weights and evaluation is greedy, so the
    step-0 accuracy is the same for all of them: measured by the suite's first run, reused by
    the others (it is not part of the training wall-clock either way)."""
    key = hashlib.sha1(
        json.dumps(
            {
                # by content: a cache entry rebuilt with other weights under the same path is another start
                "weights": getattr(module, "starting_weights_digest", None) or str(weights),
                "task": task_key,
                # without sampled pass@k, the keys as before
                "evaluation": {
                    k: v
                    for k, v in asdict(module.eval_args).items()
                    if module.eval_args.samples or k not in ("samples", "pass_at")
                },
                "max_new_tokens": module.sampling.max_new_tokens,
                **({"sampling": asdict(module.sampling)} if module.eval_args.samples else {}),
                **({} if precision == "32-true" else {"precision": precision}),  # 32-true: the keys as before
            },
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()[:16]
    path = suite_dir / "start-evaluations.json"
    return key, json.loads(path.read_text()) if path.exists() else {}


def record_start_evaluation(
    suite_dir: Path, start_key: str, weights: Path, module, task_key: dict, precision: str
) -> None:
    """Add this run's step-0 accuracies to the suite's, for its other runs to reuse."""
    with exclusive(suite_dir / ".start-evaluations.lock"):  # other processes may add theirs
        _, measured = start_evaluation(suite_dir, weights, module, task_key, precision)
        start = {k: v for k, v in module.evaluations[0].items() if k != "step"}
        write_json({**measured, start_key: start}, suite_dir / "start-evaluations.json")
