"""Scheduled agent work: cron jobs and the heartbeat.

``schedule`` validates schedules and computes run times (pure), ``clock``
is the injectable time source, ``runner`` turns a job into a turn in its
thread, ``service`` owns the jobs and the one scheduler task, ``heartbeat``
runs ``.craft/HEARTBEAT.md`` on demand or periodically, and ``tool`` is the
agent's ``cron`` tool. The RPC handlers are in ``appserver.services.cron``.
"""
