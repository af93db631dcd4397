"""Which table describes which SGLang release (boundaries read from the releases' parsers)."""

from __future__ import annotations

import pytest

from autotune._errors import ConfigError
from autotune.engines import dialect_for, known_flagset
from autotune.engines.sglang._dialects import DIALECTS, emitted_flags, known_options, parse_version


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
