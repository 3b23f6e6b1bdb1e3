"""The suggestions family: ``welcome/suggestions`` and ``workspace/commitMessage/suggest``
(:mod:`appserver.protocol.suggestions`; docs/suggestions.md).

Both answer with the help of helper turns (runtime/helper_threads.py) whose model
hands its answer to a profile tool (tools/suggestion_tools.py): ``install`` adds
those tools to the engine, registers both handlers, advertises
``capabilities.extensions.welcomeSuggestions``, listens to finished turns and runs
the welcome refresh in the background.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appserver.runtime.helper_threads import HelperThreads
from appserver.services.suggestions.commit_message import CommitMessages
from appserver.services.suggestions.welcome import WelcomeSuggestions
from appserver.tools.suggestion_tools import suggestion_tools

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext


def install(server: FamilyContext) -> None:
    """Register both methods and start the welcome refresh."""
    runtime = server.runtime
    for tool in suggestion_tools():
        if runtime.engine.tools.admits(tool.name):
            runtime.engine.tools.register(tool, replace=True)
    helpers = HelperThreads(runtime.threads, runtime.turns)
    welcome = WelcomeSuggestions(server, helpers)
    server.router.register("welcome/suggestions", welcome.suggestions)
    commits = CommitMessages(server, helpers)
    server.router.register("workspace/commitMessage/suggest", commits.suggest)
    server.router.extensions["welcomeSuggestions"] = True
    runtime.engine.turn_listeners.append(welcome.turn_ended)
    server.start_background(welcome.run)
