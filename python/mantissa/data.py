"""Token data for ``mantissa train --data FILE.bin --vocab-size N``, through the engine's tokenizer and writer.

llm.c's token format: a header of 256 little-endian int32 (magic 20240520, version 1, the token
count) and uint16 ids, or magic 20240801, version 7 and uint32 ids when the vocabulary exceeds
65536. ``Tokenizer`` and ``tokenize`` are the C++ tokenizer ``mantissa tokenize`` runs (a Hugging
Face tokenizer.json: byte-level BPE or WordPiece, id for id as the ``tokenizers`` library encodes
with add_special_tokens=False); ``write_tokens`` writes ids from any tokenizer (``tokenizers``,
tiktoken, sentencepiece, ...) with the same C++ writer.

    import mantissa.data
    tok = mantissa.data.Tokenizer("tokenizer.json")
    ids = tok.encode("some text")                       # numpy uint32; tok.vocab_size, tok.kind
    mantissa.data.tokenize("tokenizer.json", "corpus.txt", "corpus.bin")   # = mantissa tokenize
    mantissa.data.write_tokens(other_ids, "other.bin", vocab_size=50257)
"""

from __future__ import annotations

import operator
import os
from typing import Any, Optional, Union

import numpy as np

from . import _core

__all__ = ["Tokenizer", "tokenize", "write_tokens", "LLMC_MAGIC16", "LLMC_MAGIC32"]

LLMC_MAGIC16 = _core.LLMC_MAGIC16  # 20240520: version 1, uint16 ids
LLMC_MAGIC32 = _core.LLMC_MAGIC32  # 20240801: version 7, uint32 ids
_MAX_TOKENS = 2**31 - 1  # the header's int32 count

# Tokenizer(path) or Tokenizer.from_str(json); .encode(text) -> uint32 ids (without the GIL),
# .vocab_size, .kind. ValueError names the file and the key of anything it cannot tokenize as
# `tokenizers` does.
Tokenizer = _core.Tokenizer
# tokenize(tokenizer_path, in_path, out_path) -> {"tokens", "text_bytes", "vocab_size", "kind",
# "load_seconds", "encode_seconds"}: `mantissa tokenize`'s run, under its rules and messages.
tokenize = _core.tokenize


def write_tokens(ids: Any, path: Union[str, "os.PathLike[str]"], vocab_size: Optional[int] = None) -> None:
    """Writes ids (a 1-D sequence or array of integers) to path as an llm.c token file.

    vocab_size: the tokenizer's vocabulary (every id must be below it); by default the
    largest id + 1. Up to 65536 the ids are stored as uint16, above as uint32.
    The file is written to a temporary name and renamed, so an existing file is
    replaced whole or not at all; a symbolic link, or an existing file that is not an
    llm.c token file, is refused. Raises ValueError naming the problem (an empty,
    non-integer, negative or too large id, more than 2^31 - 1 ids, a refused path),
    OSError when the file cannot be written.
    """
    path = os.fspath(path)
    a = np.asarray(ids)
    if a.ndim != 1:
        raise ValueError(f"ids: must be one-dimensional (got shape {a.shape})")
    if a.size == 0:
        raise ValueError("ids: no tokens (an llm.c token file holds at least one)")
    if a.dtype.kind not in "iu":
        raise ValueError(f"ids: must be integers (got dtype {a.dtype})")
    if a.size > _MAX_TOKENS:
        raise ValueError(f"ids: {a.size} tokens are more than llm.c's header counts (2^31 - 1)")
    lo, hi = int(a.min()), int(a.max())
    if lo < 0:
        raise ValueError(f"ids: negative id {lo} at index {int(a.argmin())}")
    if hi > 2**32 - 1:
        raise ValueError(f"ids: id {hi} at index {int(a.argmax())} does not fit uint32")
    if vocab_size is None:
        vocab_size = hi + 1
    else:
        vocab_size = operator.index(vocab_size)
        if not 1 <= vocab_size <= 2**32:
            raise ValueError(f"vocab_size: must be in 1..2^32 (got {vocab_size})")
    _core.write_token_file(path, np.ascontiguousarray(a, dtype=np.uint32), vocab_size)
