"""``echo`` on /v1/completions, on the worker's side: each choice's output starts with its prompt,
as OpenAI's legacy API answers (``echo: true``), with the prompt tokens' log-probabilities when
``logprobs`` is asked for (the first token's is null: nothing comes before it).

The prompt goes out as one ``delta`` event per choice before the choice is submitted, so a
formatter adds it up like any output (the body's text, logprobs and text offsets; in a stream,
the first chunk). The log-probabilities are scored apart from generation
(``inference.engine.prompt_logprobs``: a window per engine call, once per prompt for all its
choices). ``max_tokens`` 0 (``GenerationJob.echo_only``) scores without generating: each choice
then ends there, ``finish_reason`` "length" and no completion tokens.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Union

from inference.engine.prompt_logprobs import prompt_logprobs

Publish = Callable[[str, dict], None]


def prompt_entries(engine, ids: List[int], top: int) -> List[dict]:
    """The prompt's logprob entries as generation events carry them ({"token", "logprob",
    "bytes", "top"}); the first has logprob None and top None."""
    tokenizer = engine.tokenizer

    def entry(token_id: int, logprob: Optional[float]) -> dict:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    adapter = getattr(engine, "adapter_name", None)  # a LoRA adapter's requests (pool.engines)
    scored = prompt_logprobs(engine, ids, top, adapter=adapter) if len(ids) > 1 else []
    first = dict(entry(ids[0], None), top=None)
    return [first] + [dict(entry(s.token_id, s.logprob), top=[entry(t, p) for t, p in s.top]) for s in scored]


def echo_delta(index: int, prompt: Union[str, List[int]], ids: List[int], tokenizer, entries) -> dict:
    """The event that starts choice ``index`` with its prompt (``entries``: None without logprobs)."""
    text = prompt if isinstance(prompt, str) else tokenizer.decode(ids)
    return {
        "kind": "delta",
        "index": index,
        "text": text,
        "reasoning": "",
        "tool_calls": [],
        "token_ids": [],
        "logprobs": entries,
        "finish_reason": None,
        "usage": None,
        "error": None,
    }


def final_delta(index: int, finish_reason: str, usage: dict, error: Optional[str] = None) -> dict:
    """A choice's last event with no text in it (its end after nothing generated, or a failure)."""
    return {
        "kind": "delta",
        "index": index,
        "text": "",
        "reasoning": "",
        "tool_calls": [],
        "token_ids": [],
        "logprobs": None,
        "finish_reason": finish_reason,
        "usage": usage,
        "error": error,
    }


def end_delta(index: int, prompt_tokens: int) -> dict:
    """The last event of an ``echo_only`` choice: nothing generated."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "hot_cached_tokens": 0,
        "cold_cached_tokens": 0,
    }
    return final_delta(index, "length", usage)
