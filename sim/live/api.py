"""The OpenAI-compatible protocol of ``pagesim serve``: request bodies in, response
chunks out. Pure functions of JSON values; no HTTP here (sim.live.server).

What a body may hold (``/v1/completions``; ``/v1/chat/completions`` takes ``messages``
instead of ``prompt``)::

    prompt        token ids (a list of ints, as vLLM takes), or text
    max_tokens    output tokens to generate (default 16); every request generates
                  exactly this many: the model has no end-of-sequence token, so
                  ``ignore_eos`` is accepted and always in effect
    n             samples (default 1), decoded side by side from one prompt
    stream        server-sent events (default false: one JSON answer at the end)
    stream_options.include_usage   a last event with the token counts
    priority      an integer for priority schedulers (larger = sooner, pagesim's rule)
    cache_salt    the prefix-cache tenant: ``tenant-<k>`` is tenant k, other text a
                  stable hash (requests share cached prefixes only within a tenant)

Text is made of words, one token each: a word that is a decimal number below the
vocabulary size is that token id, any other word a stable hash of it into the
vocabulary (the tiny model has no tokenizer). A token's text is a space and its id, so
what the server returns reads back as the same ids.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, NamedTuple

from sim.config.workload import STREAM_STRIDE


class BadRequest(ValueError):
    """A body the server cannot serve; the message is one line (HTTP 400)."""


class Ask(NamedTuple):
    """What a body asks for, checked."""

    prompt: list[int]
    max_tokens: int
    n: int
    stream: bool
    include_usage: bool
    priority: int
    tenant: int


def word_id(word: str, vocab_size: int) -> int:
    """The token id of one word (module docstring)."""
    if word.isdecimal() and len(word) <= 18 and int(word) < vocab_size:
        return int(word)
    # surrogatepass: a lone surrogate (valid JSON, not valid UTF-8) hashes as written
    digest = hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % vocab_size


def _text_ids(text: str, vocab_size: int) -> list[int]:
    return [word_id(word, vocab_size) for word in text.split()]


def _prompt_ids(body: dict, chat: bool, vocab_size: int) -> list[int]:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages: expected a non-empty list of {role, content}")
        texts = []
        for i, message in enumerate(messages):
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, str):
                raise BadRequest(f"messages[{i}].content: expected a text")
            texts.append(content)
        return _text_ids("\n".join(texts), vocab_size)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str):
        return _text_ids(prompt, vocab_size)
    if isinstance(prompt, list) and all(_is_int(t) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise BadRequest(f"prompt: token id {bad[0]} is outside [0, {vocab_size})")
        return list(prompt)
    raise BadRequest("prompt: expected a text or a list of token ids")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(body: dict, name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if value is None:
        value = default
    if not _is_int(value) or not low <= value <= high:
        raise BadRequest(f"{name}: expected an integer in [{low}, {high}], got {value!r:.40}")
    return value


def tenant_of(salt: Any) -> int:
    """The tenant a ``cache_salt`` names (0 for none)."""
    if salt is None or salt == "":
        return 0
    text = str(salt)
    number = text.removeprefix("tenant-")
    if number.isdecimal() and int(number) < 2**31:
        return int(number)
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "little") >> 1


def parse(body: Any, *, chat: bool, vocab_size: int, max_model_len: int) -> Ask:
    """Check a request body; raises BadRequest naming the field."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    prompt = _prompt_ids(body, chat, vocab_size)
    if not prompt:
        raise BadRequest("prompt: empty")
    room = max_model_len - len(prompt)
    if room < 1:
        raise BadRequest(f"prompt: {len(prompt)} tokens fill max_model_len {max_model_len}")
    key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    max_tokens = _integer(body, key, min(16, room), 1, room)
    n = _integer(body, "n", 1, 1, STREAM_STRIDE - 1)
    priority = _integer(body, "priority", 0, -(2**31), 2**31 - 1)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("stream_options: expected an object")
    return Ask(
        prompt,
        max_tokens,
        n,
        bool(body.get("stream", False)),
        bool(options.get("include_usage", False)),
        priority,
        tenant_of(body.get("cache_salt")),
    )


def token_text(token_id: int) -> str:
    return f" {token_id}"


class Chunks:
    """The JSON objects one response is made of (completions or chat flavour)."""

    def __init__(self, req_id: int, model: str, chat: bool):
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{req_id}"
        self.model = model
        self.chat = chat
        self.created = int(time.time())

    def _event(self, choices: list[dict], usage: dict | None = None) -> dict:
        event = {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            event["usage"] = usage
        return event

    def _choice(self, index: int, text: str, finish: str | None) -> dict:
        if self.chat:
            return {
                "index": index,
                "delta": {"content": text} if text else {},
                "finish_reason": finish,
            }
        return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}

    def tokens(self, index: int, text: str) -> dict:
        return self._event([self._choice(index, text, None)])

    def finish(self, index: int) -> dict:
        return self._event([self._choice(index, "", "length")])

    def usage(self, prompt: int, completion: int, cached: int) -> dict:
        return self._event([], usage_of(prompt, completion, cached))

    def whole(self, texts: list[str], usage: dict) -> dict:
        """A non-streamed answer: every choice's whole text."""
        kind = "chat.completion" if self.chat else "text_completion"
        choices = []
        for index, text in enumerate(texts):
            choice = {"index": index, "finish_reason": "length"}
            if self.chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice.update(text=text, logprobs=None)
            choices.append(choice)
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage,
        }


def usage_of(prompt: int, completion: int, cached: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def error_body(message: str, kind: str = "BadRequestError", code: int = 400) -> dict:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
