"""The worker side of every executor: a task as data, lowered and checked in this process.

:mod:`.tasks` (what crosses to a worker and back), :mod:`.execute` (prepare a worker process,
run one task, turn failures into values), :mod:`.lower` (torch.export, the backend's partitioner,
``to_executorch``), :mod:`.model_loading`, :mod:`.imported` (are the libraries this process
imported still installed as they were?) and :mod:`.timed_run` (``ptebuild run``).
"""
