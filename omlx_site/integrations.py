"""How each coding agent is pointed at an omlx server: one `ClientSetup` per client, built from a
`Target` (the server's URL, its API key, the model).

`omlx launch CLIENT` (omlx_site/commands/launch.py) runs the client with ``setup.env`` added to
its environment, ``setup.args`` before the user's own arguments and ``setup.files`` written under a
folder that omlx owns ($OMLX_HOME/launch/CLIENT/). `omlx launch --print CLIENT` and the console's
Integrations page show ``setup.snippet``: the same values, as a person would set them.

Invariants: nothing here writes or names a file of the user's own (~/.claude, ~/.codex,
~/.config/opencode, ~/.aider*): each client is configured through its environment, its command
line or a config file that the client merges over the user's. The API key travels only in
environment variables (never in a written file). Each client's telemetry and update checks are
turned off through the variables and flags its documentation gives, as omlx is local.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

CLIENTS = ("claude", "codex", "opencode", "aider")
# What `omlx launch` tells a user to run when the client's program is not on PATH.
INSTALL_HINTS = {
    "claude": "npm install -g @anthropic-ai/claude-code",
    "codex": "npm install -g @openai/codex",
    "opencode": "npm install -g opencode-ai",
    "aider": "pip install aider-chat (or: pipx install aider-chat)",
}
TITLES = {"claude": "Claude Code", "codex": "OpenAI Codex CLI", "opencode": "opencode", "aider": "aider"}
# Sent when the server has no API key: every client insists on having one.
NO_KEY = "omlx"
DEFAULT_CONTEXT = 32768  # told to a client when the model's context window is unknown
KEY_ENV = "OMLX_API_KEY"  # the variable that carries the key to codex and opencode


@dataclass(frozen=True)
class Target:
    """The server a client talks to: ``url`` without a trailing slash and without /v1
    (http://127.0.0.1:8000), its API key (None: the server asks for none), the model id and its
    context window."""

    url: str
    api_key: Optional[str]
    model: str
    context_length: Optional[int] = None  # the model's context window, when known


@dataclass
class ClientSetup:
    """What running ``program`` against a Target takes: ``env`` (added to the environment; a
    None value removes the variable), ``args`` (before the user's arguments), ``files`` (name ->
    text, written into the launch folder; ``{dir}`` in env and args stands for that folder) and
    ``snippet`` (the same, for a person to paste)."""

    client: str
    program: str
    env: Dict[str, Optional[str]] = field(default_factory=dict)
    args: List[str] = field(default_factory=list)
    files: Dict[str, str] = field(default_factory=dict)
    snippet: str = ""


def setup(client: str, target: Target, key_text: Optional[str] = None) -> ClientSetup:
    """The ClientSetup of ``client`` (one of CLIENTS; ValueError otherwise). ``key_text`` replaces
    the API key in the snippet (the console shows a placeholder, never the key)."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}; expected one of {', '.join(CLIENTS)}")
    key = target.api_key or NO_KEY
    shown = key_text if (key_text is not None and target.api_key) else key
    built = _BUILDERS[client](target, key)
    built.snippet = _BUILDERS[client](target, shown).snippet
    return built


def _exports(env: Dict[str, Optional[str]]) -> str:
    def quoted(value: str) -> str:
        if value.startswith("$PWD/"):  # left for the shell to expand
            return f'"{value}"'
        return shlex.quote(value)

    lines = [
        f"unset {name}" if value is None else f"export {name}={quoted(value)}" for name, value in env.items()
    ]
    return "\n".join(lines)


