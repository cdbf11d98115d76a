"""Executors: where the build loop's tasks run.

An executor takes :class:`~ptebuild.worker.tasks.Task` values and reports
:class:`~ptebuild.worker.tasks.Event` values (progress, done with a
:class:`~ptebuild.worker.tasks.TaskResult`, failed). The build loop (:mod:`ptebuild.builder.schedule`)
knows nothing else about them. A new executor is one module here with a class implementing
:class:`Executor` and one line in :data:`EXECUTOR_MODULES`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ptebuild.worker.tasks import Event, Task

#: ``--executor`` name -> "module:class" under ptebuild.builder.executors.
EXECUTOR_MODULES = {
    "local": "ptebuild.builder.executors.local:LocalExecutor",
    "daemon": "ptebuild.builder.executors.daemon:DaemonExecutor",
    "ray": "ptebuild.builder.executors.ray:RayExecutor",
}


class Executor(Protocol):
    name: str

    def capacity(self) -> int:
        """How many more tasks it takes now."""

    def submit(self, task: Task) -> None: ...

    def poll(self, timeout: float) -> list[Event]:
        """Wait up to ``timeout`` seconds for news of the submitted tasks."""

    def cancel(self, task_id: str) -> None:
        """Stop a task (best effort); its FAILED event may still arrive."""

    def close(self, graceful: bool = True) -> None:
        """Stop everything: politely after a build, at once after an error or Ctrl-C."""


def executor_class(name: str) -> type:
    """The class registered as ``name``, not opened: what it declares (``caches_on_nodes``: its
    nodes look up and store results in the shared cache themselves)."""
    module_name, _, class_name = EXECUTOR_MODULES[name].partition(":")
    cls: type = getattr(importlib.import_module(module_name), class_name)
    return cls


def open_executor(name: str, **options: Any) -> Executor:
    """The executor registered as ``name``, with ``options`` (``jobs``, ``address``...)."""
    executor: Executor = executor_class(name)(**options)
    return executor
