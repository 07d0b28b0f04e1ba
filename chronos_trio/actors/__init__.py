"""The actors of one worker process, one module each.

Each exposes ``async def run(rt: Runtime, *, task_status)`` that signals
``task_status.started()`` once ready and then runs until cancelled.
"""
