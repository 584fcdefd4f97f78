"""The Chat page's websocket (ws/admin/chat/): a conversation with one model, its answers streamed
token by token.

Each message becomes a ``GenerationJob`` handed off exactly as the API does it
(``inference.api.common.stream``: admission limits, the Huey queue or the direct hand-off, Redis
workers), and the job's events come back over the channel layer. The conversation lives in this
consumer: one per socket; "New chat" or a new socket starts an empty one.

Messages from the page (the chat form's fields, ws-send): ``action`` "send" (or none: model,
system, temperature, max_tokens, message, mcp_tools, tool_choice), "stop" (abort the answer being
written) or "new".

With "Use MCP tools" an answer is a loop of rounds (admin_panel/chat_tools.py): a round that ends
in tool calls has them run on their MCP servers, each call and result shown as a step of the
answer (partials/chat_tool_step.html, chat_tool_result.html), and the next round generates from
the conversation with the calls and results added; the round without calls ends the answer.
Messages to the page: HTML fragments swapped in by id (partials/chat_*.html); the answer's text is
appended to its bubble (hx-swap-oob="beforeend"), escaped like all model output.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import aclosing
from functools import partial
from typing import Callable, List, Optional

from asgiref.sync import sync_to_async
from django.template.loader import render_to_string
from django.utils.html import format_html

from admin_panel.chat import AnswerStats, parse_form
from admin_panel.chat_tools import MAX_TOOL_ROUNDS, assistant_message, offered_tools, run_call
from inference.api.common import handoff
from inference.api.common.cache_salt import console_salt
from inference.api.common.chat_job import chat_job
from inference.api.common.errors import ApiError
from inference.api.common.stream import Formatter, frames, start_generation
from inference.generation import GenerationJob

from . import AdminConsumer

logger = logging.getLogger("omlx.admin")

STOP_GRACE_SECONDS = 10.0  # after Stop, how long the engine's last event (with usage) is awaited


class ChatConsumer(AdminConsumer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.history: List[dict] = []  # the conversation as chat messages (no system prompt)
        self.turns = 0  # numbers the bubbles of this socket
        self.job: Optional[GenerationJob] = None  # the answer being written
        self.task: Optional[asyncio.Task] = None
        self.stopping: Optional[asyncio.TimerHandle] = None
        self.stop_requested = False  # Stop between rounds of tool calls: no next round
        self.closed = False

    async def joined(self) -> None:
        await self._render("admin_panel/partials/chat_log.html")
        await self._controls()

    async def received(self, data: dict) -> None:
        action = data.get("action") or "send"
        if action == "send":
            await self._send(data)
        elif action == "stop":
            await self._stop_answer()
        elif action == "new":
            await self._new_chat()
        else:
            await self._notice(f"Unknown action '{action}'.")

    async def disconnect(self, code) -> None:
        self.closed = True
        if self.task is not None and not self.task.done():
            self.task.cancel()  # the running job is aborted as the task unwinds (stop_generation)
            await asyncio.gather(self.task, return_exceptions=True)

    async def _send(self, data: dict) -> None:
        if self.task is not None and not self.task.done():
            await self._notice("An answer is still being written: wait for it or press Stop.")
            return
        from inference.pool import get_pool

        try:
            # get_pool().resolve reads the model directory: not on the event loop
            request = await sync_to_async(
                lambda: parse_form(data, get_pool().resolve), thread_sensitive=False
            )()
        except ValueError as exc:
            await self._notice(str(exc))
            return
        except Exception as exc:  # the model directory cannot be read
            logger.exception("chat: checking the form failed")
            await self._notice(f"The model list cannot be read: {exc}")
            return
        tools = offered_tools() if request.use_tools else None
        if request.use_tools and tools is None:
            await self._notice(
                "No MCP tools are available: no MCP server is running (omlx serve --mcp-config "
                "FILE; their states are on GET /v1/mcp/servers)."
            )
            return
        self.turns += 1
        turn = self.turns
        asked = {"role": "user", "content": request.message}
        messages = request.messages(self.history)
        self.history.append(asked)
        await self._render(
            "admin_panel/partials/chat_turn.html", turn=turn, message=request.message, model=request.model
        )
        await self._render("admin_panel/partials/chat_message_box.html")
        self.stop_requested = False
        self.task = asyncio.ensure_future(self._answer(request, messages, tools, asked, turn))
        await self._controls()

    async def _answer(
        self, request, messages: List[dict], tools: Optional[List[dict]], asked: dict, turn: int
    ) -> None:
        """Rounds of generation until one ends without tool calls (one round without tools)."""
        loop = asyncio.get_running_loop()
        added: List[dict] = []  # this turn's assistant tool calls and tool results, in order
        text: List[str] = []
        round_no, steps = 1, 0
        said = False  # the last round's text is in the history already (with its tool calls)
        try:
            while True:
                choice = request.tool_choice if round_no == 1 else "auto"
                job = partial(
                    chat_job,
                    f"chatcmpl-admin-{uuid.uuid4().hex}",
                    request.model,
                    request.params(),
                    messages=messages + added,
                    tools=tools,
                    tool_choice=choice if tools else None,
                    cache_salt=console_salt(),  # never shares cached blocks with API clients
                )
                text = []
                sent = loop.time()  # the numbers shown are the last round's
                outcome = await self._round(job, turn, round_no, text, asked if round_no == 1 else None)
                if outcome is None:  # refused: nothing of this round was said
                    return
                reason, usage, error, calls, first, last = outcome
                if reason != "tool_calls" or not calls or not tools:
                    break
                added.append(assistant_message("".join(text), calls))
                for call in calls:
                    steps += 1
                    await self._render(
                        "admin_panel/partials/chat_tool_step.html",
                        turn=turn,
                        step=steps,
                        name=call["name"],
                        arguments=call.get("arguments") or "{}",
                    )
                    result = await run_call(call)
                    added.append(result.tool_message())
                    await self._render(
                        "admin_panel/partials/chat_tool_result.html", turn=turn, step=steps, result=result
                    )
                self.history.extend(added[-(len(calls) + 1) :])
                text = []  # said, with the calls
                if self.stop_requested or round_no >= MAX_TOOL_ROUNDS:
                    said = True
                    reason = "abort" if self.stop_requested else "tool_rounds"
                    break
                round_no += 1
                await self._render("admin_panel/partials/chat_round.html", turn=turn, round=round_no)
            if not said:
                self.history.append({"role": "assistant", "content": "".join(text)})
            stats = AnswerStats.build(usage, reason, sent, first, last)
            await self._render(
                "admin_panel/partials/chat_stats.html",
                turn=turn,
                stats=stats,
                stopped=reason == "abort",
                rounds=round_no,
                steps=steps,
            )
            if reason == "error":
                await self._error(turn, 500, f"Generation failed: {error or reason}", kept=True)
        except asyncio.CancelledError:  # the socket closed, or Stop found no answer in time
            if not self.closed and not said:
                self.history.append({"role": "assistant", "content": "".join(text)})
                await self._render(
                    "admin_panel/partials/chat_stats.html", turn=turn, stats=None, stopped=True
                )
        except Exception as exc:
            logger.exception("chat answer (turn %d) failed", turn)
            await self._error(turn, 500, f"The answer failed: {exc}", kept=True)
        finally:
            if self.stopping is not None:
                self.stopping.cancel()
                self.stopping = None
            self.job = None
            if not self.closed:
                await self._controls(running=False)

    async def _round(
        self,
        make_job: Callable[[], GenerationJob],
        turn: int,
        round_no: int,
        text: List[str],
        asked: Optional[dict],
    ):
        """One generation streamed into the answer: (finish_reason, usage, error, tool calls,
        first token time, last token time), or None when the job was refused (an error shown;
        in the first round the message leaves the conversation)."""
        try:
            try:
                job = self.job = make_job()
            except ValueError as exc:  # tools that cannot be offered (a name given twice)
                raise ApiError(400, str(exc)) from None
            subscription = await start_generation(job)
        except ApiError as exc:
            if asked is not None:  # not answered: it does not stay in the conversation
                self.history = [m for m in self.history if m is not asked]
            await self._error(turn, exc.status, exc.message, kept=asked is None)
            return None
        await self._render(
            "admin_panel/partials/chat_status.html",
            turn=turn,
            status="Writing…" if round_no == 1 else f"Writing (after the tool results, round {round_no})…",
        )
        answer = AnswerFormatter(turn, round_no, text)
        try:  # the job is stopped (shielded) as the frames end, however they end
            async with aclosing(frames(job, answer, subscription)) as fragments:
                async for html in fragments:
                    await self._send_html(html)
        finally:
            self.job = None
        return answer.reason, answer.usage, answer.error, answer.calls, answer.first, answer.last

    async def _stop_answer(self) -> None:
        """Abort the answer being written; its last event (usage included) is awaited for a while."""
        if self.task is None or self.task.done() or self.stopping is not None:
            return
        task, job = self.task, self.job
        self.stop_requested = True
        if job is None:  # between rounds (a tool is running): the loop ends after it
            return
        self.stopping = asyncio.get_running_loop().call_later(STOP_GRACE_SECONDS, task.cancel)
        try:
            await asyncio.to_thread(handoff.abort, job)  # the Huey queue is a database write
        except Exception:
            logger.exception("aborting %s failed", job.request_id)

    async def _new_chat(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        self.history = []
        await self._render("admin_panel/partials/chat_log.html")
        await self._controls(running=False)

    async def _controls(self, running: Optional[bool] = None) -> None:
        if running is None:
            running = self.task is not None and not self.task.done()
        await self._render("admin_panel/partials/chat_controls.html", running=running)

    async def _notice(self, message: str) -> None:
        """A problem with what the page sent: shown in the conversation, nothing is kept."""
        await self._render("admin_panel/partials/chat_notice.html", message=message)

    async def _error(self, turn: int, status: int, message: str, kept: bool) -> None:
        await self._render(
            "admin_panel/partials/chat_error.html", turn=turn, status=status, message=message, kept=kept
        )

    async def _render(self, template: str, **context) -> None:
        await self._send_html(render_to_string(template, context))

    async def _send_html(self, html: str) -> None:
        if not self.closed:
            await self.send_html(html)


class AnswerFormatter(Formatter):
    """One round of an answer as HTML fragments for the page (one websocket message per delta
    with output), keeping what the round ends with: its text (into ``text``), tool calls,
    finish_reason, usage, error and the times of its first and last tokens."""

    def __init__(self, turn: int, round_no: int, text: List[str]):
        self.turn = turn
        self.suffix = "" if round_no == 1 else f"-{round_no}"
        self.text = text
        self.calls: List[dict] = []
        self.reason: Optional[str] = None
        self.usage: Optional[dict] = None
        self.error: Optional[str] = None
        self.first: Optional[float] = None
        self.last: Optional[float] = None
        self._reasoning_shown = False

    @property
    def finished(self) -> bool:
        return self.reason is not None

    @property
    def ok(self) -> bool:
        return self.reason != "error"  # an abort ended the engine's request already

    def feed(self, event: dict) -> List[str]:
        if event["token_ids"]:
            self.last = asyncio.get_running_loop().time()
            self.first = self.first or self.last
        html = []
        if event.get("reasoning"):
            html.append(_reasoning_html(self.turn, event["reasoning"], self._reasoning_shown, self.suffix))
            self._reasoning_shown = True
        if event["text"]:
            self.text.append(event["text"])
            html.append(_append_html(self.turn, "text" + self.suffix, event["text"]))
        self.calls += event.get("tool_calls") or []
        self.reason, self.usage, self.error = event["finish_reason"], event.get("usage"), event.get("error")
        return ["".join(html)] if html else []

    def frame(self, out: str) -> str:
        return out


def _append_html(turn: int, part: str, text: str) -> str:
    """A fragment that appends ``text`` (escaped: a model can write HTML) to a part of an answer."""
    return format_html('<span id="answer-{}-{}" hx-swap-oob="beforeend">{}</span>', turn, part, text)


def _reasoning_html(turn: int, text: str, shown: bool, suffix: str = "") -> str:
    """Reasoning text of a round of the answer (``suffix``: "" for the first, "-N" for round N)."""
    if shown:
        return _append_html(turn, "reasoning" + suffix, text)
    return format_html(
        '<details id="answer-{0}-thinking{2}" class="thinking"><summary>Reasoning</summary>'
        '<span id="answer-{0}-reasoning{2}" class="reasoning">{1}</span></details>',
        turn,
        text,
        suffix,
    )
