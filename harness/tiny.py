"""The embedded default policy: a tiny Qwen3 built from a config, with a character-level tokenizer.

Nothing is downloaded. The tokenizer is a `tokenizers` BPE with no merges over printable ASCII, so
every character is one token; that keeps the vocabulary (and the [T, V] logits) tiny and makes
any task's text representable. `save_tiny` writes a directory that AutoTokenizer and
AutoModelForCausalLM load like any other checkpoint.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

from harness.settings import TinyConfig

PAD, EOS = "<|pad|>", "<|endoftext|>"
CHARACTERS = [c for c in string.printable if c not in "\r\x0b\x0c"]  # 97: ASCII + space, \t, \n


def build_tokenizer(
    corpus: Iterable[str] | None = None, vocabulary: int = 0, fill_to: int = 0, split_digits: bool = False
) -> PreTrainedTokenizerFast:
    """Characters only, or (vocabulary > 0) a BPE trained on `corpus` over the same alphabet, so
    any printable text stays representable. Training is deterministic in the corpus. `fill_to`:
    characters followed by filler tokens `<|f0|>`, `<|f1|>`, ... up to that many ids, so that
    every id of a real model's vocabulary decodes (a random model samples any of them)."""
    if vocabulary:
        core = Tokenizer(models.BPE(unk_token=None))
        core.pre_tokenizer = pre_tokenizers.Split("\n", behavior="isolated")
        if split_digits:
            core.pre_tokenizer = pre_tokenizers.Sequence(
                [core.pre_tokenizer, pre_tokenizers.Digits(individual_digits=True)]
            )
        trainer = trainers.BpeTrainer(
            vocab_size=vocabulary, special_tokens=[PAD, EOS], initial_alphabet=CHARACTERS, show_progress=False
        )
        core.train_from_iterator(corpus, trainer=trainer)
    else:
        names = [PAD, EOS, *CHARACTERS]
        names += [f"<|f{i}|>" for i in range(fill_to - len(names))]
        vocab = {token: i for i, token in enumerate(names)}
        core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=PAD, padding_side="left")


def build_model(config: TinyConfig, tokenizer: PreTrainedTokenizerFast) -> torch.nn.Module:
    qwen_config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(config.init_seed)
    return AutoModelForCausalLM.from_config(qwen_config, dtype=torch.float32)


def save_tiny(config: TinyConfig, directory: Path, corpus: Iterable[str] | None = None) -> Path:
    """Write an untrained tiny model and its tokenizer to `directory` (from_pretrained-loadable).
    `corpus`: the texts a `vocabulary` > 0 is trained on."""
    if config.vocabulary and corpus is None:
        raise ValueError("tiny.vocabulary > 0 needs a corpus to train the tokenizer on")
    tokenizer = build_tokenizer(corpus, config.vocabulary, split_digits=config.split_digits)
    model = build_model(config, tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "tiny_config.txt").write_text(repr(asdict(config)))
    return directory
