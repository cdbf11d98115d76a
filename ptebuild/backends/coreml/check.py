"""The Core ML build check (``coreml-structural``): the delegate's model read back, matched to the method.

No Core ML runtime exists off Apple's systems, and ExecuTorch's pip runtime registers no
``CoreMLBackend``: a Core ML program cannot run here. What decides whether it loads and binds
its arguments on a device is checked instead (:mod:`ptebuild.lowering.structure` for the part
every structural check shares):

- the ``.pte`` against the manifest: every method present, its tensor inputs and outputs with
  the declared dtypes and shapes (eager PyTorch's for outputs), every weight key it names found;
- every method has a Core ML delegate, and each delegate call's model is read back **with
  coremltools** (no Core ML runtime: ``MLModel(..., skip_model_load=True).get_spec()`` on the
  payload's ``model.mlpackage``, written to a temporary folder): its specification version loads
  on the program's ``minimum_deployment_target``; ``metadata.json`` binds the arguments by the
  names the model has, in its order; the model has one input per argument the call passes and
  one output per result, each a multi-array of a dtype the delegate converts from
  (:func:`converts`: a bool mask into the float32 input coremltools makes of it) and of a shape
  that takes the argument:
  equal sizes, or a range holding them; for the method's own inputs, a range that also holds
  every size the manifest's dynamic dims allow (a batch of 1 when ``min = 1``).

It does not run the model: its figures (:class:`~ptebuild.lowering.structure.MethodStructure`)
are what was matched, never error figures.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ptebuild.backends.base import CheckKind
from ptebuild.backends.coreml import options as coreml_options
from ptebuild.errors import REPORT, CheckError

STRUCTURAL = CheckKind("coreml-structural", numeric=False)
"""No Core ML runtime here: the delegate's model is read back with coremltools and its inputs and
outputs matched to the method's; nothing is run."""


def _features(features) -> tuple:
    """coremltools' ``FeatureDescription`` messages as :class:`~ptebuild.runtime.payload_readers.coreml.Feature` values."""
    from ptebuild.runtime.payload_readers.coreml import ARRAY_DTYPES, Feature

    out = []
    for feature in features:
        kind = feature.type.WhichOneof("Type")
        array = feature.type.multiArrayType if kind == "multiArrayType" else (
            feature.type.stateType.arrayType if kind == "stateType" else None)
        if array is None:
            out.append(Feature(feature.name, str(kind).removesuffix("Type")))
            continue
        flexibility = array.WhichOneof("ShapeFlexibility")
        ranges = tuple((r.lowerBound, r.upperBound) for r in array.shapeRange.sizeRanges) if flexibility == "shapeRange" else None
        enumerated = tuple(tuple(s.shape) for s in array.enumeratedShapes.shapes) if flexibility == "enumeratedShapes" else None
        out.append(Feature(feature.name, "multiArray" if kind == "multiArrayType" else "state",
                           ARRAY_DTYPES.get(array.dataType, f"type {array.dataType}"), tuple(array.shape), ranges, enumerated))
    return tuple(out)


class _ReadBack:
    """The Core ML models of one ``.pte``, read back with coremltools once each (a multifunction
    model is shared by every method)."""

    def __init__(self, reader, folder: Path) -> None:
        self.reader = reader
        self.folder = folder
        self._specs: dict[str, object] = {}

    def model(self, delegate, where: str):
        """``(pure-Python model, coremltools spec or None for a compiled model, function name or None)``."""
        from ptebuild.runtime.payload_readers import coreml as coreml_payload

        payload = self.reader.delegate_payload(delegate, where)
        reference = coreml_payload.read_reference(payload.read(0, min(payload.size, 4096), "head"), where)
        key, function = f"delegate-{where}", None
        if reference is not None:
            shared = self.reader.named_blob(reference.key)
            if shared is None:
                raise CheckError(f"{where}: refers to Core ML model {reference.key!r}, which the .pte does not hold; {REPORT}")
            payload, key, function = shared, reference.key, reference.function
        model = coreml_payload.read_model(payload)
        if key not in self._specs:
            self._specs[key] = self._coremltools_spec(payload, model, len(self._specs))
        return model, self._specs[key], function

    def _coremltools_spec(self, payload, model, number: int):
        from ptebuild.runtime.payload_readers.coreml import list_files, list_folders

        if model.specification_version is None:
            return None  # a compiled model keeps no specification to read back
        import coremltools as ct

        root = self.folder / f"model-{number}"
        for relative in list_folders(payload):
            (root / relative).mkdir(parents=True, exist_ok=True)
        for relative, (offset, size) in list_files(payload).items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(payload.read(offset, size, relative))
        return ct.models.MLModel(str(root / "model.mlpackage"), skip_model_load=True).get_spec()


