"""Token data for ``mantissa train --data FILE.bin --vocab-size N``.

``write_tokens`` writes ids from any tokenizer (Hugging Face ``tokenizers``,
tiktoken, sentencepiece, ...) in llm.c's token format: a header of 256
little-endian int32 (magic 20240520, version 1, the token count) and uint16
ids, or magic 20240801, version 7 and uint32 ids when the vocabulary exceeds
65536. ``mantissa tokenize --tokenizer tokenizer.json IN.txt OUT.bin`` writes the
same format from a tokenizer.json directly.

    import mantissa.data
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file("tokenizer.json")
    ids = tok.encode(open("corpus.txt").read(), add_special_tokens=False).ids
    mantissa.data.write_tokens(ids, "corpus.bin", vocab_size=tok.get_vocab_size())
"""

from __future__ import annotations

import operator
import os
import stat
from typing import Any, Optional, Union

import numpy as np

__all__ = ["write_tokens", "LLMC_MAGIC16", "LLMC_MAGIC32"]

LLMC_MAGIC16 = 20240520  # version 1, uint16 ids
LLMC_MAGIC32 = 20240801  # version 7, uint32 ids
_MAX_TOKENS = 2**31 - 1  # the header's int32 count


def _check_replaceable(path: str) -> None:
    """Refuses a link, a non-file, or a file that is not an llm.c token file
    (mantissa replaces only files of the kind it writes), as the C++ writer does."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    advice = "; mantissa replaces only llm.c token files: choose another path, or remove it yourself"
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(f"path: '{path}' is a symbolic link{advice}")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"path: '{path}' exists and is not a regular file{advice}")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        head = os.read(fd, 4)
    finally:
        os.close(fd)
    magics = {np.int32(m).astype("<i4").tobytes() for m in (LLMC_MAGIC16, LLMC_MAGIC32)}
    if head not in magics:
        raise ValueError(f"path: '{path}' exists and is not an llm.c token file{advice}")


def _write_atomic(path: str, parts: list) -> None:
    """Writes to a fresh sibling (O_EXCL, never through a link), fsyncs, renames over path."""
    fd, tmp = -1, ""
    for attempt in range(100):
        tmp = f"{path}.tmp-{os.getpid()}-{attempt}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            break
        except FileExistsError:
            continue
    if fd < 0:
        raise OSError(f"cannot create a temporary file beside '{path}'")
    try:
        try:
            for part in parts:
                view = memoryview(part).cast("B")
                while view:
                    view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # durability of the rename is best effort
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_tokens(ids: Any, path: Union[str, "os.PathLike[str]"], vocab_size: Optional[int] = None) -> None:
    """Writes ids (a 1-D sequence or array of integers) to path as an llm.c token file.

    vocab_size: the tokenizer's vocabulary (every id must be below it); by default the
    largest id + 1. Up to 65536 the ids are stored as uint16, above as uint32.
    The file is written to a temporary name and renamed, so an existing file is
    replaced whole or not at all; a symbolic link, or an existing file that is not an
    llm.c token file, is refused. Raises ValueError naming the problem (an empty,
    non-integer, negative or too large id, more than 2^31 - 1 ids).
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
        if hi >= vocab_size:
            raise ValueError(f"ids: id {hi} at index {int(a.argmax())} is not below vocab_size {vocab_size}")
    narrow = vocab_size <= 65536
    header = np.zeros(256, dtype="<i4")
    header[:3] = (LLMC_MAGIC16, 1, a.size) if narrow else (LLMC_MAGIC32, 7, a.size)
    body = np.ascontiguousarray(a.astype("<u2" if narrow else "<u4"))
    _check_replaceable(path)
    _write_atomic(path, [header, body])
