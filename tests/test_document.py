"""YAML with line numbers: positions of keys and items, duplicate keys, malformed files."""

from __future__ import annotations

import pytest

from autotune._document import Document, format_path, load_document
from autotune._errors import ConfigError


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_records_the_line_of_every_key_and_item() -> None:
    text = (
        "# comment\nouter:\n  inner:\n    a: 1\n    items:\n      - x\n      - y\n"
        "  flow: {b: [5, 6]}\n"
    )
    doc = load_document(text, source="s.yaml")
    assert doc.data == {"outer": {"inner": {"a": 1, "items": ["x", "y"]}, "flow": {"b": [5, 6]}}}
    assert doc.line("outer") == _line(text, "outer:")
    assert doc.line("outer.inner.a") == _line(text, "a: 1")
    assert doc.line("outer.inner.items[1]") == _line(text, "- y")
    assert doc.line(("outer", "flow", "b", 0)) == _line(text, "flow:")
    # an absent key falls back to its nearest present parent
    assert doc.line("outer.inner.missing") == _line(text, "inner:")
    assert doc.where("outer.inner.a") == f"{_line(text, 'a: 1')} (outer.inner.a)"


def test_format_path_marks_list_items() -> None:
    assert format_path(("parameters", "x", "choices", 2)) == "parameters.x.choices[2]"
    assert format_path(()) == ""


def test_duplicate_key_names_both_lines() -> None:
    text = "a: 1\nb:\n  c: 2\n  c: 3\n"
    with pytest.raises(ConfigError) as info:
        load_document(text, source="dup.yaml")
    message = str(info.value)
    assert "dup.yaml:4 (b.c)" in message
    assert "duplicate key 'c'" in message
    assert "line 3" in message


def test_malformed_yaml_gives_line_and_column() -> None:
    text = "a: 1\nb: {c: 2\nd: 3\n"
    with pytest.raises(ConfigError) as info:
        load_document(text, source="bad.yaml")
    err = info.value
    assert err.source == "bad.yaml"
    assert err.location is not None
    line, column = err.location.split(":")
    assert int(line) >= 2 and int(column) >= 1
    assert "not valid YAML" in str(err)
    assert "line 2" in str(err)  # where the unclosed mapping was opened


def test_tab_indentation_is_located() -> None:
    with pytest.raises(ConfigError) as info:
        load_document("a:\n\tb: 1\n", source="tab.yaml")
    assert str(info.value).startswith("tab.yaml:2:")


def test_merge_keys_keep_explicit_values_and_anchor_lines() -> None:
    text = "base: &b\n  low: 1\n  high: 6\nparam:\n  <<: *b\n  high: 8\n"
    doc = load_document(text, source="m.yaml")
    assert doc.data["param"] == {"low": 1, "high": 8}
    assert doc.line("param.high") == _line(text, "high: 8")
    assert doc.line("param.low") == _line(text, "low: 1")


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        load_document("a: &x [1, *x]\n", source="r.yaml")
    assert "r.yaml:1" in str(info.value)


def test_unsafe_tags_are_refused_with_a_location() -> None:
    with pytest.raises(ConfigError) as info:
        load_document("a: 1\nb: !!python/object:os.system x\n", source="t.yaml")
    assert str(info.value).startswith("t.yaml:2:")


def test_empty_file_and_non_mapping_root() -> None:
    with pytest.raises(ConfigError, match="empty"):
        load_document("# nothing\n", source="e.yaml")
    doc = load_document("- 1\n- 2\n", source="l.yaml")
    with pytest.raises(ConfigError, match="mapping of sections"):
        doc.root()


def test_section_suggests_the_closest_key() -> None:
    doc = load_document("engine:\n  tp_szie: 8\n", source="k.yaml")
    with pytest.raises(ConfigError) as info:
        doc.root().section("engine").check_keys(("tp_size", "port", "host"))
    message = str(info.value)
    assert "k.yaml:2 (engine.tp_szie)" in message
    assert "did you mean 'tp_size'" in message


def test_relocate_adds_the_line_to_a_dotted_location() -> None:
    text = "workload:\n  input_len:\n    mean: 0\n"
    doc = load_document(text, source="w.yaml")
    err = ConfigError("must be >= 1", source="w.yaml", location="workload.input_len.mean")
    moved = Document.relocate(doc, err)
    assert str(moved) == "w.yaml:3 (workload.input_len.mean): must be >= 1"
