"""Automations: tasks kept as files (``.craft/tasks/``) that the agent runs on its own.

``timing`` checks schedules and computes runs, ``workflow`` reads and renders
``workflow.md``, ``settings`` reads the ``Automations`` config section,
``runner`` polls, claims and recovers tasks, ``dispatch`` runs one task's
rounds of turns, ``tool`` is the agent's ``CompleteLocalTask`` and ``wire`` the
tasks' wire form. The RPC handlers are in ``appserver.services.automations``.
"""
