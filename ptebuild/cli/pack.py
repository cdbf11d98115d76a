"""``ptebuild pack``: a verified build packed into a reproducible release bundle.

Imports neither torch nor executorch (see :mod:`ptebuild.release.pack`).
"""

from __future__ import annotations

import json

from ptebuild.cli.options import add_cache_options

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

    from ptebuild.cli.parser import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "pack",
        help="pack a verified build into reproducible .tar.gz or .zip bundles with checksums and provenance",
        description=(
            "Verify the build of MANIFEST, then write a byte-for-byte reproducible archive holding every "
            "output, SHA256SUMS, the manifest, the lock (when there is one), the build record, the "
            "operator list for a selective runtime build (selected_operators.yaml) and an in-toto/SLSA "
            "provenance statement, all in one folder named after the archive. A manifest that declares "
            "bundles ([bundles.NAME]) gets one archive per bundle (or per --bundle), each with its "
            "programs, their weights and test cases, its own checksums, lock and provenance, written into "
            "defaults.dist or -o DIR. SOURCE_DATE_EPOCH sets the files' time. Exit 0 when written, 1 if "
            "the build fails verification or the cache lacks programs, 2 on bad input."
        ),
    )
    parser.add_argument("manifest", metavar="MANIFEST", help="the manifest whose build to pack")
    parser.add_argument(
        "-o", "--output", metavar="NAME.tar.gz|DIR",
        help="the archive to write (.tar.gz, .tgz or .zip); with bundles, the folder they go into "
        "(default: the manifest's defaults.dist), or the archive when one bundle is packed",
    )
    parser.add_argument(
        "--bundle", action="append", default=[], metavar="NAME",
        help="pack this bundle of the manifest (repeat for several; default: every bundle it declares)",
    )
    parser.add_argument("--out", metavar="DIR", help="the build's output folder (default: the manifest's defaults.out)")
    parser.add_argument(
        "--lock", metavar="FILE", help="the lockfile to pack and check against (default: ptebuild.lock beside the manifest, if any)"
    )
    parser.add_argument(
        "--from-cache", action="store_true", help="assemble from the cache by the lock's digests instead of an output folder"
    )
    add_cache_options(parser, help="the cache for --from-cache (default: $PTEBUILD_CACHE or ~/.cache/ptebuild)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=pack_command)


def pack_command(args: argparse.Namespace) -> int:
    from ptebuild.api.pack import pack_release

    results = pack_release(args.manifest, args.output, bundles=args.bundle, out=args.out, lock=args.lock,
                           from_cache=args.from_cache, cache=args.cache)
    if args.json:
        documents = [result.to_json() for result in results]
        print(json.dumps(documents[0] if len(documents) == 1 and results[0].bundle is None else documents, indent=2))
        return 0
    for result in results:
        for name in result.files:
            print(f"  {result.folder}/{name}")
        what = f"bundle {result.bundle}: " if result.bundle else ""
        print(
            f"{what}{len(result.targets)} targets, {len(result.files)} files, {len(result.operators)} operators "
            f"-> {result.archive.path} ({result.archive.size} bytes, sha256 {result.archive.sha256})"
        )
    return 0
