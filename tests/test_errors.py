"""Errors carry their manifest and location as fields; str() joins them into one line; and every
error ptebuild raises ends with what to do.

ERROR_PATHS lists every ``raise`` of a ptebuild error in ``ptebuild/``, by module and function,
with the last clause of its message (``{}`` for a value): a new error path, or a message whose
ending changed, fails here until its row says what the message now ends with. Each clause must
say what to do (:data:`error_paths.FIX_WORDS`), unless the message is passed on from below
(PASSES_ON says where it was made, and that one is listed too), the module is a reader of a
binary format whose callers add the fix (READERS, tested below through each entry point), or the
error is a remote tier's, which the cache turns into a warning and a miss (WARNED).
"""

from __future__ import annotations

import pickle

import pytest
from error_paths import FIX_WORDS, error_paths

from ptebuild.errors import DAMAGED, BuildError, CheckError, FormatError, ManifestError, PtebuildError


def test_location_and_manifest_are_fields_joined_by_str():
    error = CheckError("method 'forward' output 0 differs", location="programs.p")
    assert (error.message, error.location, error.manifest) == ("method 'forward' output 0 differs", "programs.p", None)
    assert str(error) == "programs.p: method 'forward' output 0 differs"
    located = BuildError(error.message, manifest="robot.toml", location=error.location)
    assert str(located) == "robot.toml: programs.p: method 'forward' output 0 differs"
    assert str(PtebuildError("plain")) == "plain"


def test_errors_survive_pickling_with_their_fields():
    for error in (BuildError("x", manifest="m.toml", location="models.a.weights"), ManifestError("bad"), CheckError("c")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error)
        assert (str(again), again.location, again.manifest) == (str(error), error.location, error.manifest)
        assert again.exit_code == error.exit_code


def test_a_fix_known_above_the_raise_is_the_last_clause():
    error = FormatError("x.pte: truncated at offset 8").with_fix(DAMAGED)
    assert str(error) == f"x.pte: truncated at offset 8; {DAMAGED}"
    assert error.with_fix("another").fix == DAMAGED  # the first fix given stays
    assert str(pickle.loads(pickle.dumps(error))) == str(error)
    said = FormatError("y.ptd: bad; rebuild it", fix="rebuild it")
    assert str(said) == "y.ptd: bad; rebuild it"  # not said twice


# -- the fix where people meet the error ------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from release_build import built_tiny

    return built_tiny(tmp_path_factory)


