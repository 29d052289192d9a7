"""The process's judge event loop: one asyncio loop in a daemon thread, on which every judge sends its requests."""

from __future__ import annotations

import asyncio
import atexit
import os
import threading

_LOOP_LOCK = threading.Lock()
_LOOP: tuple[int, asyncio.AbstractEventLoop, threading.Thread] | None = None  # (pid, loop, thread)


def judge_event_loop() -> asyncio.AbstractEventLoop:
    """The process's judge event loop, running in the daemon thread ``hir-judge-loop`` (started on first use).

    Every `LiteLLMJudge` of the process sends its requests on this one loop, so litellm's per-loop HTTP
    clients and logging worker are created once and never bound to a closed loop. After a fork the child
    starts its own. The loop stops at interpreter exit, after its pending tasks are cancelled.
    """
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is not None and _LOOP[0] == os.getpid() and _LOOP[2].is_alive():
            return _LOOP[1]
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=_run_loop, args=(loop,), name="hir-judge-loop", daemon=True)
        thread.start()
        _LOOP = (os.getpid(), loop, thread)
        return loop


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


async def _cancel_pending() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@atexit.register
def _stop_judge_event_loop() -> None:
    if _LOOP is None or _LOOP[0] != os.getpid() or not _LOOP[2].is_alive():
        return
    _, loop, thread = _LOOP
    try:
        asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(5)
    except Exception:  # noqa: BLE001 - best effort at exit
        pass
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
