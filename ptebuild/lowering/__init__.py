"""What lowering and checking a program needs below the backends: example inputs, the check
against eager PyTorch in ExecuTorch's runtime, SHA-256 weight keys, quiet native code.

Backends (:mod:`ptebuild.backends`) and the worker (:mod:`ptebuild.worker`) import these; nothing
here imports a backend. Modules that use torch or executorch import them inside functions.
"""
