"""``autotune bundle ...``: carry SGLang and autotune's dependencies to a box without network.

The same commands as ``python3 -m autotune.bundle build|install`` (which the box runs before
Typer is installed there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    no_args_is_help=True,
    help="Carry Python packages (SGLang, autotune's own) to a GPU box that has no network.",
)


@app.command("build")
def build(
    freeze: Annotated[
        Path, typer.Option("--freeze", metavar="FILE", help="The box's `pip freeze` output.")
    ],
    out: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Where manifest.json and the parts go.")
    ],
    requirements: Annotated[
        list[str] | None,
        typer.Argument(metavar="REQUIREMENT...", help="e.g. sglang==0.5.17 'optuna>=5.0,<5.1'."),
    ] = None,
    requirements_file: Annotated[
        list[Path] | None,
        typer.Option("-r", "--requirements-file", metavar="FILE", help="More requirements."),
    ] = None,
    python: Annotated[
        str, typer.Option("--python", help="The box's Python, MAJOR.MINOR.")
    ] = "3.12",
    platform: Annotated[
        list[str] | None,
        typer.Option(
            "--platform",
            metavar="TAG",
            help="Platform tag of the box; a manylinux_2_N tag stands for every older glibc "
            "too (default: manylinux_2_39_x86_64 and older).",
        ),
    ] = None,
    part_size_mib: Annotated[
        float, typer.Option("--part-size-mib", help="The most bytes of a part, in MiB.", min=0)
    ] = 60.0,
    wheel_cache: Annotated[
        Path | None,
        typer.Option(
            "--wheel-cache",
            metavar="DIR",
            help="Wheels found here are used first; downloads go here "
            "(default: ~/.cache/autotune/wheels).",
        ),
    ] = None,
    index_url: Annotated[str | None, typer.Option("--index-url", help="For pip.")] = None,
    extra_index_url: Annotated[
        list[str] | None, typer.Option("--extra-index-url", help="For pip.")
    ] = None,
    find_links: Annotated[
        list[str] | None, typer.Option("--find-links", metavar="DIR", help="For pip.")
    ] = None,
    no_index: Annotated[bool, typer.Option("--no-index", help="For pip.")] = False,
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", metavar="NAME", help="Never carry this package."),
    ] = None,
    no_default_excludes: Annotated[
        bool,
        typer.Option(
            "--no-default-excludes",
            help="Carry SGLang's requirements that a triton-backend server never imports.",
        ),
    ] = False,
    no_default_additions: Annotated[
        bool,
        typer.Option(
            "--no-default-additions",
            help="Do not add the requirements SGLang imports without declaring them.",
        ),
    ] = False,
    trim: Annotated[
        list[str] | None,
        typer.Option("--trim", metavar="GLOB", help="Also remove these unpacked files."),
    ] = None,
    keep: Annotated[
        list[str] | None,
        typer.Option("--keep", metavar="GLOB", help="Never trim these (e.g. FA3's .so)."),
    ] = None,
    no_trim: Annotated[bool, typer.Option("--no-trim", help="Apply no trim rule.")] = False,
    import_check: Annotated[
        list[str] | None,
        typer.Option(
            "--import-check",
            metavar="MODULE",
            help="Modules the install imports (sglang, sgl_kernel).",
        ),
    ] = None,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Ask the index even for wheels in the cache.")
    ] = False,
    xz_preset: Annotated[str, typer.Option("--xz-preset", help="xz preset, 0-9[e].")] = "9e",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Choose the wheels and stop (nothing written).")
    ] = False,
) -> None:
    """Choose the wheels the box lacks (leaving it what its freeze satisfies), trim, pack with
    xz and split into parts of at most --part-size-mib, with manifest.json."""
    from autotune.bundle import (
        DEFAULT_IMPORT_CHECK,
        BuildOptions,
        PipOptions,
        build_bundle,
        read_requirements,
    )

    wanted = list(requirements or [])
    for path in requirements_file or []:
        wanted += read_requirements(path)
    options = BuildOptions(
        requirements=tuple(wanted),
        freeze=freeze,
        out=out,
        python=python,
        platforms=tuple(platform or ()),
        part_size=int(part_size_mib * (1 << 20)),
        wheel_cache=wheel_cache,
        pip=PipOptions(
            index_url=index_url,
            extra_index_urls=tuple(extra_index_url or ()),
            find_links=tuple(find_links or ()),
            no_index=no_index,
        ),
        excludes=tuple(exclude or ()),
        default_excludes=not no_default_excludes,
        default_additions=not no_default_additions,
        trim=not no_trim,
        extra_trim=tuple(trim or ()),
        keep=tuple(keep or ()),
        import_check=tuple(import_check or ()) or DEFAULT_IMPORT_CHECK,
        refresh=refresh,
        xz_preset=xz_preset,
        dry_run=dry_run,
    )
    result = build_bundle(options, log=typer.echo)
    typer.echo("\n".join(result.report()))


@app.command("install")
def install(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE_DIR", help="What build wrote.")],
    target: Annotated[
        Path, typer.Option("--target", metavar="DIR", help="Where the packages are unpacked.")
    ],
    skip_import_check: Annotated[
        bool, typer.Option("--skip-import-check", help="Do not import the check modules.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Unpack again even when DIR holds this bundle.")
    ] = False,
) -> None:
    """Check the bundle (parts, sizes, SHA-256, Python, CUDA), unpack it into DIR and import
    its check modules; then print the PYTHONPATH line to use it."""
    from autotune.bundle import install_bundle

    result = install_bundle(
        bundle, target, import_check=not skip_import_check, force=force, log=typer.echo
    )
    typer.echo("\n".join(result.report()))
