"""Chat templates stored in GGUF metadata (``tokenizer.chat_template``, a Jinja2 template in the
Hugging Face convention), rendered in Jinja2's immutable sandbox: a template comes from a downloaded
file, so it may not touch Python objects beyond the values passed in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from npukit.errors import ModelError


def _raise(message: str) -> None:
    raise ModelError(f"chat template: {message}")


def apply_chat_template(template: str | None, messages: Sequence[Mapping[str, str]], *,
                        add_generation_prompt: bool = True, bos_token: str = "",
                        eos_token: str = "") -> str:
    """The prompt text ``template`` makes of ``messages`` (``{"role": ..., "content": ...}``)."""
    if not template:
        raise ModelError("this model has no chat template (a base model: pass plain text)")
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    try:
        return env.from_string(template).render(
            messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
            bos_token=bos_token, eos_token=eos_token, raise_exception=_raise)
    except jinja2.TemplateError as exc:
        raise ModelError(f"chat template: {exc}") from None


def chat_prompt(tokenizer: Any, info: Any, messages: Sequence[Mapping[str, str]],
                add_generation_prompt: bool = True) -> str:
    """`apply_chat_template` with the special tokens a GGUF tokenizer and its `GGUFTokenizerInfo` name."""
    def text(i: int | None) -> str:
        return "" if i is None else str(tokenizer.id_to_token(i))

    return apply_chat_template(info.chat_template, messages, add_generation_prompt=add_generation_prompt,
                               bos_token=text(info.bos_id), eos_token=text(info.eos_id))
