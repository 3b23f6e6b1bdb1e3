"""The method table: Codex method name -> handler. Anything else is ``-32601``."""

from __future__ import annotations

from appserver.faces.codex import threads, turns

METHODS = {
    "initialize": threads.initialize,
    "thread/start": threads.thread_start,
    "thread/resume": threads.thread_resume,
    "thread/read": threads.thread_read,
    "thread/list": threads.thread_list,
    "turn/start": turns.turn_start,
    "turn/interrupt": turns.turn_interrupt,
}
