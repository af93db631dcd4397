"""Which table describes which SGLang release (boundaries read from the releases' parsers)."""

from __future__ import annotations

import pytest

from autotune._errors import ConfigError
from autotune.engines import dialect_for, known_flagset
from autotune.engines.sglang._dialects import (
    DIALECTS,
    FlagSet,
    OptionInfo,
    emitted_flags,
    known_options,
    parse_version,
)


@pytest.mark.parametrize(
    ("version", "dialect"),
    [
        ("0.5.23", "0.5.23"),
        ("0.6.0", "0.5.23"),
        ("v0.5.20", "0.5.23"),
        ("0.5.14", "0.5.23"),  # first release with --cuda-graph-max-bs-decode
        ("0.5.13", "0.5.3"),
        ("0.5.3.post1", "0.5.3"),
        ("0.5.3", "0.5.3"),
        ("0.5.2", "older"),
        ("0.4.10.post2", "older"),
    ],
)
def test_each_release_maps_to_its_dialect(version: str, dialect: str) -> None:
    assert dialect_for(version) == dialect


@pytest.mark.parametrize("text", ["latest", "", "five"])
def test_a_version_that_is_not_a_release_number_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="not a release number"):
        parse_version(text)


def test_the_tables_differ_where_the_releases_do() -> None:
    new, old, older = (known_flagset(v) for v in ("0.5.23", "0.5.3", "0.4.10"))
    assert new.has("--cuda-graph-max-bs-decode") and not new.has("--cuda-graph-max-bs")
    assert old.has("--cuda-graph-max-bs") and not old.has("--cuda-graph-max-bs-decode")
    assert new.option("--disable-cuda-graph").deprecated  # type: ignore[union-attr]
    assert not old.option("--disable-cuda-graph").deprecated  # type: ignore[union-attr]
    assert (new.dest("--tp-size"), old.dest("--tp-size")) == ("tp_size", "tensor_parallel_size")
    assert old.has("--enable-torch-symm-mem") and not older.has("--enable-torch-symm-mem")
    assert new.accepts("--cuda-graph-backend-decode", "disabled")
    assert not new.accepts("--cuda-graph-backend-decode", "off")


def test_every_emitted_flag_is_a_long_option_with_a_field() -> None:
    for flag in emitted_flags():
        assert flag.startswith("--")
    for dialect in DIALECTS:
        for flag, info in known_options(dialect).items():
            assert info.dest.isidentifier(), (dialect, flag)


def test_an_unknown_dialect_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown SGLang flag dialect"):
        known_options("0.9")


def _graph_flags(decode_deprecated: bool, old_deprecated: bool) -> FlagSet:
    return FlagSet(
        version="0.6.0",
        options={
            "--cuda-graph-max-bs-decode": OptionInfo(
                "cuda_graph_max_bs_decode", deprecated=decode_deprecated
            ),
            "--cuda-graph-max-bs": OptionInfo("cuda_graph_max_bs", deprecated=old_deprecated),
        },
    )


def test_the_spelling_the_release_does_not_deprecate_is_preferred() -> None:
    new, old = "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"
    # the old name back as a deprecated alias of the per-phase flag (SGLang PR #38265)
    assert _graph_flags(False, True).preferred(new, old) == new
    # were the per-phase name the deprecated one, the other would win
    assert _graph_flags(True, False).preferred(new, old) == old
    # both deprecated: the first the release has
    assert _graph_flags(True, True).preferred(new, old) == new
    assert known_flagset("0.5.3").preferred(new, old) == old
    assert known_flagset("0.5.23").preferred("--no-such-flag") is None


@pytest.mark.parametrize(
    ("version", "counted"),
    [
        ("0.5.23", True),
        ("0.5.14", True),  # first release that profiles the KV pool after the draft's weights
        ("0.5.13", False),
        ("0.5.3", False),
        ("0.4.10.post2", False),
    ],
)
def test_draft_weights_count_toward_the_static_fraction_from_0_5_14(
    version: str, counted: bool
) -> None:
    assert known_flagset(version).counts_draft_in_static is counted
    assert FlagSet(version=version).counts_draft_in_static is counted
    assert FlagSet(version=None).counts_draft_in_static  # unknown: a current release
