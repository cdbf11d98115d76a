"""The ``ray`` executor: each program is a Ray task, on whichever node has the resources.

``--executor ray`` connects to the cluster at ``--ray-address`` (else ``$RAY_ADDRESS``), or starts
a local Ray instance for the build (``num_cpus`` = ``--jobs``, no dashboard, on loopback). Ray is
an optional extra (``pip install ptebuild[ray]``) imported only here, only when a task is
submitted.

A task ships as data: its program's plan, and the model's sources and weights by digest. Bytes
move by digest, in chunks of :data:`~ptebuild.worker.tasks.CHUNK` bytes, through a
:class:`BlobServer`: a Ray actor the executor starts on the builder's own node (the driver's), which
reads the task's files where they are and writes blobs into the builder's content-addressed store
(its folder is on that node's disk). A node recreates the task's files in a temporary folder,
each chunk fetched from the server and hashed on the way (:func:`~ptebuild.worker.tasks.materialize`),
imports torch and executorch once per Ray worker process
(:func:`~ptebuild.worker.execute.prepare_worker`), lowers and checks the program into a store of
its own, then sends each output's blob to the server, chunk by chunk (a few in flight), and
returns the outputs by digest with the node's name. Neither the driver nor any process holds a
whole file: a chunk at a time passes through Ray's object store. The builder publishes from its
store, as for any executor. A node needs ptebuild and the toolchain installed, not the user's
checkout. The driver must run on a node of the cluster (``ray.init(address=...)`` on a cluster
machine, or the local instance; not a Ray Client ``ray://`` connection): the server lives there.

With a remote cache (``--remote-cache``), the nodes use it themselves (``caches_on_nodes``): a
task carries the cache's settings (URL, headers, the signing secret) and the node opens its own
remote tier. It looks the key up there first (a hit is used without importing torch), and stores
what it lowers there, blobs then entry, from its own store; it returns the entry, and the driver,
which looks in its local cache only, fetches from the remote cache the files it publishes
(verified, kept locally). The driver's remote traffic is then those files alone. What a node
could not store there it sends to the server, as without a remote cache, and a result the driver
cannot fetch is lowered again, its outputs sent to the server.

Resources (:func:`ray_options`): a task whose resources ask for a GPU (``num_gpus``, which a
backend that needs a GPU asks for) gets ``num_gpus`` and so lands only on nodes that declare GPUs; every task asks
for ``num_cpus`` (default 1) and, if the manifest gives one, ``memory``. Ray retries a task whose
worker process or node died up to ``max_retries`` times (default 2); after that only that program
fails. An error in the model or the lowering is not retried. Ctrl-C cancels the tasks
(``ray.cancel(force=True)``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ptebuild.results import FailureKind
from ptebuild.worker.tasks import Event, EventKind, Task, TaskFailure

if TYPE_CHECKING:
    from ptebuild.results import ActionResult
    from ptebuild.store.cas import CAS
    from ptebuild.store.tiers import RemoteSettings
    from ptebuild.worker.tasks import TaskFile, TaskResult

MAX_RETRIES = 2
LOCAL_NODE_IP = "127.0.0.2" if sys.platform.startswith("linux") else "127.0.0.1"
"""Where the build's own Ray instance listens. Ray 2.60 replaces 127.0.0.1 by the machine's
network address (``resolve_ip_for_localhost``) but takes another loopback address as given: on
Linux all of 127/8 is loopback, so the instance stays off the network."""


def _memory_bytes(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    from ptebuild.sizes import parse_size

    return parse_size(str(value))


def ray_options(task: Task, max_retries: int = MAX_RETRIES) -> dict[str, Any]:
    """The ``.options(...)`` of a task's Ray remote call, from its resources."""
    resources = task.resources
    gpus = resources.get("num_gpus")
    if gpus is None and resources.get("cuda"):
        gpus = 1
    options: dict[str, Any] = {
        "num_cpus": resources.get("num_cpus", 1),
        "max_retries": max_retries,
        "retry_exceptions": False,
    }
    if gpus:
        options["num_gpus"] = gpus
    if resources.get("memory"):
        options["memory"] = _memory_bytes(resources["memory"])
    return options


