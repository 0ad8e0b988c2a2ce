"""SEPS's text input: BERT wordpiece ``[CLS] ... [SEP]``, 0-padded, from a vocabulary file.

The vocabulary is not in the checkpoint: set ``"options": {"vocab_file":
"/path/to/vocab.txt"}`` in the manifest (a ``vocab.txt`` or a Hugging Face
tokenizer folder).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch

from explorer.core.errors import CheckpointError
from explorer.models.methods.seps.hf import load_transformers
from explorer.models.tokenizer import TokenBatch, TokenCounter


def read_vocab(path: Path) -> dict[str, int]:
    """A BERT vocab.txt: one wordpiece a line, its id the line number."""
    with open(path, encoding="utf-8") as handle:
        tokens = [line.rstrip("\r\n") for line in handle]
    while tokens and not tokens[-1]:
        tokens.pop()
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    return vocab


def build_bert_tokenizer(vocab_file: str | Path, do_lower_case: bool = True):
    """A BERT wordpiece tokenizer from a vocab.txt or a Hugging Face tokenizer folder (never downloaded)."""
    tf = load_transformers()
    path = Path(vocab_file).expanduser()
    if not path.exists():
        raise CheckpointError(f"SEPS vocabulary {path} does not exist; set \"options\": {{\"vocab_file\": "
                              "\"/path/to/bert-base-uncased/vocab.txt\"}} in the manifest.")
    try:
        if path.is_dir():
            return tf.BertTokenizer.from_pretrained(str(path), local_files_only=True)
        vocab = read_vocab(path)
        for special in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"):
            if special not in vocab:
                raise CheckpointError(f"{path} is not a BERT vocabulary: it lacks {special}.")
        # transformers 5 takes the vocabulary itself (and silently ignores vocab_file=...);
        # transformers 4 takes the file.
        if "vocab" in inspect.signature(tf.BertTokenizer.__init__).parameters:
            tokenizer = tf.BertTokenizer(vocab=vocab, do_lower_case=do_lower_case)
        else:
            tokenizer = tf.BertTokenizerFast(vocab_file=str(path), do_lower_case=do_lower_case)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"Cannot build a BERT tokenizer from {path} ({error}).") from error
    if len(tokenizer.get_vocab()) != len(vocab):
        raise CheckpointError(f"The tokenizer built from {path} has {len(tokenizer.get_vocab())} tokens, "
                              f"the file {len(vocab)}: the installed transformers did not take the vocabulary.")
    return tokenizer


class WordPieceCounter(TokenCounter):
    """Token counts in BERT word pieces, ``[CLS]`` and ``[SEP]`` included (SEPS's text tower)."""

    name = "BERT word pieces"
    specials = 2

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def word_tokens(self, word: str) -> int:
        return len(self.tokenizer(word, add_special_tokens=False)["input_ids"])


def bert_token_batch(tokenizer, texts: list[str], limit: int) -> TokenBatch:
    """``[CLS] wordpieces [SEP]``, 0-padded to ``limit``; a long text keeps its head and [SEP]."""
    pieces = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    ids = torch.zeros(len(texts), limit, dtype=torch.long)
    n_tokens, n_cut = [], []
    for row, body in enumerate(pieces):
        tokens = [tokenizer.cls_token_id, *body, tokenizer.sep_token_id]
        n_tokens.append(len(tokens))
        n_cut.append(max(0, len(tokens) - limit))
        if len(tokens) > limit:
            tokens = tokens[: limit - 1] + [tokenizer.sep_token_id]
        ids[row, : len(tokens)] = torch.tensor(tokens)
    return TokenBatch(ids=ids, n_tokens=n_tokens, n_cut=n_cut)