def test_a_stale_lock_says_to_run_ptebuild_lock(built, tmp_path, capsys):
    """The issue's case: the lock is stale for a program whose manifest entry changed; pack and
    build --locked say so and end with the command that makes the lock current."""
    import shutil

    from ptebuild import cli
    from ptebuild.release.lock import lock_entries_from_record, write_lock
    from ptebuild.runtime.record import read_build_record

    project = tmp_path / "project"
    shutil.copytree(built.parent, project)
    manifest = project / built.name
    entries = lock_entries_from_record(read_build_record(project / "out").targets)
    old = entries["tiny_xnnpack"]
    seeded = {**old.inputs, "manifest.model.seed": "0"}  # the lock was written before the seed changed to 1
    entries["tiny_xnnpack"] = type(old)(**{**old.__dict__, "inputs": seeded, "key": "0" * 32})
    write_lock(project / "ptebuild.lock", entries, manifest=manifest.name)
    assert cli.main(["pack", str(manifest), "-o", str(tmp_path / "r.tar.gz")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {project / 'ptebuild.lock'}: lock is stale for program tiny_xnnpack: "
                          "manifest entry model.seed changed (0 -> 1)")
    assert err.endswith(f"; nothing packed; run `ptebuild lock {manifest}` to build and lock what changed, or undo the change\n")
    assert cli.main(["build", str(manifest), "--locked", "--cache", str(tmp_path / "cache"), "--only", "tiny_xnnpack"]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: --locked:")]
    assert lines and all(line.endswith(f"run `ptebuild lock {manifest}` to build and lock what changed, or undo the change")
                         for line in lines), lines


def test_a_damaged_file_is_told_what_to_do_at_every_entry_point(built, tmp_path):
    import shutil

    import ptebuild
    from ptebuild.errors import UsageError

    out = tmp_path / "out"
    shutil.copytree(built.parent / "out", out)
    pte = out / "tiny_portable.pte"
    pte.write_bytes(pte.read_bytes()[:300])
    for call in (lambda: ptebuild.inspect(pte), lambda: ptebuild.diff(pte, built.parent / "out" / "tiny_portable.pte"),
                 lambda: ptebuild.load(pte, [out / "tiny_portable_weights.ptd"])):
        with pytest.raises(FormatError) as raised:
            call()
        assert str(raised.value).endswith(f"; {DAMAGED}")
    [problem] = [p for t in ptebuild.verify(out).targets for p in t.problems if "truncated" in p]
    assert problem.endswith(f"; {DAMAGED}")
    with pytest.raises(UsageError, match=r"cannot read: No such file or directory; give the path of a .pte or .ptd$"):
        ptebuild.inspect(tmp_path / "gone.pte")


READERS = {
    # Readers of binary formats: a message says what is wrong and at which offset; the entry
    # points that read a file for a caller add DAMAGED (api/inspect.py: inspect, operator_list,
    # diff; runtime/loader.py: load; runtime/verify.py: verify_folder), or, for a remote cache's
    # answers (store/reapi.py), the gRPC tier turns them into a failed request (a warning, then
    # the tier is switched off: store/faults.py).
    # Each backend's payload reader (runtime/payload_readers/*.py) is read through the same entry points.
    "runtime/file_region.py", "runtime/flatbuffer.py", "runtime/protobuf.py", "runtime/bpte_file.py",
    "runtime/compat.py", "runtime/inspect.py", "runtime/oplist.py", "runtime/ptd_file.py", "runtime/ptd_merge.py",
    "runtime/ptd_write.py", "runtime/pte_file.py", "runtime/pte_inspection.py", "store/reapi.py",
    "runtime/payload_readers/coreml.py", "runtime/payload_readers/cuda.py", "runtime/payload_readers/openvino.py",
    "runtime/payload_readers/vulkan.py", "runtime/payload_readers/xnnpack.py",
}

WARNED = {
    # Errors a remote cache tier raises to the cache's front end, which never stops a build on them:
    # a blob with wrong bytes is a miss with a warning, repeated failures switch the tier off for the
    # build with one ("remote cache disabled for this build: ..."), and the build goes on locally.
    ("store/http.py", "HttpBlobStore.fetch"), ("store/http.py", "HttpBlobStore.read_bytes"),
    ("store/grpc_blobs.py", "GrpcBlobStore._read_batch"), ("store/grpc_blobs.py", "GrpcBlobStore._fetch_stream"),
}

PASSES_ON = {
    # (module, function, clause): where the text that ends the message is made (each ends with a fix).
    ("backends/cuda/__init__.py", "CudaBackend.partitioners", "cannot lower for Windows: {}"):
        "backends/cuda/toolchain.py windows_toolchain_problem: each problem names what to install or set",
    ("backends/cuda/windows.py", "check_dll", "{}: the DLL imports {} from {}, which does not export {}{}"):
        "the last value is '; add ... to the shim list' or '; build with the ... that exports ...'",
    ("backends/coreml/check.py", "_Matcher.__call__", "{}: {}"): "_function_features: its message ends with REPORT",
    ("backends/xnnpack/__init__.py", "quantized_8da4w", "{}"): "_group_size_hint: a group_size that fits, or skip_ungroupable",
    ("builder/keys.py", "_digest_input", "{}"): "the caller's fix argument ('give the path of ...')",
    ("cli/cache.py", "gc_command", "--max-size: {}"): "sizes.py parse_size: 'give a number with an optional unit'",
    ("lowering/bundled_io.py", "write_bpte", "bundle_io: {}"): "runtime/bpte_file.py check_suites' problems",
    ("lowering/check.py", "_MethodRunner.check_direction", "{}"): "DirectionBound.fix: what the direction check says to do",
    ("models/factory/methods.py", "resolve_methods", "{}: {}.shape: unknown dynamic dim {}{}"):
        "a did-you-mean, or 'use one of ..., or declare it under models.M.dims'",
    ("manifest/resolve.py", "_resolve_program", "{}: {}.{}: {}"):
        "models/*: ModelKind.program_problem: each problem ends with what to do ('use one of ...', 'remove ...', 'set ...')",
    ("models/multimodal/audio.py", "read_wav", "{}"): "fix: 'give a PCM WAV file at N Hz (for example: ffmpeg -i IN -ac 1 -ar N OUT.wav)'",
    ("models/model_files.py", "check_model_files", "{}"):
        "fixes[field]: each kind's ('give the model\'s params JSON ...', 'give a tokenizer.json ...', 'give a checkpoint ...')",
    ("models/executorch_llm/__init__.py", "ExecutorchLlmKind.resolve", "{}: models.{}.huggingface: {}: {}"):
        "models/executorch_llm/huggingface.py FolderProblem: what ExecuTorch's definitions do not compute (some say "
        "what to use instead: 'use params and checkpoint for the others'; the rest name the unsupported setting only)",
    ("models/executorch_llm/build.py", "_read_huggingface", "{}: {}"): "FolderProblem, as above",
    ("manifest/resolve.py", "check_collisions", "{}: {} and {} {}"):
        "'both write X; give one of them another name' or '...; choose names that differ in more than case'",
    ("manifest/resolve.py", "_check_name", "{}: {}: name {} {}"): "ptebuild/names.py name_problem: each ends with its fix",
    ("release/pack.py", "_refuse_stale", "{}"): "way_out: 'build it first (`ptebuild build ...`)' and '--from-cache' where it holds",
    ("release/pack.py", "_bundle_of", "--bundle: {} has no bundle {}{}{}"): "'; name one of ...' or '; declare it as [bundles.NAME]'",
    ("shims/deffile.py", "parse_def", "{}: {}"): "shims/model.py ShimList's own messages",
    ("shims/deffile.py", "parse_toml", "{}: {}"): "shims/model.py Export's and deffile's own messages",
    ("models/factory/checkpoints.py", "_load", "{}"): "_advice: 'set weights_key = ...' or 'give weights a state dict'",
    ("models/factory/checkpoints.py", "load_state_dict", "{}"): "'...: set weights_prefix = ...' or 'drop weights_prefix, or name the prefix ...'",
    ("models/factory/lower.py", "_lower", "preparing the model for {} failed: {}{}"): "known_limit: a known limit's advice, else TOOLCHAIN",
    ("models/factory/lower.py", "_lower", "lowering for {} failed: {}{}"): "known_limit: a known limit's advice, else TOOLCHAIN",
    ("models/factory/lower.py", "export_method", "torch.export of method {} failed: {}{}"): "known_limit (as above)",
    ("models/factory/lower.py", "export_method", "preparing method {} for {} failed: {}{}"): "known_limit (as above)",
    ("models/factory/loading.py", "build_model", "factory {}: {}"): "_kwargs_problem: '...; give only kwargs the factory takes (...)'",
    ("models/factory/loading.py", "build_model", "{}"):
        "_state_misfit: 'set weights_prefix = ...' (checkpoints.py prefix_hint), else _OTHER_WEIGHTS 'give the weights of this model ...'",
}


def test_every_error_path_is_listed_with_its_last_clause():
    """A new raise, a moved one or a changed ending fails here: update ERROR_PATHS (and check it says what to do)."""
    found = error_paths()
    assert sorted(found) == sorted(ERROR_PATHS), "modules raising ptebuild errors changed"
    for module, functions in found.items():
        assert functions == ERROR_PATHS[module], module


def test_every_error_ends_with_what_to_do():
    for module, functions in ERROR_PATHS.items():
        for function, clauses in functions.items():
            for clause in clauses:
                if module in READERS or (module, function) in WARNED or FIX_WORDS.search(clause):
                    continue
                assert (module, function, clause) in PASSES_ON or clause.startswith("<"), (
                    f"{module}: {function}: the message ends {clause!r}: end it with what to do")


def test_passed_on_messages_are_listed():
    listed = {(m, f, c) for m, functions in ERROR_PATHS.items() for f, clauses in functions.items() for c in clauses}
    assert set(PASSES_ON) <= listed



ERROR_PATHS = {
    "api/build.py": {
        "_check_out_dir": [
            "pass a folder to write the outputs into",
            "name a folder, relative to the manifest",
        ],
        "select": [
            "name one of {}",
            "name one of {}",
        ],
    },
    "api/inspect.py": {
        "inspect": [
            "give the path of a .pte or .ptd",
        ],
        "operator_list": [
            "give the path of a .pte",
        ],
        "diff": [
            "diff: {} and {}: compare two bundles, or two .pte or .ptd files",
            "diff: {} and {}: compare two output folders, or two .pte or .ptd files",
            "give the paths of two .pte or .ptd files",
        ],
    },
    "api/lock.py": {
        "lock": [
            "drop --only, --skip-backend and --shard",
            "drop --locked and --reproduce (run `ptebuild build --reproduce` first to see that the build is reproducible)",
        ],
    },
    "api/pack.py": {
        "pack": [
            "pack: --out and --from-cache exclude each other (--from-cache reads no output folder)",
            "pack: --cache only goes with --from-cache",
        ],
        "pack_release": [
            "--bundle: {} declares no bundles (add [bundles.NAME] programs = [...])",
            "pack: {} declares no bundles: give the archive to write (-o NAME.tar.gz)",
            "name one of {}",
            "-o {}: not a folder (give the folder the bundles go into, or NAME.tar.gz with one --bundle)",
            "{}: cannot write there: {}",
        ],
    },
    "api/request.py": {
        "BuildRequest.validate": [
            "--jobs {}: give at least 1",
            "give one",
            "--shard {}/{}: give I/N with 1 <= I <= N, e.g. 1/2",
        ],
        "parse_shard": [
            "--shard {}: give I/N with 1 <= I <= N, e.g. 1/2",
        ],
        "remote_secret": [
            "set it to the cache's signing secret",
        ],
        "executor_name": [
            "use one of {}",
            "drop --no-cache",
        ],
    },
    "api/run.py": {
        "run": [
            "{} is a {} model's: drop --audio",
            "give 1 or more",
            "{} generates text: drop --method",
        ],
        "_runs_here": [
            "run it on its device with a runtime built for the backend (docs/device.md)",
        ],
    },
    "api/verify.py": {
        "verify": [
            "give one such as 1.5.1",
        ],
    },
    "backends/base.py": {
        "Backend.data_files": [
            "set data_name",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "backends/coreml/check.py": {
        "_ReadBack.model": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "_function_features": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "_check_shape": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "give this program fixed shapes",
        ],
        "_Matcher.__call__": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "raise minimum_deployment_target",
            "{}: {}",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "runtime/payload_readers/coreml.py": {
        "CoreMLReader._model": [
            "{}: refers to named data {}, which the .pte does not hold",
        ],
        "read_reference": [
            "{}: corrupt Core ML reference ({}): {}",
        ],
        "_walk.walk": [
            "{}: corrupt Core ML folder index: node {} (of {}) named twice or missing",
            "{}: corrupt Core ML folder: file {} [{}, {}) overlaps the index at {}",
            "{}: corrupt Core ML folder index: node {} has kind {}",
            "{}: corrupt Core ML folder index: node {}: {}",
        ],
        "read_model": [
            "{}: Core ML folder without metadata.json (files: {})",
            "{}: corrupt metadata.json: {}",
            "{}: Core ML folder without model.mlpackage/Data/com.apple.CoreML/model.mlmodel",
        ],
        "_read_index": [
            "{}: not a Core ML folder: no byte-reversed JSON index at its end",
            "{}: corrupt Core ML folder index: {}",
            "{}: corrupt Core ML folder index: no nodes",
        ],
    },
    "backends/cuda/__init__.py": {
        "CudaBackend.partitioners": [
            "cannot lower for Windows: {}",
            "build the shim target first",
        ],
        "CudaBackend.data_files": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "set data_name",
        ],
    },
    "backends/cuda/check.py": {
        "_runner": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "aoti_method": [
            "torch sees none: build CUDA programs on a machine with one",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "check_with_aoti_runner": [
            "build CUDA programs on a machine with one",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "return a .clone() in all but one",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "slot_outputs": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "the AOTInductor runner check covers programs whose outputs all come out of the delegate: return only tensors the model computes",
        ],
    },
    "backends/cuda/inductor.py": {
        "reproducible_inductor": [
            "or set compile_specs max_autotune = true (kernels chosen by timing, not byte-reproducible)",
        ],
    },
    "runtime/payload_readers/cuda.py": {
        "decode": [
            "{}: not a CUDA weight payload: starts with {}, expected {} (executorch 1.5.1)",
            "{}: {} ({}) has {} dims at offset {}, limit {}",
            "{}: {} bytes after the last CUDA weight entry at offset {}",
        ],
        "_Reader.unpack": [
            "{}: truncated CUDA weight payload: {} at offset {} needs {} bytes, {} left",
        ],
        "_Reader.string": [
            "{}: truncated CUDA weight payload: {} at offset {} needs {} bytes, {} left",
            "{}: {} at offset {} is not UTF-8",
        ],
    },
    "backends/cuda/runtime_shims.py": {
        "check_program_shims": [
            "it would crash at its first call on the device (the AOTInductor runner check uses libtorch's shims and would pass): express the op another way (scatter, index_put and x[mask] lower to these) or build with an ExecuTorch that defines them",
        ],
    },
    "backends/cuda/weightkeys.py": {
        "key_cuda_weights_by_sha256": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "backends/cuda/windows.py": {
        "link_folder": [
            "point it at an unzipped Windows CUDA runtime (the nvidia-cuda-runtime win_amd64 wheel)",
        ],
        "check_windows_program": [
            "build the shim target first",
            "point it at an unzipped Windows CUDA runtime",
        ],
        "check_dll": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "link it statically",
            "{}: the DLL imports {} from {}, which does not export {}{}",
        ],
    },
    "runtime/payload_readers/openvino.py": {
        "regions": [
            "{}: OpenVINO payload of {} bytes is shorter than its {}-byte header",
            "{}: not an OpenVINO CPU payload: its {} [{}, +{}) is not inside the {}-byte payload after byte {}",
        ],
        "decode_model": [
            "{}: the model region at {} is not the CPU plugin's IR (a GPU or NPU payload?)",
        ],
        "read_openvino_blob": [
            "{}: the OpenVINO IR does not parse: {}",
            "{}: the OpenVINO IR's root is <{}>, not <net>",
        ],
    },
    "backends/vulkan/__init__.py": {
        "VulkanBackend.data_files": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "set data_name",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "backends/vulkan/check.py": {
        "_match": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "runtime/payload_readers/vulkan.py": {
        "read_graph": [
            "{}: not a Vulkan payload: bytes 4..8 are {}, expected {}",
            "{}: bad Vulkan header: length {}, flatbuffer at {}",
            "{}: truncated Vulkan payload: constants [{}, {}) past its {} bytes",
            "{}: Vulkan flatbuffer identifier {} at offset {}, expected {}",
            "{}: corrupt: VkGraph input/output id {}, graph has {} values",
            "{}: corrupt: {} [{}, {}) lies outside the {} constant bytes",
            "{}: corrupt: {} is in named data but has no named_key",
        ],
    },
    "backends/xnnpack/__init__.py": {
        "quantized_8da4w": [
            "{}",
            "use quantize = 'int8-dynamic'",
        ],
    },
    "runtime/payload_readers/xnnpack.py": {
        "_graph": [
            "{}: truncated XNNPACK header ({} bytes)",
            "{}: XNNPACK flatbuffer [{}, {}) runs past the {}-byte blob",
            "{}: not an XNNPACK blob (bytes 4..8 are {})",
        ],
    },
    "builder/executors/ray.py": {
        "RayExecutor._init": [
            "--executor ray needs Ray: pip install 'ptebuild[ray]'",
            "start it (ray start --head) or give its address with --ray-address",
        ],
        "RayExecutor._server": [
            "run the build on a node of the cluster (a Ray Client driver, ray://, is not one)",
        ],
    },
    "builder/keys.py": {
        "model_sources": [
            "give globs of files relative to the manifest",
        ],
        "module_sources": [
            "put it beside the manifest or install it",
        ],
        "sample_inputs": [
            "give a file or folder of torch.save'd input tuples, relative to the manifest, or a factory 'package.module:callable'",
        ],
        "_digest_input": [
            "{}",
        ],
    },
    "builder/outdir.py": {
        "OutputFolder.check_ownership": [
            "choose names that differ in more than case, or remove {}",
            "give one of them another name or output folder, or delete {}",
        ],
    },
    "builder/publish.py": {
        "StoreBlobs.restore": [
            "build again to store it anew",
        ],
    },
    "builder/shared_data.py": {
        "_output": [
            "build again (ptebuild cache verify removes broken entries)",
        ],
    },
    "builder/target.py": {
        "Target.own_file": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "cache_dir.py": {
        "cache_folder": [
            "pass the cache folder",
        ],
    },
    "cli/cache.py": {
        "gc_command": [
            "--max-size: {}",
        ],
    },
    "cli/shims.py": {
        "_read_bytes": [
            "give the path of a .lib, .def or shim list",
        ],
        "_write_bytes": [
            "give a path in a folder you can write to",
        ],
    },
    "lowering/binding.py": {
        "bind": [
            "{} takes each parameter once: remove one of them",
            "rename the method's inputs after its parameters: {}",
            "name each input after the parameter it is passed as ({})",
            "declare it too",
        ],
        "_torch_own_binding": [
            "name each input after the parameter it is passed as ({})",
        ],
        "_check_fits": [
            "declare one input per parameter it needs, named after it",
        ],
    },
    "lowering/bundled_io.py": {
        "write_bpte": [
            "bundle_io: {}",
            "set bundle_io = false for this program",
        ],
    },
    "lowering/check.py": {
        "_same_layout": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "the program computes something else than the model: check the model for this backend",
        ],
        "_MethodRunner.check_direction": [
            "{}",
        ],
    },
    "lowering/placement.py": {
        "move_named_data": [
            "install the executorch that constraints.txt pins (1.5.1), which ptebuild supports",
        ],
    },
    "lowering/samples.py": {
        "load_samples": [
            "fix the factory (it is called without arguments)",
            "give a file or folder relative to the manifest",
            "save tuples of tensors with torch.save, or give a factory 'package.module:callable'",
            "give at least one tuple of inputs",
        ],
        "_import_factory": [
            "fix the module, or put it beside the manifest",
            "name a callable that returns the samples ({}:NAME)",
            "name a function that returns the samples",
        ],
        "_as_samples": [
            "give a tuple of the method's inputs, or a list of such tuples",
        ],
        "check_samples": [
            "give samples that fit the method's declared inputs",
        ],
    },
    "lowering/structure.py": {
        "check_parses": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "delegated": [
            "method {} has no {} delegate: the partitioner took none of its operators ({} run on ExecuTorch's portable kernels): build it for the portable backend, or change the model to operators this backend takes",
        ],
        "check_method_io": [
            "<f\"{where} takes {len(found)} tensor {kind}s in the .pte, {('the manifest declares' if kind == 'input' else 'eager PyTorch returns')} {len(tensors)}; \" + (REPORT if kind == 'input' else 'make the method return the same outputs at every size')>",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "method_plans": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "check_structure": [
            "<exc.message>",
        ],
    },
    "lowering/weightkeys.py": {
        "key_constants_by_sha256": [
            "install executorch 1.5.1, the version ptebuild supports (constraints.txt)",
        ],
        "_rename_external_tensors": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "manifest/load.py": {
        "read_toml": [
            "give the path of a .toml manifest",
            "give the path of a .toml manifest",
            "save the manifest as UTF-8",
            "give a manifest you can read",
            "correct the TOML there",
            "correct the TOML there",
        ],
        "load_manifest": [
            "<describe_validation_error(exc, display, Manifest)>",
        ],
        "load_manifest_text": [
            "correct the TOML there",
            "<describe_validation_error(exc, display, Manifest)>",
        ],
    },
    "manifest/resolve.py": {
        "_check_name": [
            "{}: {}: name {} {}",
        ],
        "_resolve_program": [
            "declare it as [{}]",
            "set backend here or in [defaults]",
            "list at least one method or leave it out",
            "remove methods here",
            "name one of {}",
            "list each once",
            "{}: {}.{}: {}",
            "give this program a model whose shapes are fixed",
            "backend {} writes its weights to a .ptd: set data_name (e.g. data_name = \"{}_weights\")",
            "remove data_name",
            "remove it",
            "leave bundle_io off for it",
            "leave etrecord off for it",
            "name one of {}",
            "give globs of files relative to the manifest",
            "{}: {}.{}: {}",
        ],
        "_resolve_options": [
            "keep one",
            "<describe_validation_error(exc, display, options_model, prefix=prefix)>",
            "declare it as [{}]",
            "name the shim target {}",
        ],
        "check_collisions": [
            "{}: {} and {} {}",
        ],
        "resolve": [
            "put it beside the manifest or install it",
            "give a .def or shim-list file",
        ],
        "_bundle_programs": [
            "name one of {}",
            "declare it as [{}] or name one of {}",
        ],
        "_resolve_bundle": [
            "name it NAME.tar.gz, NAME.tgz or NAME.zip",
            "name files inside it (relative paths without '..')",
        ],
        "_check_bundle_collisions": [
            "give one an output of its own",
        ],
    },
    "models/base.py": {
        "ModelKind.generate": [
            "--prompt is for programs of executorch-llm models: drop --prompt",
        ],
    },
    "models/executorch_llm/__init__.py": {
        "ExecutorchLlmKind.resolve": [
            "rename it",
            "{}: models.{}.huggingface: {}: {}",
        ],
    },
    "models/model_files.py": {
        "check_model_files": ["{}", "{}: models.{}.tokenizer: its file name {} {} (it is written beside each program as <program>.<file name>)"],
    },
    "models/multimodal/__init__.py": {
        "_sizes": ["give upstream's params.json of the model", "give upstream's params.json of the model"],
        "MultimodalKind.generate": ["give --audio FILE (a 16 kHz PCM WAV file)"],
    },
    "models/multimodal/audio.py": {
        "read_wav": ["{}", "{}", "{}", "{}", "{}"],
        "mel_frames": ["give a longer clip", "give a shorter clip, or raise max_audio_seconds and build again"],
    },
    "models/multimodal/build.py": {
        "build_program": ["give upstream's params.json (Mistral's layout, with multimodal.whisper_model_args)", "change the model where the cause points (the log has the whole output), or report it to ExecuTorch or PyTorch if the model is right"],
        "_lower": ["change the model where the cause points (the log has the whole output), or report it to ExecuTorch or PyTorch if the model is right"],
    },
    "models/multimodal/check.py": {
        "check_in_runner": ["ExecuTorch's MultimodalRunner generated {} from the check's prompt{}, the program run step by "
                            "step {}: its metadata methods or its tokenizer do not fit the runner"],
    },
    "models/multimodal/voxtral.py": {
        "make_model": ["give the checkpoint of these params"],
        "random_checkpoint": ["this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug"],
    },
    "models/executorch_llm/build.py": {
        "read_params": [
            "give ExecuTorch's params JSON of the model",
            "give ExecuTorch's params JSON of the model",
        ],
        "quantization_fits": [
            "use qmode = '8da4w' (with group_size), or remove qmode",
        ],
        "_read_huggingface": [
            "{}: {}",
        ],
    },
    "models/executorch_llm/export.py": {
        "export_with_upstream": [
            "change the model where the cause points (the log has the whole output), or report it to ExecuTorch or PyTorch if the model is right",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "export_with_backend": [
            "change the model where the cause points (the log has the whole output), or report it to ExecuTorch or PyTorch if the model is right",
        ],
        "_write": [
            "give the adapter target_modules of the model",
        ],
        "_name_mutable_buffers": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "models/executorch_llm/generation.py": {
        "check_in_runner": [
            "ExecuTorch's TextLLMRunner generated {} from {}, the program run step by step {}: its metadata methods or its tokenizer do not fit the runner",
        ],
    },
    "models/executorch_llm/runner.py": {
        "built_files": [
            "run `{}` first",
        ],
    },
    "models/executorch_llm/tokenizer.py": {
        "load_tokenizer": [
            "give a tokenizer.json, a tiktoken file or a SentencePiece model",
        ],
        "check_fits": [
            "give the model's own tokenizer or a vocab_size that holds it",
        ],
    },
    "models/factory/methods.py": {
        "resolve_methods": [
            "{}: {}.shape: unknown dynamic dim {}{}",
        ],
    },
    "release/archive.py": {
        "archive_format": [
            "name it NAME.tar.gz, NAME.tgz or NAME.zip",
        ],
        "reproducible_timestamp": [
            "set it to seconds since 1970-01-01 UTC, or unset it",
        ],
        "write_archive": [
            "rename one of them",
            "give the archive's file name, e.g. {}/bundle.tar.gz",
            "give a path in a folder",
            "give a path in a folder you can write to",
        ],
    },
    "release/bundle.py": {
        "verify_bundle": [
            "{}: no such file (give a bundle written by `ptebuild pack`)",
        ],
        "bundle_files": [
            "{}: no such file (give a bundle written by `ptebuild pack`)",
            "<problems[0]>",
        ],
        "_open_archive.extract": [
            "give a bundle written by `ptebuild pack`",
        ],
        "_open_archive": [
            "give a bundle you can read",
            "pack it again",
        ],
    },
    "release/diff.py": {
        "_read": [
            "give a bundle written by `ptebuild pack`",
            "give a bundle written by `ptebuild pack`",
        ],
        "_read_folder": [
            "diff: {}: no ptebuild.json (an output folder of `ptebuild build`, or a bundle)",
        ],
    },
    "release/lock.py": {
        "LockEntry.from_toml": [
            "{}.{}: unknown field (regenerate it with `ptebuild lock MANIFEST`)",
            "{}.sha256: {} is not a sha256 hex digest (regenerate it with `ptebuild lock MANIFEST`)",
            "{}.size: expected a size in bytes (regenerate it with `ptebuild lock MANIFEST`)",
            "{}.runtime: {} (regenerate it with `ptebuild lock MANIFEST`)",
        ],
        "loads_lock": [
            "{}: not valid TOML: {} (regenerate it with `ptebuild lock MANIFEST`)",
            "{}: format: not a ptebuild lockfile, expected format = {} (regenerate it with `ptebuild lock MANIFEST`)",
            "{}: version: lockfile version {}, this ptebuild reads {} (regenerate it with `ptebuild lock MANIFEST`)",
            "{}: manifest: expected the manifest's file name (regenerate it with `ptebuild lock MANIFEST`)",
        ],
        "read_lock": [
            "{}: no lockfile (write it with `ptebuild lock MANIFEST`)",
            "{}: cannot read: {} (regenerate it with `ptebuild lock MANIFEST`)",
        ],
        "_expect": [
            "{}: expected {} (regenerate it with `ptebuild lock MANIFEST`)",
        ],
        "_string_table": [
            "{}.{}: expected a string (regenerate it with `ptebuild lock MANIFEST`)",
        ],
    },
    "release/pack.py": {
        "pack": [
            "build the manifest first: `ptebuild build {}`",
            "run `ptebuild build {}`",
            "rebuild it with `ptebuild build {}`",
            "<f'{lock.path}: {mismatches[0]}{more}; nothing packed' + (f'; {fix}' if fix else '')>",
        ],
        "pack_from_cache": [
            "write it with `ptebuild lock MANIFEST`",
            "the lock is stale: run `ptebuild lock {}`",
            "build and lock it (`ptebuild build {}`, `ptebuild lock {}`), then pack",
            "write it again with `ptebuild lock MANIFEST`",
            "build them there or pack from a cache that has them",
            "{}: cannot write there: {}",
            "build it again into that cache",
            "check the cache folder (`ptebuild cache verify`)",
            "build it again into that cache",
        ],
        "_refuse_stale": [
            "{}",
        ],
        "_bundle_of": [
            "--bundle: {} has no bundle {}{}{}",
        ],
        "_destination": [
            "pack: give the archive to write (-o NAME.tar.gz)",
        ],
        "_lock_bytes": [
            "give a lock you can read (--lock)",
        ],
        "_over_budget": [
            "bring the program within its budget or raise the budget, then build and pack again",
        ],
        "_included": [
            "give globs of files beside the manifest",
            "give files inside it",
            "rename it",
        ],
        "_lock_manifest": [
            "{}: the lock does not name its manifest (give the manifest)",
            "{}: manifest: {} does not exist (give the manifest)",
        ],
        "_write_bundle": [
            "give files you can read",
            "{}: a manifest named {} collides with a file of the bundle (rename it)",
        ],
    },
    "runtime/bpte_file.py": {
        "parse_bpte": [
            "{}: truncated: {} bytes, too short for a .bpte",
            "{}: not a .bpte file: identifier {} at offset 4, expected {}",
        ],
        "_vector_range": [
            "{}: {} has no {}",
        ],
    },
    "runtime/compat.py": {
        "_ptd_format": [
            "{}: not a .ptd file: identifier {} at offset 4, expected {}",
        ],
    },
    "runtime/file_region.py": {
        "read_exact": [
            "{}: truncated: cannot read {} ({} bytes) at offset {}, file has {} bytes",
        ],
        "sha256_of_range": [
            "{}: truncated: {} ({} bytes at offset {}) ends past the end of the file",
        ],
        "Blob.read": [
            "{}: truncated or corrupt: {} [{}, {}) lies outside the {}-byte payload",
        ],
    },
    "runtime/flatbuffer.py": {
        "FlatbufferView._check": [
            "{}: truncated or corrupt: cannot read {} ({} bytes) at offset {}",
        ],
        "Table.string": [
            "{}: corrupt: {}.{} at offset {} is not NUL-terminated",
            "{}: {}.{} is not UTF-8",
        ],
        "Table._vector": [
            "{}: truncated or corrupt: {}.{} claims {} elements at offset {}, past the end of the data",
        ],
    },
    "runtime/inspect.py": {
        "inspect": [
            "{}: neither a .pte nor a .ptd: identifier {} at offset 4 (expected {} or {})",
        ],
    },
    "runtime/loader.py": {
        "VerifiedProgram.run": [
            "call one of {}",
            "`ptebuild verify` the folder, or build the program again",
        ],
        "load": [
            "`ptebuild verify` the folder, or build the program again",
        ],
        "_require_keys": [
            "give the .ptd built with this .pte",
        ],
        "_verify_blobs": [
            "give the .ptd ptebuild built with the .pte",
            "build it again",
        ],
        "_single_data_file": [
            "executorch 1.5.1 loads one .ptd per program: give the program one data name",
        ],
    },
    "runtime/oplist.py": {
        "_kernel_calls": [
            "{}: operator index {} out of range ({} operators)",
        ],
        "_at": [
            "{}: value index {} out of range ({} values)",
        ],
    },
    "runtime/protobuf.py": {
        "Message._expect": [
            "{}: corrupt: {}.{} at offset {} has wire type {}, expected {}",
        ],
        "Message.string": [
            "{}: {}.{} is not UTF-8",
        ],
        "_varint": [
            "{}: truncated: {}: varint at offset {} runs past the end",
            "{}: corrupt: {}: varint at offset {} is longer than {} bytes",
        ],
        "_parse": [
            "{}: corrupt: {}: field number 0 at offset {}",
            "{}: truncated: {} field {}: {} bytes at offset {}",
            "{}: truncated: {} field {} claims {} bytes at offset {}, {} left",
            "{}: corrupt: {} field {} at offset {}: wire type {}",
        ],
    },
    "runtime/ptd_file.py": {
        "read_ptd": [
            "{}: not a .ptd file: identifier {} at offset 4, expected {}",
            "{}: bad FlatTensor header at offset {}: magic {} length {} (expected {}, length >= {})",
            "{}: truncated: segment data ends at offset {}, file has {} bytes",
        ],
        "_parse_flat_tensor": [
            "ptebuild reads version {} (executorch 1.5.1)",
            "{}: {} [{}, {}) lies outside the {} bytes of segment data",
            "{}: {} has no key",
            "{}: {} ({}) points at segment {}, file has {}",
            "{}: key {} appears twice",
        ],
        "read_tensor_layouts": [
            "{}: {} has no key",
            "{}: {} of key {}: unknown scalar type {}",
        ],
    },
    "runtime/ptd_merge.py": {
        "_check_same": [
            "{}: cannot merge: key {} has different bytes in {} ({} bytes, sha256:{}) and {} ({} bytes, sha256:{})",
            "{}: cannot merge: key {} has different tensor layouts in {} ({}) and {} ({})",
        ],
    },
    "runtime/ptd_write.py": {
        "FileSegment.write_to": [
            "{}: truncated: blob of {} bytes at offset {} ends past the end of the file",
            "{}: blob at offset {} changed while being copied (sha256:{}, expected sha256:{})",
        ],
    },
    "runtime/pte_file.py": {
        "PteReader.delegate_payload": [
            "{}: bad processed reference (location {}, index {})",
        ],
        "PteReader.named_blob": [
            "{}: {} ({}) points at segment {}, file has {}",
        ],
        "_read_layout": [
            "{}: truncated: {} bytes, too short for a .pte",
            "{}: not a .pte file: identifier {} at offset 4, expected {} (executorch 1.5.1)",
            "{}: truncated: extended header at offset {} is cut off ({} bytes in file)",
            "{}: bad extended header at offset {}: length {}",
            "{}: truncated: header promises {} bytes of program and segment data up to offset {}, file has {}",
        ],
        "_segments": [
            "{}: {} [{}, {}) lies outside the {} bytes of segment data",
        ],
        "_external_tensor_keys": [
            "{}: {} is EXTERNAL but has no name",
        ],
        "_reference": [
            "{}: {} has no processed data",
        ],
    },
    "runtime/pte_inspection.py": {
        "inspect_pte": [
            "{}: {} ({}) points at segment {}, file has {}",
        ],
        "_delegate": [
            "{}: bad processed reference (location {}, index {})",
        ],
    },
    "runtime/record.py": {
        "validate_record": [
            "build the folder again with `ptebuild build MANIFEST` (it rewrites the record)",
            "build the folder again with `ptebuild build MANIFEST` (it rewrites the record)",
            "build the folder again with `ptebuild build MANIFEST` (it rewrites the record)",
            "build the folder again with `ptebuild build MANIFEST` (it rewrites the record)",
            "build the folder again with `ptebuild build MANIFEST` (it rewrites the record)",
        ],
        "read_record_document": [
            "build the folder again with `ptebuild build MANIFEST` (it rewrites the record)",
            "build the folder again with `ptebuild build MANIFEST` (it rewrites the record)",
        ],
    },
    "runtime/verify.py": {
        "verify_folder": [
            "give the output folder of a build",
            "give the output folder of a ptebuild build",
        ],
    },
    "shims/check.py": {
        "defined_symbols": [
            "pass a built .so or .dll",
        ],
        "elf_defined_symbols": [
            "pass a shared library, not an object or a static executable",
            "rebuild it",
            "rebuild it",
        ],
    },
    "shims/coff.py": {
        "write_archive": [
            "use one of {}",
        ],
        "write_import_library": [
            "use one of {}",
        ],
    },
    "shims/deffile.py": {
        "_tokenize": [
            "close it with '\"'",
            "close it with '\"'",
        ],
        "parse_def": [
            "add 'LIBRARY aoti_cuda_shims.dll' or pass --dll",
            "{}: {}",
        ],
        "parse_toml": [
            "correct the TOML there",
            "a shim list has only 'dll' and 'exports'",
            "write dll = \"aoti_cuda_shims.dll\"",
            "write exports = [\"name\", { name = \"x\", type = \"data\" }]",
            "write a name or a table like { name = \"x\", type = \"data\" }",
            "use {}",
            "use one of {}",
            "give one in 1..{}",
            "write true or false",
            "write name = \"the symbol\"",
            "{}: {}",
            "keep one",
            "{}: {}",
        ],
        "parse_shim_text": [
            "save the list as UTF-8",
            "give a .def or shim list (text)",
        ],
        "load_shim_list": [
            "give a shim list you can read",
        ],
    },
    "shims/gitdriver.py": {
        "_git": [
            "install git",
            "run it in a git checkout",
        ],
    },
    "shims/model.py": {
        "Export.__post_init__": [
            "rename it",
            "use one of {}",
            "give one inside",
            "add @N",
        ],
        "ShimList.__post_init__": [
            "name the DLL like aoti_cuda_shims.dll",
        ],
        "ShimList.canonical": [
            "<conflict_message(seen, export)>",
        ],
    },
    "shims/pe.py": {
        "PeImage.__init__": [
            "{}: no DOS header ('MZ'), so not a Windows DLL: give a .dll",
            "{}: offset {}: no PE signature, so not a Windows DLL: give a .dll",
            "give an x86-64 or x86 DLL",
            "the DLL is damaged: give the one the linker wrote",
        ],
        "PeImage.offset": [
            "the DLL is damaged: give the one the linker wrote",
        ],
        "PeImage.string": [
            "the DLL is damaged: give the one the linker wrote",
            "the DLL is damaged: give the one the linker wrote",
        ],
        "PeImage.exports": [
            "the DLL is damaged: give the one the linker wrote",
        ],
        "PeImage.imports": [
            "the DLL is damaged: give the one the linker wrote",
            "the DLL is damaged: give the one the linker wrote",
        ],
    },
    "shims/reader.py": {
        "inspect_import_library": [
            "give an import library of one DLL",
            "give a .lib that imports from a DLL",
            "give an import library of a DLL with a plain name",
        ],
    },
    "sizes.py": {
        "parse_size": [
            "invalid size {}: give a number with an optional unit, e.g. 500M, 2G, 1.5GiB (K, M, G, T: powers of 1000, KiB, MiB, GiB, TiB: powers of 1024)",
        ],
    },
    "store/actions.py": {
        "check_key": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "ActionCache.put": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "store/cas.py": {
        "_check_digest": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "CAS.restore": [
            "build again to store it anew",
            "check the cache folder's permissions",
            "it was removed: build again to store it anew",
        ],
    },
    "store/faults.py": {
        "Budget.check_on": [
            "<self.disabled>",
        ],
    },
    "store/frontend.py": {
        "Cache.for_folder.refuse": [
            "<text>",
        ],
        "Cache.restore": [
            "build again (`ptebuild cache verify` removes broken entries)",
            "build again",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
            "build again to store it anew",
        ],
        "Cache.fetch_blob": [
            "give a cache (--cache DIR or --remote-cache URL)",
            "build again to store it anew",
        ],
    },
    "store/grpc_blobs.py": {
        "GrpcBlobStore._read_batch": [
            "blob {} has wrong bytes ({} bytes hashing to {})",
        ],
        "GrpcBlobStore._fetch_stream": [
            "blob {} did not arrive whole in {} tries (last: {})",
            "blob {} has wrong bytes ({} bytes hashing to {})",
        ],
    },
    "store/grpc_channel.py": {
        "Rpc.__init__": [
            "--remote-cache grpc://: needs grpcio: pip install 'ptebuild[grpc]'",
        ],
    },
    "store/grpc_url.py": {
        "split_url": [
            "give grpc://host:port",
        ],
        "metadata_of": [
            "use letters, digits, '-', '_' and '.', not grpc-* nor *-bin",
        ],
    },
    "store/headers.py": {
        "parse_header": [
            "give NAME=VALUE with NAME an HTTP header name",
            "give it on one line",
        ],
        "read_url": [
            "give {}",
            "give {}",
            "pass a token with --remote-cache-header NAME=VALUE",
        ],
    },
    "store/http.py": {
        "HttpBlobStore.fetch": [
            "blob {} did not arrive whole in {} tries (last: {})",
            "blob {} has wrong bytes ({} bytes hashing to {})",
        ],
        "HttpBlobStore.read_bytes": [
            "blob {} has wrong bytes ({})",
        ],
    },
    "store/local.py": {
        "_LocalBlobs.put_file": [
            "build again to store it anew",
            "not stored: it changed while stored, build again",
        ],
    },
    "store/locks.py": {
        "lock_path": [
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
    },
    "store/reapi.py": {
        "batch_update_blobs_response": [
            "BatchUpdateBlobsResponse.Response at offset {}: no digest",
        ],
        "batch_read_blobs_response": [
            "BatchReadBlobsResponse.Response at offset {}: no digest",
        ],
        "_read_varint": [
            "{}: a varint longer than 10 bytes at offset {}",
            "{}: truncated varint at offset {}",
        ],
        "_fields": [
            "{}: field number 0 at offset {}",
            "{}: field {} at offset {} runs past the end ({} bytes, {} left)",
            "{}: truncated fixed-size field {} at offset {}",
            "{}: wire type {} of field {} at offset {} is not supported",
        ],
        "_text": [
            "{} at offset {}: not UTF-8",
        ],
        "_decode_digest": [
            "{} at offset {}: negative size {}",
        ],
    },
    "store/tiers.py": {
        "remote_kind": [
            "give {}host[:port]...",
        ],
    },
    "models/factory/checkpoints.py": {
        "load_state_dict": [
            "{}",
        ],
        "_load": [
            "save its weights instead: torch.save(model.state_dict(), path)",
            "{}",
            "{}",
        ],
        "_entry": [
            "name an entry on the way to the state dict",
            "it has {}: name one of them",
        ],
    },
    "worker/execute.py": {
        "run_task": [
            "<stale>",
            "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug",
        ],
        "_dependencies": [
            "build again",
        ],
    },
    "models/factory/lower.py": {
        "export_method": [
            "name one of its methods",
            "torch.export of method {} failed: {}{}",
            "return a .clone() in all but one of them",
            "preparing method {} for {} failed: {}{}",
        ],
        "_lower": [
            "preparing the model for {} failed: {}{}",
            "remove data_name",
            "lowering for {} failed: {}{}",
            "change the model where the cause points (the log has the whole output), or report it to ExecuTorch or PyTorch if the model is right",
        ],
    },
    "models/factory/loading.py": {
        "import_factory": [
            "fix the module, or put it beside the manifest",
            "name a callable that returns the model ({}:NAME)",
            "name a function or class that returns the model",
        ],
        "build_model": [
            "factory {}: {}",
            "fix the factory (it is called with models.{}.kwargs)",
            "return the model from it",
            "give the weights file's path relative to the manifest",
            "give a state dict saved with torch.save, a checkpoint with weights_key, or a .safetensors file",
            "{}",
            "give the weights of this model (its class and kwargs)",
        ],
    },
    "worker/timed_run.py": {
        "find_program": [
            "name one of {}",
        ],
        "built_files": [
            "run `{}` first",
        ],
        "run_program": [
            "--iters {}: give at least 1",
            "name one of {}",
        ],
    },
}