def _claude(target: Target, key: str) -> ClientSetup:
    model = target.model
    env = {
        "ANTHROPIC_BASE_URL": target.url,  # Claude Code appends /v1/messages
        "ANTHROPIC_AUTH_TOKEN": key,  # sent as "Authorization: Bearer"; no login prompt
        "ANTHROPIC_API_KEY": None,  # else a real Anthropic key would be sent (and asked about)
        "ANTHROPIC_MODEL": model,
        # Claude Code asks for its other tiers (titles, summaries, subagents) by name: all are ours.
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "CLAUDE_CODE_SUBAGENT_MODEL": model,
        # A local model's first prefill of Claude Code's ~20K-token prompt can take minutes on a CPU.
        "API_TIMEOUT_MS": "3600000",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # telemetry, error reports, auto-update
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    snippet = f"# Claude Code (claude) against omlx: set these, then run `claude`\n{_exports(env)}\nclaude"
    return ClientSetup("claude", "claude", env=env, snippet=snippet)


def _codex(target: Target, key: str) -> ClientSetup:
    # -c overrides on codex's command line: the user's ~/.codex/config.toml is read, never written.
    values = [
        ("model", target.model),
        ("model_provider", "omlx"),
        ("model_providers.omlx.name", "omlx"),
        ("model_providers.omlx.base_url", f"{target.url}/v1"),
        ("model_providers.omlx.env_key", KEY_ENV),
        ("model_providers.omlx.wire_api", "responses"),
        ("check_for_update_on_startup", False),
        ("analytics.enabled", False),
    ]
    args = []
    for name, value in values:
        args += ["-c", f"{name}={json.dumps(value)}"]
    env = {KEY_ENV: key}
    toml = "\n".join(
        [
            f"model = {json.dumps(target.model)}",
            'model_provider = "omlx"',
            "check_for_update_on_startup = false",
            "",
            "[analytics]",
            "enabled = false",
            "",
            "[model_providers.omlx]",
            'name = "omlx"',
            f"base_url = {json.dumps(target.url + '/v1')}",
            f'env_key = "{KEY_ENV}"',
            'wire_api = "responses"',
        ]
    )
    snippet = (
        f"# OpenAI Codex CLI (codex) against omlx: add to ~/.codex/config.toml\n{toml}\n\n"
        f"# and set the key codex sends\n{_exports(env)}\ncodex"
    )
    return ClientSetup("codex", "codex", env=env, args=args, snippet=snippet)


def opencode_config(target: Target) -> dict:
    """opencode's config: an OpenAI-compatible provider "omlx" with the one model. The key is
    read from $OMLX_API_KEY by opencode ({env:...}), so the file holds no secret."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "omlx": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "omlx",
                "options": {"baseURL": f"{target.url}/v1", "apiKey": "{env:%s}" % KEY_ENV},
                "models": {target.model: _opencode_model(target)},
            }
        },
        "model": f"omlx/{target.model}",
        "small_model": f"omlx/{target.model}",
        "autoupdate": False,
        "share": "disabled",
    }


def _output_limit(window: int) -> int:
    """The longest reply a client should ask for: a quarter of the window, at most 8192 tokens."""
    return max(1, min(8192, window // 4))


def _opencode_model(target: Target) -> dict:
    model = {"name": target.model}
    if target.context_length:
        model["limit"] = {"context": target.context_length, "output": _output_limit(target.context_length)}
    return model


def _opencode(target: Target, key: str) -> ClientSetup:
    text = json.dumps(opencode_config(target), indent=2) + "\n"
    env = {
        # opencode merges this file over the user's own config (which stays as it is).
        "OPENCODE_CONFIG": "{dir}/opencode.json",
        KEY_ENV: key,
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",  # the model catalogue is downloaded otherwise
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    }
    shown = dict(env, OPENCODE_CONFIG="$PWD/omlx-opencode.json")
    snippet = (
        f"# opencode against omlx: save as omlx-opencode.json (or merge into "
        f"~/.config/opencode/opencode.json)\n{text}\n# then\n{_exports(shown)}\nopencode"
    )
    return ClientSetup("opencode", "opencode", env=env, files={"opencode.json": text}, snippet=snippet)


def aider_metadata(target: Target) -> dict:
    """The model's entry for aider's --model-metadata-file (litellm's format): its context window,
    and no price. With it aider also skips downloading litellm's model list."""
    window = target.context_length or DEFAULT_CONTEXT
    return {
        f"openai/{target.model}": {
            "max_input_tokens": window,
            "max_output_tokens": _output_limit(window),
            "max_tokens": window,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }


def _aider(target: Target, key: str) -> ClientSetup:
    text = json.dumps(aider_metadata(target), indent=2) + "\n"
    env = {
        "OPENAI_API_BASE": f"{target.url}/v1",
        "OPENAI_API_KEY": key,
        "AIDER_MODEL": f"openai/{target.model}",  # litellm's prefix for an OpenAI-compatible server
        "AIDER_ANALYTICS": "false",
        "AIDER_CHECK_UPDATE": "false",
        "AIDER_SHOW_MODEL_WARNINGS": "false",  # the model is unknown to litellm's price list
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm downloads its model list otherwise
        "AIDER_MODEL_METADATA_FILE": "{dir}/model-metadata.json",
    }
    shown = dict(env, AIDER_MODEL_METADATA_FILE="$PWD/omlx-aider-metadata.json")
    snippet = (
        f"# aider against omlx: save as omlx-aider-metadata.json\n{text}\n# then\n{_exports(shown)}\naider"
    )
    return ClientSetup("aider", "aider", env=env, files={"model-metadata.json": text}, snippet=snippet)


_BUILDERS = {"claude": _claude, "codex": _codex, "opencode": _opencode, "aider": _aider}


def pick_model(rows: List[dict], wanted: Optional[str] = None) -> str:
    """The model a client should use, from /v1/models/status rows: ``wanted`` (an id or an alias;
    ValueError when no servable chat model has it), else a pinned model, else the loaded model
    used most recently, else the first servable chat model by id. ValueError when there is none."""
    chat = [r for r in rows if r.get("servable") and r.get("type", "llm") == "llm"]
    if wanted:
        for row in chat:
            if wanted in (row["id"], row.get("alias")):
                return row["id"]
        known = ", ".join(r["id"] for r in chat) or "none"
        raise ValueError(f"no chat model {wanted!r} (the models: {known})")
    if not chat:
        raise ValueError(
            "the server has no chat model: put a model folder in its model folder "
            "(`omlx pull REPO`, or --model-dir)"
        )
    pinned = sorted(r["id"] for r in chat if r.get("pinned"))
    if pinned:
        return pinned[0]
    loaded = [r for r in chat if r.get("loaded") and r.get("idle_seconds") is not None]
    if loaded:
        return min(loaded, key=lambda r: (r["idle_seconds"], r["id"]))["id"]
    return sorted(r["id"] for r in chat)[0]


def context_length(row: dict) -> Optional[int]:
    """A /v1/models/status row's context window: max_position_embeddings of the folder's
    config.json (or of its text_config), None when it cannot be read (a server elsewhere)."""
    try:
        config = json.loads((Path(row["path"]) / "config.json").read_text(encoding="utf-8"))
    except (KeyError, TypeError, OSError, ValueError):
        return None
    for part in (config, config.get("text_config") or {}):
        value = part.get("max_position_embeddings") if isinstance(part, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def write_files(built: ClientSetup, folder: Path) -> Dict[str, Optional[str]]:
    """Write ``built.files`` into ``folder`` (omlx's own, replaced each launch) and return the
    environment with ``{dir}`` filled in."""
    if built.files:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in built.files.items():
            tmp = folder / f".{name}.tmp"
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(folder / name)
    return {k: None if v is None else v.replace("{dir}", str(folder)) for k, v in built.env.items()}
