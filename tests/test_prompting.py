"""Real-model prompting: a Qwen3-style chat template, `\\boxed{}` math answers, fenced code."""

import pytest
import yaml

from harness.__main__ import main
from rollout.prompting import ChatFormat, render
from tasks.code import CodeTask
from tasks.math import MathTask

# Qwen3's template, cut to what a single-turn prompt uses (its tools and history handling left out).
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A Qwen3-architecture checkpoint whose tokenizer has Qwen3's chat tokens and template, built here."""
    from harness.tiny import TinyConfig, build_model, build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<think>", "</think>"]})
    tokenizer.chat_template = QWEN3_TEMPLATE
    model = build_model(TinyConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, head_dim=8), tokenizer)
    directory = tmp_path_factory.mktemp("chat-model")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_a_prompt_renders_as_qwen3_chat_with_the_thinking_switch(chat_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    task = MathTask(train_size=5, eval_size=2, answer_format="boxed")
    problem = task.train_problems()[0]
    text = render(
        tokenizer, problem.prompt, ChatFormat(system="You are a careful mathematician.", enable_thinking=False)
    )
    assert text == (
        "<|im_start|>system\nYou are a careful mathematician.<|im_end|>\n"
        f"<|im_start|>user\n{problem.id}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")  # one special token, not 12 characters
    assert render(tokenizer, problem.prompt, None) == problem.prompt
    with pytest.raises(ValueError, match="sampling.chat: the tokenizer has no chat template"):
        tokenizer.chat_template = None
        render(tokenizer, "q", ChatFormat())


def test_a_chat_math_suite_runs_end_to_end_and_verifies_boxed_answers(chat_model, tmp_path):
    spec = {
        "name": "chat",
        "task": {
            "class_path": "tasks.math.MathTask",
            "init_args": {"train_size": 50, "eval_size": 4, "answer_format": "boxed"},
        },
        "model": {"preset": None, "path": str(chat_model), "warm_start": None},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}}},
        "schedule": {"steps": 2, "prompts_per_step": 2},
        "sampling": {"max_new_tokens": 6, "chat": {"system": "Be brief.", "enable_thinking": False}},
        "evaluation": {"every": 2},
    }
    config = tmp_path / "chat.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    from harness.build import build_module
    from harness.config import load_benchmark

    module, _ = build_module(load_benchmark(config).suites[0], "grpo", 0, tmp_path / "cache")
    problem = module.task.train_problems()[0]
    rollouts = module.task.rollout(module.engine, [problem], 1)
    prompt = module.tokenizer.decode(rollouts.input_ids[0][rollouts.attention_mask[0].bool() & ~rollouts.eligible[0]])
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert module.task.verify(problem, f"So the result is \\boxed{{{problem.answer}}}.").reward == 1.0
    assert module.task.verify(problem, f"#### {problem.answer}").reward == 0.0


def test_a_chat_format_needs_a_start_without_warm_start_and_a_single_turn_task(tmp_path, capsys):
    base = {
        "name": "s",
        "task": {"class_path": "tasks.math.MathTask", "init_args": {"eval_size": 4}},
        "algorithms": {"grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 2}}},
        "schedule": {"steps": 1, "prompts_per_step": 2},
        "sampling": {"chat": {}},
    }
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"suites": [base]}))
    assert main(["run", str(config)]) == 2
    assert "suites[0].sampling.chat: the warm start trains on plain prompts" in capsys.readouterr().err


def test_fenced_code_answers_run_their_last_block_after_the_prompts_code():
    task = CodeTask(train_size=5, eval_size=2, answer_format="fenced")
    problem = task.eval_problems()[0]
    code = task.code_prompts[problem.id]
    assert problem.prompt.startswith("Complete the following Python function.")
    assert problem.prompt.endswith(f"```python\n{code}```")
    assert task.verify(problem, problem.demonstration).reward == 1.0
    answer = "Here it is:\n```python\nprint('draft')\n```\nand finally\n" + problem.demonstration
    assert task.verify(problem, answer).reward == 1.0  # the last block is the one that runs
    plain = task.verify(problem, "def f(xs):\n    return 0")
    assert plain.reward == 0.0 and "no ```python code block" in plain.feedback
