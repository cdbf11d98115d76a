"""``ptebuild verify``: check a build's output folder against its build record, or a release bundle.

Imports neither torch nor executorch (see :mod:`ptebuild.runtime.verify` and
:mod:`ptebuild.release.bundle`).
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

    from ptebuild.cli.parser import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="check a build's outputs (or a bundle) against its build record and each .pte against its .ptd",
        description=(
            "Check every file listed in OUT_DIR/ptebuild.json (present, size, sha256), every "
            ".pte against its .ptd (every named-data key present) and every .bpte against its .pte; "
            "with --runtime, every program against that ExecuTorch runtime. Given a bundle (.tar.gz, .tgz, "
            ".zip) written by `ptebuild pack`, check it without unpacking: unsafe entries, "
            "SHA256SUMS, provenance subjects, the lock, then the same checks with every blob rehashed. "
            "Exit 0 if all is well, 1 if anything is wrong, 2 if OUT_DIR has no readable build record "
            "or the bundle cannot be read."
        ),
    )
    parser.add_argument("out_dir", metavar="OUT_DIR|BUNDLE",
                        help="the output folder of a build (or its manifest: the folder its defaults.out names), or a bundle")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument(
        "--bytes", action="store_true", help="also hash every blob of every .ptd and compare it with its key (always on for bundles)"
    )
    parser.add_argument(
        "--runtime", metavar="VERSION",
        help="refuse, one line per program, what this ExecuTorch runtime (e.g. 1.5.1) cannot load; "
        "note what upstream's compatibility policy does not guarantee",
    )
    parser.set_defaults(handler=verify_command)


def verify_command(args: argparse.Namespace) -> int:
    from ptebuild.api.verify import verify
    from ptebuild.release.bundle import BundleReport

    report = verify(args.out_dir, verify_bytes=args.bytes, runtime=args.runtime)
    if isinstance(report, BundleReport):
        where, verify_bytes = str(report.path), True
    else:
        where, verify_bytes = str(report.folder), report.verify_bytes
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0 if report.ok else 1
    for problem in getattr(report, "problems", ()):
        print(problem)
    width = max((len(t.name) for t in report.targets), default=0)
    for target in report.targets:
        status = "ok" if target.ok else "FAILED: " + "; ".join(target.problems)
        print(f"{target.name.ljust(width)}  {status}")
        for note in target.notes:
            print(f"{''.ljust(width)}  note: {note}")
    files = sum(len(t.files) for t in report.targets)
    keys = sum(t.keys_checked for t in report.targets)
    verdict = "all ok" if report.ok else f"{len(report.failed)} failed"
    checked = f"{files} files, {keys} keys checked" + (", blobs rehashed" if verify_bytes else "")
    problems = getattr(report, "problems", ())
    extra = f", {len(problems)} problems with the bundle" if problems else ""
    if report.runtime is not None:
        extra += f", judged for runtime {report.runtime}"
    print(f"{len(report.targets)} targets: {verdict} ({checked}{extra}) -> {where}")
    return 0 if report.ok else 1
