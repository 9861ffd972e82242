#!/usr/bin/env python3
"""Writes the tiny random-weight llama GGUF that the tests and the CPU test profile run.

Usage: make-tiny-model.py OUT.gguf

The model is nonsense on purpose: 64-wide, 2 layers, a SentencePiece-style vocabulary of byte
tokens plus a few hundred pieces, and a ChatML template so /v1/chat/completions works. Weights come
from a fixed seed and the writer adds no timestamps, so every run writes the same bytes (the sha256 is
checked by ci/make-tiny-model.sh). Only the gguf package pinned in ci/pins.env is accepted: another
version may lay the file out differently.
"""

import os
import string
import sys

import numpy as np

PINNED_GGUF_VERSION = "0.19.0"

DIM = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
FFN = 128
CONTEXT = 8192
SEED = 20261202

# Token ids the tokenizer metadata points at; the vocabulary is built in this order.
UNK, BOS, EOS, IM_START, IM_END = 0, 1, 2, 3, 4
SPECIAL = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]

# llama.cpp token types (gguf.TokenType): normal, unknown, control, byte.
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def check_gguf_version():
    from importlib.metadata import version

    found = version("gguf")
    if found != PINNED_GGUF_VERSION:
        sys.exit(
            f"make-tiny-model: gguf=={PINNED_GGUF_VERSION} required, found {found} "
            f"(pip install gguf=={PINNED_GGUF_VERSION})"
        )


def vocabulary():
    """Special tokens, the 256 byte-fallback tokens SentencePiece needs, then word pieces."""
    tokens, scores, types = [], [], []

    def add(text, score, kind):
        tokens.append(text)
        scores.append(score)
        types.append(kind)

    for i, text in enumerate(SPECIAL):
        add(text, 0.0, UNKNOWN if i == UNK else CONTROL)
    for byte in range(256):
        add(f"<0x{byte:02X}>", 0.0, BYTE)
    pieces = ["\u2581"] + list(string.ascii_lowercase) + list(string.digits)
    pieces += ["\u2581" + c for c in string.ascii_lowercase]
    pieces += ["\u2581the", "\u2581and", "\u2581you", "\u2581hello", "\u2581world", "\u2581is"]
    # Longer pieces score higher so the SentencePiece merge prefers them.
    for piece in pieces:
        add(piece, -1000.0 + 10.0 * len(piece), NORMAL)
    return tokens, scores, types


def tensors(vocab_size):
    """Random weights in llama's tensor names; numpy shapes are (rows, columns) = ggml (ne1, ne0)."""
    rng = np.random.RandomState(SEED)
    head_dim = DIM // HEADS

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def norm():
        return np.ones(DIM, dtype=np.float32)

    out = [("token_embd.weight", weight(vocab_size, DIM))]
    for layer in range(LAYERS):
        blk = f"blk.{layer}"
        out += [
            (f"{blk}.attn_norm.weight", norm()),
            (f"{blk}.attn_q.weight", weight(DIM, DIM)),
            (f"{blk}.attn_k.weight", weight(KV_HEADS * head_dim, DIM)),
            (f"{blk}.attn_v.weight", weight(KV_HEADS * head_dim, DIM)),
            (f"{blk}.attn_output.weight", weight(DIM, DIM)),
            (f"{blk}.ffn_norm.weight", norm()),
            (f"{blk}.ffn_gate.weight", weight(FFN, DIM)),
            (f"{blk}.ffn_up.weight", weight(FFN, DIM)),
            (f"{blk}.ffn_down.weight", weight(DIM, FFN)),
        ]
    out += [("output_norm.weight", norm()), ("output.weight", weight(vocab_size, DIM))]
    return out


def write(path):
    import gguf

    tokens, scores, types = vocabulary()
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("lucebox-tiny-random")
    writer.add_description("Random weights for tests; output is nonsense")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(DIM)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(DIM // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(UNK)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_eot_token_id(IM_END)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    for name, data in tensors(len(tokens)):
        writer.add_tensor(name, data)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make-tiny-model.py OUT.gguf")
    check_gguf_version()
    out = sys.argv[1]
    tmp = f"{out}.tmp.{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


if __name__ == "__main__":
    main()
