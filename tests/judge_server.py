"""A scripted OpenAI chat-completions server on loopback, for the judge tests and benchmark.

`FakeJudgeServer` serves ``POST /v1/chat/completions`` (and ``GET /stats``) on ``127.0.0.1`` from a
background thread. Its answer to a request is scripted by markers in the request's *Criteria Item* (the
text between ``Criteria Item:`` and the template's closing sentence), so the constraint text of a test
decides what happens to exactly that (row, constraint) cell:

=========================== ==============================================================================
marker                      behaviour
=========================== ==============================================================================
(none)                      ``200`` with content ``YES``
``ANSWER:<token>``          ``200`` with ``<token>`` as the content (``ANSWER:NO``, ``ANSWER:maybe``)
``LOGPROBS:yes=<lp>,no=<lp>`` the top log-probs returned when the request asks for log-probs (``nan``,
                            ``inf``, ``null`` or a word: an unusable one)
``FAULT:500``               ``500`` every time
``FAULT:flaky500:<n>``      ``500`` for the first ``n`` requests of that exact prompt, then ``YES``
``FAULT:timeout``           never answers (the handler waits until the client gives up or the server stops)
``FAULT:slow``              answers ``YES`` after `slow_seconds`
``FAULT:malformed``         ``200`` with a body that is not JSON
``FAULT:empty``             ``200`` with an empty message content
``FAULT:reset``             the TCP connection is reset (RST) without a response
``FAULT:400`` (401, 404,    that HTTP status every time, with an OpenAI-style error body
429)
``FAULT:context``           ``400`` saying the prompt is longer than the model's context
``FAULT:echo_auth``         ``200`` with content that quotes the request's ``Authorization`` header
=========================== ==============================================================================

With ``api_key`` set, every request whose ``Authorization`` header is not ``Bearer <api_key>`` gets ``401``.

Every request also waits `latency` seconds first (the benchmark's simulated model time). Only loopback is
bound. The server records the number of requests, per-prompt counts, and the ``Authorization`` headers.

Run as a script (``python -m tests.judge_server --latency 0.05``) it prints its base URL and serves until
killed; the benchmark uses that to keep the server's CPU off the client's process.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import re
import socket
import struct
import threading
import time

from aiohttp import web

_CRITERIA = re.compile(r"Criteria Item:\n(.*?)\n\nYou only need to judge", re.S)
_FAULT = re.compile(r"FAULT:(\w+)(?::(\d+))?")
_ANSWER = re.compile(r"ANSWER:(\S+)")
_LOGPROBS = re.compile(r"LOGPROBS:yes=(-?[\w.]+),no=(-?[\w.]+)")


class FakeJudgeServer:
    """OpenAI-compatible chat-completions server on 127.0.0.1 with scripted faults (see module docstring).

    Args:
        latency: seconds every request waits before it is answered.
        slow_seconds: extra seconds a ``FAULT:slow`` request waits.
        hang_seconds: upper bound on how long a ``FAULT:timeout`` request hangs (the test bounds time).
        api_key: the only key accepted (401 otherwise); None accepts any request.

    Attributes:
        requests: total requests received on ``/v1/chat/completions``.
        prompt_counts: requests per exact prompt text.
        authorizations: every ``Authorization`` header value received.
        bodies: the latest 1,000 request bodies (parsed JSON).
        max_in_flight: the most requests handled at the same time.
    """

    def __init__(self, latency: float = 0.0, slow_seconds: float = 0.2, hang_seconds: float = 30.0,
                 api_key: str | None = None) -> None:
        self.latency, self.slow_seconds, self.hang_seconds = latency, slow_seconds, hang_seconds
        self.api_key = api_key
        self.requests = 0
        self.prompt_counts: collections.Counter[str] = collections.Counter()
        self.authorizations: list[str] = []
        self.bodies: collections.deque[dict] = collections.deque(maxlen=1000)
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    # ------------------------------------------------------------------ lifecycle

    def start(self, port: int = 0) -> str:
        """Start serving in a daemon thread; returns the base URL ``http://127.0.0.1:<port>/v1``."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def serve() -> None:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._handle)
            app.router.add_get("/stats", self._stats)
            self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5, access_log=None)
            await self._runner.setup()
            await web.SockSite(self._runner, sock, backlog=1024).start()
            ready.set()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(serve())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-judge-server", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake judge server did not start")
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        return self.base_url

    def stop(self) -> None:
        """Stop the server and its thread (cancels hanging handlers)."""
        if self._loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = None

    def reset_counts(self) -> None:
        with self._lock:
            self.requests = 0
            self.prompt_counts.clear()
            self.authorizations.clear()
            self.bodies.clear()
            self.max_in_flight = 0

    def __enter__(self) -> FakeJudgeServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ handlers

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": self.requests})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        with self._lock:
            self.requests += 1
            self.prompt_counts[prompt] += 1
            seen = self.prompt_counts[prompt]
            self.authorizations.append(request.headers.get("Authorization", ""))
            self.bodies.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request, body, prompt, seen)
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _answer(self, request: web.Request, body: dict, prompt: str, seen: int) -> web.StreamResponse:
        match = _CRITERIA.search(prompt)
        criteria = match.group(1) if match else prompt
        fault = _FAULT.search(criteria)
        kind = fault.group(1) if fault else None
        if self.latency:
            await asyncio.sleep(self.latency)

        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": {"message": "Incorrect API key provided", "type":
                                                "invalid_request_error", "code": "invalid_api_key"}}, status=401)
        if kind == "500":
            return web.json_response({"error": {"message": "scripted server error"}}, status=500)
        if kind == "context":
            return web.json_response({"error": {"message": "This model's maximum context length is 8 tokens. However, "
                                                "your messages resulted in 900 tokens.", "type": "invalid_request_error",
                                                "code": "context_length_exceeded"}}, status=400)
        if kind in ("400", "401", "404", "429"):
            return web.json_response({"error": {"message": f"scripted error {kind}", "type": "invalid_request_error"}},
                                     status=int(kind))
        if kind == "flaky500" and seen <= int(fault.group(2) or 1):
            return web.json_response({"error": {"message": "scripted flaky error"}}, status=500)
        if kind == "timeout":
            await asyncio.sleep(self.hang_seconds)
        if kind == "slow":
            await asyncio.sleep(self.slow_seconds)
        if kind == "malformed":
            return web.Response(text='{"choices": [ this is not json', content_type="application/json")
        if kind == "reset":
            sock = request.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            request.transport.abort()
            raise asyncio.CancelledError  # nothing is sent: the client sees a connection reset

        answer = _ANSWER.search(criteria)
        content = "" if kind == "empty" else (answer.group(1) if answer else "YES")
        if kind == "echo_auth":
            content = f"I received the header {request.headers.get('Authorization', '')}"
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        if body.get("logprobs"):
            lp = _LOGPROBS.search(criteria)
            yes, no = (_logprob(lp.group(1)), _logprob(lp.group(2))) if lp else (
                (-0.05, -3.0) if content.upper().startswith("YES") else (-3.0, -0.05))
            top = [{"token": "YES", "logprob": yes, "bytes": None}, {"token": "NO", "logprob": no, "bytes": None},
                   {"token": "The", "logprob": -9.0, "bytes": None}]
            top = sorted(top, key=_rank)[: int(body.get("top_logprobs") or 1)]
            choice["logprobs"] = {"content": [{"token": top[0]["token"], "logprob": top[0]["logprob"], "bytes": None,
                                               "top_logprobs": top}]}
        return web.json_response({
            "id": f"chatcmpl-{seen}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "test"), "choices": [choice],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 1, "total_tokens": len(prompt) // 4 + 1},
        })


def _logprob(text: str) -> float | str | None:
    """A scripted log-prob: a number (``nan``, ``inf`` too), ``null`` (None) or any other word as a string."""
    if text == "null":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def _rank(item: dict) -> tuple[bool, float]:
    """Sort key of the top log-probs: unusable values first (so that they are sent), then by probability."""
    value = item["logprob"]
    usable = isinstance(value, float) and math.isfinite(value)
    return usable, -value if usable else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.05, help="seconds every request waits")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = FakeJudgeServer(latency=args.latency)
    print(json.dumps({"base_url": server.start(args.port)}), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
