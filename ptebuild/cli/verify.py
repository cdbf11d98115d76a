"""``ptebuild verify``: check a build's output folder against its build record, or a release bundle.

Imports neither torch nor executorch (see :mod:`ptebuild.runtime.verify` and
:mod:`ptebuild.release.bundle`).
"""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="check a build's outputs (or a bundle) against its build record and each .pte against its .ptd",
        description=(
            "Check every file listed in OUT_DIR/ptebuild.json (present, size, sha256) and every "
            ".pte against its .ptd (every named-data key present). Given a bundle (.tar.gz, .tgz, "
            ".zip) written by `ptebuild pack`, check it without unpacking: unsafe entries, "
            "SHA256SUMS, provenance subjects, the lock, then the same checks with every blob rehashed. "
            "Exit 0 if all is well, 1 if anything is wrong, 2 if OUT_DIR has no readable build record "
            "or the bundle cannot be read."
        ),
    )
    parser.add_argument("out_dir", metavar="OUT_DIR|BUNDLE", help="the output folder of a build, or a bundle")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument(
        "--bytes", action="store_true", help="also hash every blob of every .ptd and compare it with its key (always on for bundles)"
    )
    parser.set_defaults(handler=verify_command)


def verify_command(args) -> int:
    from ptebuild.api.verify import verify

    report = verify(args.out_dir, verify_bytes=args.bytes)
    bundle = hasattr(report, "path")
    where = str(report.path if bundle else report.folder)
    verify_bytes = True if bundle else report.verify_bytes
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
    print(f"{len(report.targets)} targets: {verdict} ({checked}{extra}) -> {where}")
    return 0 if report.ok else 1
