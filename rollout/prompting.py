"""How a task's prompt reaches the policy: as plain text (the tiny model's `Q: ...\nA:`), or
through the tokenizer's chat template, as instruction-tuned checkpoints were trained."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ChatFormat:
    """The task's prompt as the user's message of a chat, rendered by the tokenizer's template
    with the assistant's turn opened (`add_generation_prompt`)."""

    system: str | None = None
    """A system message before it (None: none)."""
    enable_thinking: bool | None = None
    """Qwen3's thinking switch, passed to the template (None: the template's default)."""


def render(tokenizer, prompt: str, chat: ChatFormat | None) -> str:
    """The text the policy is prompted with: `prompt` itself, or its chat rendering."""
    if chat is None:
        return prompt
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("sampling.chat: the tokenizer has no chat template (tokenizer_config.json's chat_template)")
    messages = [{"role": "system", "content": chat.system}] if chat.system else []
    messages.append({"role": "user", "content": prompt})
    switches = {} if chat.enable_thinking is None else {"enable_thinking": chat.enable_thinking}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **switches)
