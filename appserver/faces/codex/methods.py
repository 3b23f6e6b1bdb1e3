"""The method table: Codex method name -> handler. Anything else is ``-32601``."""

from __future__ import annotations

from appserver.faces.codex import command_exec, fuzzy, manage, threads, turns
from appserver.faces.codex.review import review_start

METHODS = {
    "initialize": threads.initialize,
    "thread/start": threads.thread_start,
    "thread/resume": threads.thread_resume,
    "thread/read": threads.thread_read,
    "thread/fork": threads.thread_fork,
    "thread/list": threads.thread_list,
    "turn/start": turns.turn_start,
    "review/start": review_start,
    "turn/interrupt": turns.turn_interrupt,
    "thread/archive": manage.thread_archive,
    "thread/unarchive": manage.thread_unarchive,
    "thread/name/set": manage.thread_name_set,
    "thread/compact/start": manage.thread_compact_start,
    "thread/delete": manage.thread_delete,
    "thread/unsubscribe": manage.thread_unsubscribe,
    "thread/loaded/list": manage.thread_loaded_list,
    "thread/turns/list": manage.thread_turns_list,
    "thread/revert": manage.thread_revert,
    "turn/steer": manage.turn_steer,
    "model/list": manage.model_list,
    "account/read": manage.account_read,
    "fuzzyFileSearch": fuzzy.fuzzy_file_search,
    "command/exec": command_exec.command_exec,
}
