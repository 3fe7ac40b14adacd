"""A stand-in tokenizer for a model whose own is not on the host (no network): a byte-level BPE of exactly the
model's vocabulary size, every id decodable, with a ChatML template, so vLLM's tokenizer, detokenizer and
chat endpoint work. Output with random weights is meaningless text either way; what the check compares are
token ids, identical whichever tokenizer maps them to text. Written with the standard library (the file format
of Hugging Face `tokenizers`), read by `transformers` on the host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# ChatML as Qwen3.5's own template writes it where the reasoning and tool-call parsers look: the tools in a system
# turn, and the assistant's turn opened with <think> (or an empty think block with enable_thinking false), so that
# vLLM's qwen3 parsers and the structured-output gate see the same token sequences as with the model's tokenizer.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if not (tools and loop.first and message['role'] == 'system') %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] if message['content'] is string else '' }}"
    "{% if message.tool_calls %}{% for call in message.tool_calls %}<tool_call>\n{{ call.function | tojson }}"
    "\n</tool_call>{% endfor %}{% endif %}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Added tokens that are text, not control (Qwen's tokenizer marks them special: false): the parsers find them by id.
MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>")


def _byte_alphabet() -> list[str]:
    """GPT-2's byte-to-unicode table: 256 printable characters, one per byte (what ByteLevel pre-tokenizes to)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    table = dict(zip(printable, (chr(c) for c in codes), strict=True))
    return [table[b] for b in range(256)]


def tokenizer_files(vocab_size: int) -> dict[str, Any]:
    """tokenizer.json and tokenizer_config.json of a BPE with `vocab_size` ids: the 256 bytes, then pairs and
    triples of printable ASCII as merges, then the ChatML specials at the top of the range."""
    if vocab_size < 512:
        raise ValueError("vocab_size below 512")
    alphabet = _byte_alphabet()
    vocab: dict[str, int] = {symbol: index for index, symbol in enumerate(alphabet)}
    merges: list[list[str]] = []
    ascii_letters = (
        [alphabet[b] for b in range(ord("a"), ord("z") + 1)]
        + [alphabet[b] for b in range(ord("A"), ord("Z") + 1)]
        + [alphabet[ord(" ")]]
    )
    room = vocab_size - len(SPECIAL) - len(MARKERS)
    # Two-symbol then three-symbol tokens over the byte alphabet, in a fixed order, until the vocabulary is full.
    for first in alphabet:
        for second in alphabet:
            if len(vocab) >= room:
                break
            vocab[first + second] = len(vocab)
            merges.append([first, second])
    for pair in list(vocab)[256:]:
        for third in ascii_letters:
            if len(vocab) >= room:
                break
            token = pair + third
            if token not in vocab:
                vocab[token] = len(vocab)
                merges.append([pair, third])
    next_id = len(vocab)
    added = []
    for offset, content in enumerate(SPECIAL + MARKERS):
        added.append(
            {
                "id": next_id + offset,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": content in SPECIAL,
            }
        )
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }  # fmt: skip
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 1 << 20,
        "chat_template": CHAT_TEMPLATE,
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}


def write_tokenizer(model_dir: Path, vocab_size: int) -> list[str]:
    """Write the stand-in tokenizer beside a config.json; the files written."""
    written = []
    for name, content in tokenizer_files(vocab_size).items():
        (model_dir / name).write_text(json.dumps(content, ensure_ascii=False))
        written.append(name)
    return written


def vocab_size(config: dict[str, Any]) -> int:
    """The text model's vocabulary size (multimodal configs keep it under text_config)."""
    size = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    if not isinstance(size, int):
        raise ValueError("config.json has no vocab_size")
    return size
