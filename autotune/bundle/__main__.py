"""``python3 -m autotune.bundle build|install``: the bundle commands with the standard library
and ``packaging`` alone (on the box, autotune's other dependencies are what the bundle brings).
``autotune bundle build|install`` are the same commands in autotune's own command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune._errors import AutotuneError
from autotune.bundle._build import (
    DEFAULT_IMPORT_CHECK,
    MIB,
    BuildOptions,
    build_bundle,
    read_requirements,
)
from autotune.bundle._install import install_bundle
from autotune.bundle._pip import PipOptions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 -m autotune.bundle",
        description="Carry Python packages to a box without network: build a bundle where an "
        "index is reachable, install it on the box.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="Choose, trim, pack and split the wheels.")
    build.add_argument("requirements", nargs="*", metavar="REQUIREMENT")
    build.add_argument("-r", "--requirements-file", action="append", default=[], type=Path)
    build.add_argument("--freeze", required=True, type=Path, help="The box's `pip freeze`.")
    build.add_argument("--out", required=True, type=Path, help="Where the bundle goes.")
    build.add_argument("--python", default="3.12", help="The box's Python, MAJOR.MINOR.")
    build.add_argument("--platform", action="append", default=[], metavar="TAG")
    build.add_argument("--part-size-mib", type=float, default=60.0)
    build.add_argument("--wheel-cache", type=Path)
    build.add_argument("--index-url")
    build.add_argument("--extra-index-url", action="append", default=[])
    build.add_argument("--find-links", action="append", default=[])
    build.add_argument("--no-index", action="store_true")
    build.add_argument("--exclude", action="append", default=[], metavar="NAME")
    build.add_argument("--no-default-excludes", action="store_true")
    build.add_argument("--no-default-additions", action="store_true")
    build.add_argument("--trim", action="append", default=[], metavar="GLOB")
    build.add_argument("--keep", action="append", default=[], metavar="GLOB")
    build.add_argument("--no-trim", action="store_true")
    build.add_argument("--import-check", action="append", default=[], metavar="MODULE")
    build.add_argument("--refresh", action="store_true")
    build.add_argument("--xz-preset", default="9e")
    build.add_argument("--dry-run", action="store_true")
    install = commands.add_parser("install", help="Check and unpack a bundle on the box.")
    install.add_argument("bundle", type=Path, metavar="BUNDLE_DIR")
    install.add_argument("--target", required=True, type=Path, metavar="DIR")
    install.add_argument("--skip-import-check", action="store_true")
    install.add_argument("--force", action="store_true")
    return parser


def build_options_from(args: argparse.Namespace) -> BuildOptions:
    requirements = list(args.requirements)
    for path in args.requirements_file:
        requirements += read_requirements(path)
    return BuildOptions(
        requirements=tuple(requirements),
        freeze=args.freeze,
        out=args.out,
        python=args.python,
        platforms=tuple(args.platform),
        part_size=int(args.part_size_mib * MIB),
        wheel_cache=args.wheel_cache,
        pip=PipOptions(
            index_url=args.index_url,
            extra_index_urls=tuple(args.extra_index_url),
            find_links=tuple(args.find_links),
            no_index=args.no_index,
        ),
        excludes=tuple(args.exclude),
        default_excludes=not args.no_default_excludes,
        default_additions=not args.no_default_additions,
        trim=not args.no_trim,
        extra_trim=tuple(args.trim),
        keep=tuple(args.keep),
        import_check=tuple(args.import_check) or DEFAULT_IMPORT_CHECK,
        refresh=args.refresh,
        xz_preset=args.xz_preset,
        dry_run=args.dry_run,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            options = build_options_from(args)
            result = build_bundle(options)
            print("\n".join(result.report()))
        else:
            installed = install_bundle(
                args.bundle,
                args.target,
                import_check=not args.skip_import_check,
                force=args.force,
            )
            print("\n".join(installed.report()))
    except AutotuneError as e:
        sys.stderr.write(f"autotune bundle: error: {e}\n")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("autotune bundle: interrupted\n")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
