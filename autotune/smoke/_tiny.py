"""A tiny Llama made on the box: config, random weights and a tokenizer trained on local text.

Nothing is fetched. The weights are random (a fixed seed), written as one ``model.safetensors``
in bfloat16 with the tensor names of Hugging Face's ``LlamaForCausalLM``; the tokenizer is a
byte-level BPE (the GPT-2 byte alphabet) whose merges are learned from text already on the
machine (autotune's own source files), written as ``tokenizer.json`` with a small chat template
in ``tokenizer_config.json``. The vocabulary is padded with reserved tokens to the model's size,
so that every token id a benchmark sends (synthetic prompts draw ids below 30,000) decodes.

Only numpy and the standard library are used, so the same model is made on a GPU box, in CI and
on a laptop; SGLang loads it as any other Llama checkpoint.
"""

from __future__ import annotations

import itertools
import json
import re
import struct
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune._errors import ConfigError

#: Special tokens, at the start of the vocabulary after the 256 byte tokens' merges.
BOS, EOS, START, END = "<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|end|>"
SPECIAL_TOKENS = (BOS, EOS, START, END)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|start|>{{ m['role'] }}\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)

#: How words are cut before merges are learned (GPT-2's rule in ASCII classes).
_WORDS = re.compile(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class TinyModelSpec:
    """The shape of a tiny Llama. ``heads`` must be divisible by the tensor-parallel size."""

    layers: int = 4
    hidden: int = 512
    heads: int = 8
    kv_heads: int = 8
    intermediate: int = 1376
    vocab: int = 32000
    max_positions: int = 4096
    merges: int = 400
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def check(self, tp_size: int = 1) -> None:
        """Raise :class:`ConfigError` for a shape no engine could shard or load."""
        if self.hidden % self.heads:
            raise ConfigError(
                f"tiny model: hidden size {self.hidden} is not divisible by {self.heads} heads"
            )
        if self.heads % self.kv_heads:
            raise ConfigError(
                f"tiny model: {self.heads} heads are not divisible by "
                f"{self.kv_heads} key-value heads"
            )
        if tp_size < 1 or self.heads % tp_size or self.kv_heads % tp_size:
            raise ConfigError(
                f"tiny model: {self.heads} heads ({self.kv_heads} key-value) cannot be split "
                f"over tensor-parallel size {tp_size}",
                hint="use a tp_size that divides the head count, or more heads",
            )
        if self.vocab < 256 + len(SPECIAL_TOKENS) + self.merges:
            raise ConfigError(
                f"tiny model: vocabulary {self.vocab} is smaller than its "
                "byte tokens, special tokens and merges"
            )

    def parameter_count(self) -> int:
        h, i, kv = self.hidden, self.intermediate, self.kv_heads * self.head_dim
        per_layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h
        return self.layers * per_layer + 2 * self.vocab * h + h

    def weight_bytes(self) -> int:
        """Bytes of the weights in bfloat16."""
        return 2 * self.parameter_count()

    @classmethod
    def for_tp(cls, tp_size: int, **changes: int) -> TinyModelSpec:
        """The default shape with at least ``tp_size`` heads (a multiple of it)."""
        base = cls(**changes)
        heads = max(base.heads, tp_size)
        heads += (-heads) % tp_size
        hidden = base.hidden + (-base.hidden) % heads
        kv_heads = (
            base.kv_heads if heads % base.kv_heads == 0 and base.kv_heads % tp_size == 0 else heads
        )
        spec = cls(**{**asdict(base), "heads": heads, "kv_heads": kv_heads, "hidden": hidden})
        spec.check(tp_size)
        return spec


@dataclass(frozen=True)
class TinyModel:
    """A tiny model made on disk."""

    path: Path
    spec: TinyModelSpec
    weight_bytes: int
    vocab_learned: int


def make_tiny_model(
    folder: Path, spec: TinyModelSpec = TinyModelSpec(), *, text: Iterable[str] | None = None
) -> TinyModel:
    """Write a tiny Llama checkpoint into ``folder`` (created; files there are replaced).

    ``text``: what the tokenizer learns its merges from (default: autotune's own source files).
    """
    spec.check()
    folder.mkdir(parents=True, exist_ok=True)
    merges = learn_merges(text if text is not None else local_text(), spec.merges)
    vocab = _vocab(merges, spec.vocab)
    special_ids = {tok: vocab[tok] for tok in SPECIAL_TOKENS}
    (folder / "tokenizer.json").write_text(json.dumps(_tokenizer_json(vocab, merges)))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": BOS,
                "eos_token": EOS,
                "model_max_length": spec.max_positions,
                "chat_template": CHAT_TEMPLATE,
                "clean_up_tokenization_spaces": False,
            },
            indent=1,
        )
    )
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS})
    )
    (folder / "config.json").write_text(json.dumps(_config(spec, special_ids), indent=1))
    (folder / "generation_config.json").write_text(
        json.dumps({"bos_token_id": special_ids[BOS], "eos_token_id": special_ids[EOS]})
    )
    size = _write_weights(folder / "model.safetensors", spec)
    return TinyModel(path=folder, spec=spec, weight_bytes=size, vocab_learned=len(merges))


