"""The payload readers of ptebuild's own backends' delegates, one module per backend.

A delegate's payload has its backend's format (an XNNPACK flatbuffer, a Core ML model package, a
CUDA shared library and its weights' names...); reading it is file-format knowledge, like reading
the ``.pte`` around it, so it lives in the runtime layer, below the backends that declare the
readers (``Backend.payload_readers``) and beside :mod:`ptebuild.runtime.payloads`, which finds a
reader by delegate id (:data:`~ptebuild.runtime.payloads.READER_MODULES`). Each module defines
``READERS``; none imports torch, executorch or pydantic.
"""