RUNTIME_DTYPES = frozenset({"bool", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"})
"""The tensor dtypes ExecuTorch's Core ML delegate passes to a model (``coreml_backend_delegate.mm``,
``get_data_type``: not int8, not bfloat16)."""
MODEL_DTYPES = frozenset({"int32", "float16", "float32", "float64"})
"""The multi-array dtypes of a model input or output it converts to and from, element by element
(``ETCoreMLModel``'s ``prepareArgs``: a buffer of the model's dtype, ``MultiArray::copy``)."""


def converts(dtype: str, model_dtype: str) -> bool:
    """Whether the delegate binds a tensor of ``dtype`` to a model argument of ``model_dtype``:
    a bool mask to the float32 input coremltools makes of it, an int64 index to int32, float32 to
    float16; else only what :func:`~ptebuild.lowering.structure.compatible` allows."""
    from ptebuild.lowering.structure import compatible

    return (dtype in RUNTIME_DTYPES and model_dtype in MODEL_DTYPES) or compatible(dtype, model_dtype)


def _function_features(spec, function: str | None):
    if function is None or not spec.description.functions:
        return _features(spec.description.input), _features(spec.description.output)
    for described in spec.description.functions:
        if described.name == function:
            return _features(described.input), _features(described.output)
    raise CheckError(f"the multifunction Core ML model has no function {function!r}; {REPORT}")


def _check_shape(where: str, feature, arg, declared: dict[int, tuple[int, int]]) -> None:
    """``feature`` takes ``arg``'s sizes, and every size in ``declared`` (axis -> the manifest's
    ``(min, max)``) when the argument is an input of the method."""
    sizes = arg.sizes
    if feature.ranges is not None:
        if len(feature.ranges) != len(sizes):
            raise CheckError(f"{where}: Core ML takes rank {len(feature.ranges)} {feature.dims()}, the .pte passes {arg.describe()}; {REPORT}")
        for axis, ((low, high), size) in enumerate(zip(feature.ranges, sizes)):
            want_low, want_high = declared.get(axis, (size, size))
            if low > want_low or (high >= 0 and high < want_high):
                span = f"{want_low}..{want_high}" if want_low != want_high else str(size)
                raise CheckError(
                    f"{where}: Core ML takes {feature.dims()}, which refuses size {span} of axis {axis} "
                    f"(the .pte passes {arg.describe()}); {REPORT}"
                )
        return
    if feature.enumerated:
        if sizes not in feature.enumerated:
            raise CheckError(f"{where}: Core ML takes only {feature.dims()}, the .pte passes {arg.describe()}; {REPORT}")
        return
    if not feature.shape:
        return  # an output whose shape Core ML decides when it runs
    if feature.shape != sizes:
        raise CheckError(f"{where}: Core ML takes {feature.dims()}, the .pte passes {arg.describe()}; {REPORT}")
    dynamic = sorted(axis for axis, (low, high) in declared.items() if low != high)
    if dynamic:
        raise CheckError(
            f"{where}: Core ML takes only {feature.dims()}, but axis {dynamic[0]} of the method's input is a "
            f"dynamic dim ({declared[dynamic[0]][0]}..{declared[dynamic[0]][1]}); give this program fixed shapes"
        )


def check_program(model, program, pte: Path, ptd: Path | None) -> list:
    """Check the Core ML program ``pte`` (module docstring); raise CheckError at the first
    mismatch, naming the method, the delegate and the argument."""
    from ptebuild.lowering.structure import check_structure
    from ptebuild.runtime.payload_readers.coreml import CoreMLReader

    target = coreml_options.get(program.options, "minimum_deployment_target", coreml_options.DEFAULT_TARGET)
    with tempfile.TemporaryDirectory(prefix="ptebuild-coreml-check-") as tmp:
        return check_structure(model, program, pte, ptd, CoreMLReader(), _Matcher(target, Path(tmp)))


class _Matcher:
    """Matches each call's Core ML model (read back once per model) to the call's arguments."""

    def __init__(self, target: str, folder: Path) -> None:
        self.target = target
        self.target_version = coreml_options.SPECIFICATION_OF_TARGET[target]
        self.folder = folder
        self._models: _ReadBack | None = None

    def __call__(self, found):
        from ptebuild.lowering.structure import Matched, tensor_arg
        from ptebuild.runtime.payload_readers.coreml import SPEC_VERSION_TARGETS

        if self._models is None:
            self._models = _ReadBack(found.reader, self.folder)
        where, method, call, values = found.where, found.method, found.call, found.values
        pure, spec, function = self._models.model(found.delegate, where)
        input_names, output_names = pure.argument_names(function)
        if spec is None:
            if len(call.args) != len(input_names) + len(output_names):
                raise CheckError(
                    f"{where}: the call passes {len(call.args)} arguments, the compiled model's metadata names "
                    f"{len(input_names)} inputs and {len(output_names)} outputs; {REPORT}")
            return Matched((), (), "compiled Core ML model (its specification is not kept)")
        version = spec.specificationVersion
        if version > self.target_version:
            needs = SPEC_VERSION_TARGETS.get(version, f"specification {version}")
            raise CheckError(
                f"{where}: the Core ML model has specification {version} (loads on {needs} and later), "
                f"newer than minimum_deployment_target {self.target!r} (specification {self.target_version}); raise "
                "minimum_deployment_target"
            )
        try:
            inputs, outputs = _function_features(spec, function)
        except CheckError as exc:
            raise CheckError(f"{where}: {exc.message}") from None  # it ends with REPORT
        if [f.name for f in inputs] != input_names or [f.name for f in outputs] != output_names:
            raise CheckError(
                f"{where}: metadata.json binds inputs {input_names} and outputs {output_names}, the model "
                f"has inputs {[f.name for f in inputs]} and outputs {[f.name for f in outputs]}; {REPORT}"
            )
        if len(call.args) != len(inputs) + len(outputs):
            raise CheckError(
                f"{where}: the call passes {len(call.args)} arguments, the Core ML model has "
                f"{len(inputs)} inputs and {len(outputs)} outputs; {REPORT}"
            )
        tensor_inputs = [i for i in found.plan.inputs() if tensor_arg(values, i) is not None]
        declared_inputs = [leaf for spec_ in method.inputs for leaf in spec_.leaves() if leaf.kind == "tensor"]
        dims = {d.name: (d.min, d.max) for d in method.dims}
        for role, features, args in (("input", inputs, call.args[: len(inputs)]), ("output", outputs, call.args[len(inputs):])):
            for feature, index in zip(features, args):
                at = f"{where} {role} {feature.name!r}"
                arg = tensor_arg(values, index)
                if arg is None or feature.kind != "multiArray":
                    raise CheckError(
                        f"{at}: Core ML has a {feature.kind}, the .pte passes "
                        f"{'a ' + values[index].kind if arg is None else 'a tensor'}; {REPORT}"
                    )
                if feature.dtype is None or not converts(arg.dtype, feature.dtype):
                    raise CheckError(f"{at}: Core ML takes {feature.dtype}, the .pte passes {arg.describe()}; {REPORT}")
                declared: dict[int, tuple[int, int]] = {}
                if role == "input" and index in tensor_inputs:
                    position = tensor_inputs.index(index)
                    if position < len(declared_inputs):
                        shape = declared_inputs[position].shape
                        declared = {axis: dims[d] for axis, d in enumerate(shape) if isinstance(d, str) and d in dims}
                _check_shape(at, feature, arg, declared)
        fn = pure.function(function)
        operations = sum(fn.operations.values()) if fn else 0
        return Matched(tuple(f.describe() for f in inputs), tuple(f.describe() for f in outputs),
                       f"Core ML specification {version} ({SPEC_VERSION_TARGETS.get(version, '?')}+), {operations} MIL operations")