def local_text(limit_bytes: int = 400_000) -> Iterator[str]:
    """Text already on this machine: autotune's own source and documentation files."""
    root = Path(__file__).resolve().parents[1]
    total = 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".md", ".yaml") or not path.is_file():
            continue
        chunk = path.read_text(encoding="utf-8", errors="replace")
        yield chunk
        total += len(chunk)
        if total >= limit_bytes:
            return


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: every byte as one printable character."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def learn_merges(text: Iterable[str], count: int) -> list[tuple[str, str]]:
    """The ``count`` most frequent pair merges of byte-level BPE over ``text`` (deterministic:
    ties go to the pair that sorts first)."""
    alphabet = bytes_to_unicode()
    words: Counter[tuple[str, ...]] = Counter()
    for chunk in text:
        for word in _WORDS.findall(chunk):
            words[tuple(alphabet[b] for b in word.encode("utf-8"))] += 1
    merges: list[tuple[str, str]] = []
    seqs = {w: list(w) for w in words}
    for _ in range(count):
        pairs: Counter[tuple[str, str]] = Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in itertools.pairwise(s):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        joined = best[0] + best[1]
        for w in words:
            s = seqs[w]
            if len(s) < 2:
                continue
            out: list[str] = []
            i = 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == best[0] and s[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def _vocab(merges: list[tuple[str, str]], size: int) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for ch in sorted(bytes_to_unicode().values()):
        vocab[ch] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    for tok in SPECIAL_TOKENS:
        vocab[tok] = len(vocab)
    n = 0
    while len(vocab) < size:
        vocab[f"<|reserved_{n}|>"] = len(vocab)
        n += 1
    return vocab


def _tokenizer_json(vocab: dict[str, int], merges: list[tuple[str, str]]) -> dict[str, object]:
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": True,
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": vocab[tok],
                "content": tok,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for tok in SPECIAL_TOKENS
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {**byte_level, "trim_offsets": False},
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }


def _config(spec: TinyModelSpec, special: dict[str, int]) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab,
        "max_position_embeddings": spec.max_positions,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "torch_dtype": "bfloat16",
        "bos_token_id": special[BOS],
        "eos_token_id": special[EOS],
    }


def _tensors(spec: TinyModelSpec) -> Iterator[tuple[str, tuple[int, ...], bool]]:
    """(name, shape, is_norm) of every weight of the model, in file order."""
    h, i, kv = spec.hidden, spec.intermediate, spec.kv_heads * spec.head_dim
    yield "model.embed_tokens.weight", (spec.vocab, h), False
    for n in range(spec.layers):
        p = f"model.layers.{n}."
        yield p + "input_layernorm.weight", (h,), True
        yield p + "self_attn.q_proj.weight", (h, h), False
        yield p + "self_attn.k_proj.weight", (kv, h), False
        yield p + "self_attn.v_proj.weight", (kv, h), False
        yield p + "self_attn.o_proj.weight", (h, h), False
        yield p + "post_attention_layernorm.weight", (h,), True
        yield p + "mlp.gate_proj.weight", (i, h), False
        yield p + "mlp.up_proj.weight", (i, h), False
        yield p + "mlp.down_proj.weight", (h, i), False
    yield "model.norm.weight", (h,), True
    yield "lm_head.weight", (spec.vocab, h), False


def _write_weights(path: Path, spec: TinyModelSpec) -> int:
    """Random bfloat16 weights (normal, std 0.02; norms 1) in the safetensors format."""
    import numpy as np

    rng = np.random.default_rng(spec.seed)
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    shapes = list(_tensors(spec))
    for name, shape, _ in shapes:
        size = 2 * int(np.prod(shape))
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * ((-len(head)) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for _, shape, is_norm in shapes:
            if is_norm:
                values = np.ones(shape, dtype=np.float32)
            else:
                values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            # bfloat16 is the upper half of float32 (round to nearest even)
            bits = values.view(np.uint32)
            rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
            f.write((rounded >> np.uint32(16)).astype("<u2").tobytes())
    return offset
