"""The tiny model: a Llama checkpoint any engine loads, made with numpy alone."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from autotune import ConfigError
from autotune.smoke import TinyModelSpec, learn_merges, make_tiny_model

TEXT = [
    "def speculative(draft, target):\n    return draft + target\n" * 20,
    "the quick brown fox jumps over the lazy dog " * 30,
]


def _safetensors(path: Path) -> tuple[dict[str, dict], bytes]:
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + size]), raw[8 + size :]


def test_checkpoint_matches_its_config(tmp_path: Path) -> None:
    spec = TinyModelSpec(
        layers=2, hidden=64, heads=4, kv_heads=2, intermediate=96, vocab=600, merges=50
    )
    model = make_tiny_model(tmp_path / "m", spec, text=TEXT)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    header, data = _safetensors(tmp_path / "m" / "model.safetensors")
    header.pop("__metadata__")
    assert config["num_hidden_layers"] == 2 and config["vocab_size"] == 600
    assert header["model.embed_tokens.weight"]["shape"] == [600, 64]
    assert header["model.layers.1.self_attn.k_proj.weight"]["shape"] == [2 * 16, 64]
    assert header["model.layers.0.mlp.down_proj.weight"]["shape"] == [64, 96]
    assert sum(int(np.prod(h["shape"])) for h in header.values()) == spec.parameter_count()
    assert len(data) == model.weight_bytes == spec.weight_bytes()
    # bfloat16: the upper half of a float32; norms are exactly 1, matrices have std ~0.02
    norm = header["model.norm.weight"]["data_offsets"]
    ones = np.frombuffer(data[norm[0] : norm[1]], dtype="<u2").astype(np.uint32) << 16
    assert np.all(ones.view(np.float32) == 1.0)
    emb = header["model.embed_tokens.weight"]["data_offsets"]
    values = np.frombuffer(data[emb[0] : emb[1]], dtype="<u2").astype(np.uint32) << 16
    assert 0.018 < float(values.view(np.float32).std()) < 0.022


def test_tokenizer_covers_the_whole_vocabulary(tmp_path: Path) -> None:
    spec = TinyModelSpec(
        layers=1, hidden=32, heads=2, kv_heads=2, intermediate=32, vocab=700, merges=60
    )
    make_tiny_model(tmp_path, spec, text=TEXT)
    tok = json.loads((tmp_path / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(spec.vocab))
    for merge in tok["model"]["merges"]:
        left, right = merge.split(" ")
        assert left in vocab and right in vocab and left + right in vocab
    config = json.loads((tmp_path / "config.json").read_text())
    special = {t["content"]: t["id"] for t in tok["added_tokens"]}
    assert config["eos_token_id"] == special["<|end_of_text|>"]
    assert (
        "{% for m in messages %}"
        in json.loads((tmp_path / "tokenizer_config.json").read_text())["chat_template"]
    )


def test_merges_are_learned_from_the_text_and_deterministic() -> None:
    first = learn_merges(TEXT, 30)
    assert first == learn_merges(TEXT, 30)
    assert len(first) == 30
    # the most frequent pair of the text comes first
    assert first[0] in {("Ġ", "t"), ("e", "Ġ"), ("Ġ", "Ġ"), ("t", "h"), ("h", "e")}


@pytest.mark.parametrize("tp", [1, 2, 3, 8])
def test_heads_divide_over_tensor_parallelism(tp: int) -> None:
    spec = TinyModelSpec.for_tp(tp)
    assert spec.heads % tp == 0 and spec.kv_heads % tp == 0 and spec.hidden % spec.heads == 0


def test_a_shape_no_engine_can_shard_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        TinyModelSpec(heads=8, kv_heads=8).check(tp_size=3)
    assert "3" in str(info.value)