_prepared = False
TASK_FOLDER_PREFIX = "ptebuild-ray-task-"
"""A task's files on a node: ``<tmp>/ptebuild-ray-task-<pid>-<random>``, removed after the task,
or by a later task once the process ``pid`` is gone (a worker killed mid-task cannot clean up)."""


def _sweep_task_folders() -> None:
    import shutil
    import tempfile

    for folder in Path(tempfile.gettempdir()).glob(f"{TASK_FOLDER_PREFIX}*"):
        pid = folder.name[len(TASK_FOLDER_PREFIX):].partition("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass


class BlobServer:
    """The bytes of a build, on the builder's node, for the nodes of a Ray cluster: the task's
    files read by digest, chunk by chunk, where they are (:meth:`offer`), and blobs written into
    the builder's store, chunk by chunk, hashed on the way (:meth:`begin`, :meth:`write`,
    :meth:`commit`). A Ray actor (:class:`RayExecutor` starts one per build); one chunk at a time."""

    def __init__(self, store: str) -> None:
        from ptebuild.store.cas import CAS, BlobWriter

        self.cas = CAS(Path(store))
        self.files: dict[str, str] = {}
        self.uploads: dict[int, BlobWriter] = {}
        self.next = 0

    def offer(self, files: dict[str, str]) -> None:
        """Serve these files (sha256 -> path on this node)."""
        self.files.update(files)

    def read(self, digest: str, offset: int, size: int) -> bytes:
        """At most ``size`` bytes of the file or blob ``digest`` at ``offset`` (none past its end)."""
        from ptebuild.worker.tasks import read_chunk

        path = self.files.get(digest)
        if path is None:
            raise FileNotFoundError(f"the builder offers no file {digest}")
        return read_chunk(Path(path), offset, size)

    def begin(self) -> int:
        """A new blob to write into the store; its upload's number."""
        self.next += 1
        self.uploads[self.next] = self.cas.writer()
        return self.next

    def write(self, upload: int, chunk: bytes) -> None:
        self.uploads[upload].write(chunk)

    def commit(self, upload: int) -> tuple[str, int]:
        """Store the upload as the blob of its SHA-256; ``(sha256, size)``."""
        return self.uploads.pop(upload).commit()

    def abort(self, upload: int) -> None:
        writer = self.uploads.pop(upload, None)
        if writer is not None:
            writer.abort()

    def close(self) -> None:
        """Drop every upload not committed (a node that died while sending)."""
        for upload in list(self.uploads):
            self.abort(upload)


IN_FLIGHT = 2
"""Chunks a node sends before it waits for the server to have written the first of them."""


def send_blob(ray: ModuleType, server: Any, path: Path) -> tuple[str, int]:
    """Send the file at ``path`` to the server's store, chunk by chunk; ``(sha256, size)`` as stored."""
    from ptebuild.worker.tasks import CHUNK

    upload = ray.get(server.begin.remote())
    pending: list[Any] = []
    try:
        with open(path, "rb") as source:
            while True:
                chunk = source.read(CHUNK)
                if not chunk:
                    break
                pending.append(server.write.remote(upload, chunk))
                del chunk
                if len(pending) >= IN_FLIGHT:
                    ray.get(pending.pop(0))
        ray.get(pending)
        digest, size = ray.get(server.commit.remote(upload))
        return str(digest), int(size)
    except BaseException:
        server.abort.remote(upload)
        raise


def run_on_node(task_json: dict[str, Any], server: Any, remote: RemoteSettings | None = None) -> tuple[str, Any]:
    """The Ray task: recreate the task's files here, lower into a store of this node, send the
    outputs to the builder's store; return ``("done", TaskResult)`` or ``("failed", TaskFailure.to_json())``.

    With ``remote`` (the build's remote cache) and a task that asks for it, the node first looks
    the key up there (a hit: nothing is lowered, the result names the entry), and stores what it
    lowers there itself, blobs and entry; the result then names the entry, and the builder fetches
    the files it publishes. Whatever the node could not store goes to the builder's store, as without.
    """
    global _prepared
    import shutil
    import socket
    import sys
    import tempfile
    from dataclasses import replace

    import ray

    from ptebuild.store.cas import CAS
    from ptebuild.worker.execute import execute, prepare_worker
    from ptebuild.worker.tasks import TaskFailure, TaskResult, materialize

    _sweep_task_folders()
    folder = Path(tempfile.mkdtemp(prefix=f"{TASK_FOLDER_PREFIX}{os.getpid()}-"))
    node = f"{socket.gethostname()} ({ray.get_runtime_context().get_node_id()[:12]})"
    try:
        def read(file: TaskFile, offset: int, size: int) -> bytes:
            data: bytes = ray.get(server.read.remote(file.sha256, offset, size))
            return data

        task = materialize(Task.from_json(task_json), read, folder / "project")
        store = CAS(folder / "store")  # this node's, swept with the folder if this worker is killed
        task = replace(task, store=str(store.root))
        shared = _NodeCache(task, remote) if remote is not None and task.node_cache else None
        if shared is not None:
            found = shared.lookup()
            if found is not None:  # before torch is imported: a hit costs no lowering, no import
                return ("done", TaskResult(outputs=found.outputs, action=found.to_json(), cached=True, node=node,
                                           warnings=shared.close()))
        if not _prepared:
            prepare_worker()
            _prepared = True
        outcome = execute(task, lambda _text: None)
        if isinstance(outcome, TaskFailure):
            if shared is not None:
                shared.close()
            if outcome.kind is FailureKind.STALE:
                # A library this worker process imported changed on disk: end the process, so
                # that Ray retries the task in a new one (as for a worker that died).
                os._exit(3)
            return ("failed", outcome.to_json())
        outcome = replace(outcome, node=node)
        if shared is not None:
            stored = shared.store(outcome, store)
            warnings = outcome.warnings + shared.close()
            if stored is not None:
                return ("done", replace(outcome, action=stored.to_json(), warnings=warnings))
            outcome = replace(outcome, warnings=warnings)
        for output in outcome.outputs:
            sent = send_blob(ray, server, store.path(output.sha256))
            if sent != (output.sha256, output.size):
                return ("failed", TaskFailure(FailureKind.BUILD, f"{output.name} changed on its way to the builder").to_json())
        return ("done", outcome)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        while str(folder / "project") in sys.path:  # the model loader put the manifest's folder there
            sys.path.remove(str(folder / "project"))


class _NodeCache:
    """The remote cache as a node opens it for one task: the remote tier alone (a node keeps no
    cache of its own; the shared one is what it shares), its warnings kept for the builder."""

    def __init__(self, task: Task, remote: RemoteSettings) -> None:
        from ptebuild.store.frontend import Cache
        from ptebuild.store.tiers import open_remote

        self.task = task
        self.warnings: list[str] = []
        self.cache = Cache([open_remote(remote, self.warnings.append)], self.warnings.append)

    def lookup(self) -> ActionResult | None:
        """The task's result, if the remote cache has it with all its blobs and its recorded
        dependencies hold here (the task's files, this node's installed software)."""
        from ptebuild.deps import DependencyCheck
        from ptebuild.hashing import hash_file

        deps = DependencyCheck(Path(self.task.manifest_dir), hash_file)
        hit = self.cache.lookup(self.task.key, check=lambda r: deps.changes(r.deps), fetch=False).hit
        return hit.result if hit is not None and hit.result.key == self.task.key else None

    def store(self, outcome: TaskResult, store: CAS) -> ActionResult | None:
        """Store a lowering's blobs (from the node's ``store``) and entry (under its key and the
        key without the toolchain); the result, once it reads back whole from the server; None if
        it does not."""
        from ptebuild.builder.keys import elsewhere_key

        action = outcome.to_action(self.task.key, self.task.program, self.task.backend, self.task.inputs)
        self.cache.save(action, {o.name: store.path(o.sha256) for o in outcome.outputs}, (elsewhere_key(action.inputs),))
        back = self.cache.lookup(self.task.key, fetch=False).hit
        return back.result if back is not None and back.result.outputs == action.outputs else None

    def close(self) -> tuple[str, ...]:
        self.cache.close()
        return tuple(self.warnings)


def _probe(address: str, timeout: float = 10.0) -> None:
    """Fail fast if nothing listens at ``host:port`` (``ray.init`` would retry for minutes)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or address == "auto":
        return
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
        pass


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".strip().rstrip(":")


class RayExecutor:
    """Runs tasks as Ray tasks (see the module's docstring)."""

    name = "ray"
    caches_on_nodes = True
    """With a remote cache, each node looks up and stores its tasks' results there itself."""

    def __init__(self, jobs: int = 1, cache_dir: Path | None = None, report: Callable[[str], None] | None = None,
                 address: str | None = None, remote_cache: RemoteSettings | None = None, max_retries: int = MAX_RETRIES,
                 **_options: Any) -> None:
        self.jobs = max(1, jobs)
        self.remote_cache = remote_cache
        """The build's remote cache: a task that asks for it (``Task.node_cache``) carries it."""
        self.report = report or (lambda _text: None)
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.max_retries = max_retries
        self._ray: ModuleType | None = None
        self._remote: Any = None
        """``ray.remote(run_on_node)``, once Ray is up."""
        self._owns_ray = False
        self._temp_dir: str | None = None
        self._refs: dict[Any, str] = {}  # ObjectRef -> task_id
        self._cancelled: set[str] = set()
        self._servers: dict[str, Any] = {}
        """The build's :class:`BlobServer` actor, by the store it writes into (one per build)."""
        self._news: list[Event] = []

    def _init(self) -> ModuleType:
        if self._ray is not None:
            return self._ray
        try:
            import ray
        except ImportError:
            from ptebuild.errors import UsageError

            raise UsageError("--executor ray needs Ray: pip install 'ptebuild[ray]'") from None
        if not ray.is_initialized():
            quiet: dict[str, Any] = {"configure_logging": False, "log_to_driver": False, "logging_level": "error"}
            if self.address:
                host = self.address.removeprefix("ray://").rpartition(":")[0]
                if host.startswith("127."):  # a cluster on loopback: the driver stays there too
                    quiet["_node_ip_address"] = host
                try:
                    _probe(self.address)
                    ray.init(address=self.address, **quiet)
                except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError...
                    from ptebuild.errors import BuildError

                    raise BuildError(
                        f"--executor ray: cannot connect to the Ray cluster at {self.address}: {_one_line(exc)}; "
                        "start it (ray start --head) or give its address with --ray-address"
                    ) from exc
            else:
                import tempfile

                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                # Its own session folder, removed at close: a build leaves no Ray logs behind.
                self._temp_dir = tempfile.mkdtemp(prefix="ptebuild-ray-session-")
                ray.init(num_cpus=self.jobs, include_dashboard=False, _node_ip_address=LOCAL_NODE_IP,
                         _temp_dir=self._temp_dir, **quiet)
            self._owns_ray = True
        self._ray = ray
        self._remote = ray.remote(run_on_node)
        return ray

    # -- the protocol's methods -----------------------------------------------------------------

    def capacity(self) -> int:
        # Ray queues what the cluster cannot run yet; keep a window of work in flight.
        return max(self.jobs, 1) * 2 - len(self._refs)

    def _server(self, ray: ModuleType, store: str) -> Any:
        """The :class:`BlobServer` writing into ``store``, on this (the driver's) node."""
        if store not in self._servers:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            try:
                here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
                actor = ray.remote(BlobServer).options(num_cpus=0, scheduling_strategy=here, max_restarts=0)
                server = actor.remote(store)
                ray.get(server.offer.remote({}), timeout=120)  # up, on this machine
            except Exception as exc:  # Ray raises its own errors, a Ray Client driver has no node
                from ptebuild.errors import BuildError

                raise BuildError(
                    f"--executor ray: cannot start the build's blob server on this machine's Ray node ({_one_line(exc)}); "
                    "run the build on a node of the cluster (a Ray Client driver, ray://, is not one)"
                ) from exc
            self._servers[store] = server
        return self._servers[store]

    def submit(self, task: Task) -> None:
        from ptebuild.worker.tasks import input_paths

        ray = self._init()
        server = self._server(ray, task.store)
        # Offered before the task is submitted: the node asks for the files once it runs.
        ray.get(server.offer.remote({digest: str(path) for digest, path in input_paths(task).items()}))
        options = ray_options(task, self.max_retries)
        remote = self.remote_cache if task.node_cache else None
        ref = self._remote.options(**options).remote(task.to_json(), server, remote)
        self._refs[ref] = task.task_id
        wants = f"{options['num_cpus']} CPU" + (f", {options['num_gpus']} GPU" if options.get("num_gpus") else "")
        self._news.append(Event(task.task_id, EventKind.PROGRESS, f"queued on Ray ({wants})"))

    def poll(self, timeout: float) -> list[Event]:
        events, self._news = self._news, []
        if not self._refs:
            if not events:
                time.sleep(max(0.0, timeout))
            return events
        ray = self._init()  # up already: it took the tasks
        refs = list(self._refs)
        ready, _ = ray.wait(refs, num_returns=1, timeout=0 if events else max(0.0, timeout))
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            task_id = self._refs.pop(ref)
            events.append(self._finished(ray, ref, task_id))
        return events

    def _finished(self, ray: ModuleType, ref: Any, task_id: str) -> Event:
        try:
            outcome = ray.get(ref, timeout=60)
        except ray.exceptions.TaskCancelledError:
            return Event.failed(task_id, "cancelled")
        except ray.exceptions.RayError as exc:
            if task_id in self._cancelled:
                return Event.failed(task_id, "cancelled")
            if isinstance(exc, ray.exceptions.RayTaskError):
                return Event.failed(task_id, f"on Ray: {_one_line(exc)}")
            return Event.failed(task_id,
                                f"the Ray worker or node running it was lost, {self.max_retries + 1} times "
                                f"(tried, then retried {self.max_retries}): {_one_line(exc)}")
        if outcome[0] == "done":
            return Event(task_id, EventKind.DONE, result=outcome[1])
        return Event.failed(task_id, TaskFailure.from_json(outcome[1]))

    def cancel(self, task_id: str) -> None:
        if self._ray is None:  # nothing was submitted
            return
        for ref, owner in self._refs.items():
            if owner == task_id:
                self._cancelled.add(task_id)
                try:
                    self._ray.cancel(ref, force=True)
                except Exception:  # already finished, or the cluster is gone: nothing to stop
                    pass

    def close(self, graceful: bool = True) -> None:
        if self._ray is None:
            return
        if not graceful:
            for task_id in list(self._refs.values()):
                self.cancel(task_id)
        self._refs.clear()
        for server in self._servers.values():
            try:
                self._ray.get(server.close.remote(), timeout=10)
                self._ray.kill(server)
            except Exception:  # the cluster is gone: nothing of it to stop
                pass
        self._servers.clear()
        if self._owns_ray:
            self._ray.shutdown()
        if self._temp_dir is not None:
            import shutil

            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
        self._ray = None
