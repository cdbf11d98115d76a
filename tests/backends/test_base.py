"""The backend seam (:mod:`ptebuild.backends.base`): what a backend declares, and its hooks' defaults.

A backend that declares only its name, options and tolerance gets every hook's documented default
(cheap ones in the builder, worker ones that leave the model and the graph alone); one that needs
a GPU asks schedulers for one; its delegate ids are its payload readers'; a program's typed
options are its plan's binding where it is bound to this backend with these options, else
validated by the backend's own model; the options base class is imported only when asked for.
The worker hooks that need a lowered program (``emit_config``, ``data_files``, ``rewrite_keys``,
``check``) run in every build of the suite, not here (this file imports no torch).
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys
from contextlib import AbstractContextManager

import pytest
from pydantic import ValidationError

from ptebuild.backends import bind_program, get_backend
from ptebuild.backends.base import EXECUTORCH_RUNTIME, Backend, CheckKind, CheckTolerances
from ptebuild.models import options_model_of
from ptebuild.plan import DimPlan, InputPlan, MethodPlan, ProgramPlan


@functools.cache
def bare_options() -> type:
    from ptebuild.backends.options import BackendOptions

    class BareOptions(BackendOptions):
        level: int = 1

    return BareOptions


BARE = Backend(name="bare", options_factory=bare_options, default_check=CheckTolerances(atol=1e-3, rtol=1e-4, min_cosine=0.999))

FORWARD = MethodPlan("forward", "forward", (InputPlan("x", ("batch", 4), "float32"),), (DimPlan("batch", 1, 4, 2),))


def program(backend: str = "xnnpack", options: dict | None = None, kind: str = "factory") -> ProgramPlan:
    return ProgramPlan(name="p", model="m", backend=backend, factory="m:make", kwargs={}, weights=None, seed=0, sources=(),
                       methods=(FORWARD,), data_name=None, options=options if options is not None else {"quantize": "int8"},
                       atol=1e-3, min_cosine=0.999, check_enabled=True, model_entry={}, program_entry={}, kind=kind)


def test_a_backend_that_declares_only_the_required_gets_every_cheap_default():
    assert (BARE.keeps_data_in_pte, BARE.requires_data_name, BARE.needs_gpu) == (False, False, False)
    assert (BARE.forks_safely, BARE.toolchain_from_files, BARE.same_bytes_on_every_platform) == (True, True, False)
    assert (BARE.shim_library_name, BARE.static_shapes, BARE.distinct_outputs, BARE.contiguous_outputs) == (None, None, None, None)
    assert BARE.delegate_ids == ()
    assert BARE.toolchain_facts({}) == {} and BARE.workarounds({}, program("bare", {})) == {}
    assert BARE.can_build() is None and BARE.can_check({"level": 2}) is None
    assert BARE.calibrates({"level": 2}) is False and BARE.reproducible() is True
    assert BARE.check_kind() is EXECUTORCH_RUNTIME and (EXECUTORCH_RUNTIME.numeric, EXECUTORCH_RUNTIME.in_executorch) == (True, True)
    assert BARE.check_defaults({"level": 2}) == CheckTolerances(atol=1e-3, rtol=1e-4, min_cosine=0.999)
    assert BARE.code_in_named_data("abc123") is False
    assert BARE.resources({}) == {} and BARE.lowering_weight({}) == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        BARE.needs_gpu = True  # type: ignore[misc]


def test_a_gpu_backend_asks_schedulers_for_a_gpu():
    gpu = dataclasses.replace(BARE, needs_gpu=True)
    assert gpu.resources({}) == {"num_gpus": 1}
    assert get_backend("cuda").resources({}) == {"num_gpus": 1} and get_backend("portable").resources({}) == {}


def test_worker_hooks_that_default_to_nothing_leave_the_model_and_graph_alone():
    model, exported = object(), object()
    assert BARE.transform_model(model, None, program("bare", {})) is model
    assert BARE.transform_notes(model) == []
    assert BARE.prepare(exported, None, None, lambda module: module, []) is exported
    assert BARE.reference_model(model, program("bare", {})) is model
    assert BARE.partitioners(None) == [] and BARE.fallback_partitioners(RuntimeError("x"), None, program("bare", {})) is None
    assert BARE.probe_here() is None
    context = BARE.lowering_context(None)
    assert isinstance(context, AbstractContextManager)
    with context as entered:
        assert entered is None


def test_a_subclass_overrides_some_hooks_and_keeps_the_others():
    """The plug-in shape (``tests/plugins``'s demo backend): a subclass of Backend, its fields declared."""

    class Structural(Backend):
        def check_kind(self, options=None) -> CheckKind:
            return CheckKind("bare-structural", numeric=False, in_executorch=False)

    backend = Structural(**{f.name: getattr(BARE, f.name) for f in dataclasses.fields(BARE)})
    assert backend.check_kind().name == "bare-structural" and not backend.check_kind().numeric
    assert backend.reproducible() is True and backend.resources({}) == {}


@pytest.mark.parametrize(("name", "ids"), [("portable", ()), ("xnnpack", ("XnnpackBackend",)), ("cuda", ("CudaBackend",))])
def test_delegate_ids_are_those_of_its_payload_readers(name, ids):
    backend = get_backend(name)
    assert backend.delegate_ids == ids
    assert [reader.delegate_id for reader in backend.payload_readers] == list(ids)


def test_the_options_model_is_the_factorys():
    assert BARE.options_model is bare_options()
    assert BARE.options_model.model_validate({"level": 3}).level == 3


def test_a_bound_program_gets_its_bindings_options_without_validating_again():
    bound = bind_program(program())
    typed = get_backend("xnnpack").program_options(bound)
    assert typed is bound.bound.options  # the binding's, made once
    assert get_backend("xnnpack").program_options(bound) is typed


def test_a_program_whose_options_were_replaced_is_validated_by_the_backend():
    bound = bind_program(program())
    replaced = dataclasses.replace(bound, options={"quantize": "none"})  # the binding's source is the old dict
    typed = get_backend("xnnpack").program_options(replaced)
    assert type(typed).__name__ == "XnnpackOptions" and typed.quantize == "none"
    assert get_backend("xnnpack").program_options(program(options={"quantize": "8da4w", "group_size": 32})).group_size == 32


def test_a_language_models_options_are_its_kinds_model_where_bound_and_refused_by_the_backends_alone():
    """An executorch-llm program's options are LlmXnnpackOptions (its kind's): only the binding
    knows that, so an unbound program's are the backend's own, which refuse ``qmode``."""
    llm = program(options={"qmode": "8da4w", "group_size": 32}, kind="executorch-llm")
    typed = get_backend("xnnpack").program_options(bind_program(llm, options_model_of))
    assert type(typed).__name__ == "LlmXnnpackOptions" and typed.qmode == "8da4w"
    with pytest.raises(ValidationError, match="qmode"):
        get_backend("xnnpack").program_options(llm)


def test_a_program_bound_to_another_backend_is_validated_by_this_ones_model():
    xnnpack_program = bind_program(program())
    with pytest.raises(ValidationError, match="quantize"):
        get_backend("portable").program_options(xnnpack_program)  # the portable backend takes no options


def test_backend_options_is_imported_only_when_asked_for():
    """The builder's cheap hooks never pay for pydantic: ``BackendOptions`` loads on first use."""
    code = (
        "import sys\n"
        "import ptebuild.backends.base as base\n"
        "before = 'pydantic' in sys.modules\n"
        "from ptebuild.backends.options import BackendOptions\n"
        "assert base.BackendOptions is BackendOptions\n"
        "try:\n"
        "    base.NoSuchThing\n"
        "except AttributeError as exc:\n"
        "    print(before, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False module 'ptebuild.backends.base' has no attribute 'NoSuchThing'"
