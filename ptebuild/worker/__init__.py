"""The worker side of every executor: a task as data, lowered and checked in this process.

:mod:`.tasks` (what crosses to a worker and back: a program's plan and digests), :mod:`.execute`
(prepare a worker process, run one task into its store, turn failures into values), :mod:`.lower`
(torch.export, the backend's partitioner, ``to_executorch``, the files streamed into the store),
:mod:`.model_memo` (a model and its exports kept for the next program of it),
:mod:`.model_loading`, :mod:`.imported` (are the libraries this process imported still installed
as they were?) and :mod:`.timed_run` (``ptebuild run``).
"""
