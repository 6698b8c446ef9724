"""mantissa.data.Tokenizer and mantissa.data.tokenize, the C++ tokenizer and writer bound with
nanobind: ids against the Hugging Face `tokenizers` library on tokenizers trained here offline
(test_tokenize.py's corpus), and the files against what `mantissa tokenize` writes, byte for byte."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from test_tokenize import HELD_OUT, TRAIN, assert_same, bpe_tokenizer, cli, read_llmc, wordpiece_tokenizer
from tokenizers import Tokenizer, models, pre_tokenizers

import mantissa.data


def saved(tok: Tokenizer, tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.json"
    tok.save(str(path))
    return path


def cli_tokenize(tokenizer: Path, src: Path, out: Path) -> bytes:
    r = subprocess.run([cli(), "tokenize", "-q", "--tokenizer", str(tokenizer), str(src), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


def wide_tokenizer() -> tuple[Tokenizer, str]:
    """A WordPiece of 70 000 words (ids past uint16) and a text of some of them."""
    vocab = {"[UNK]": 0, **{f"w{k}": k + 1 for k in range(70_000)}}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    rng = np.random.default_rng(3)
    return tok, " ".join(f"w{k}" for k in rng.integers(0, 70_000, 3000)) + " unknown\n"


CASES = {
    "byte_level_bpe": (lambda: bpe_tokenizer(TRAIN), "byte-level BPE"),
    "byte_level_bpe_prefix_space": (lambda: bpe_tokenizer(TRAIN, add_prefix_space=True), "byte-level BPE"),
    "wordpiece": (lambda: wordpiece_tokenizer(TRAIN), "WordPiece"),
    "wordpiece_cased": (lambda: wordpiece_tokenizer(TRAIN, lowercase=False), "WordPiece"),
}


@pytest.mark.parametrize("case", CASES)
def test_encode_agrees_with_tokenizers(tmp_path: Path, case: str) -> None:
    make, kind = CASES[case]
    tok = make()
    path = saved(tok, tmp_path, case)
    ours = mantissa.data.Tokenizer(path)
    assert ours.kind == kind and ours.vocab_size == tok.get_vocab_size()
    from_str = mantissa.data.Tokenizer.from_str(path.read_text())
    for text in (TRAIN, HELD_OUT):
        want = tok.encode(text, add_special_tokens=False).ids
        got = ours.encode(text)
        assert isinstance(got, np.ndarray) and got.dtype == np.uint32 and got.ndim == 1
        assert_same(got.tolist(), want, tok)
        assert from_str.encode(text).tolist() == want
        assert ours.encode(text.encode("utf-8")).tolist() == want  # UTF-8 bytes as the str
    assert ours.encode("").size == 0


def test_encode_from_threads_agrees(tmp_path: Path) -> None:
    """One tokenizer, four threads encoding at once (the GIL released, calls taken in turn)."""
    tok = bpe_tokenizer(TRAIN)
    ours = mantissa.data.Tokenizer(saved(tok, tmp_path, "bpe"))
    want = tok.encode(HELD_OUT, add_special_tokens=False).ids
    results: list[list[int]] = []

    def work() -> None:
        for _ in range(3):
            results.append(ours.encode(HELD_OUT).tolist())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 12 and all(r == want for r in results)


def test_encode_refusals(tmp_path: Path) -> None:
    ours = mantissa.data.Tokenizer(saved(bpe_tokenizer(TRAIN), tmp_path, "bpe"))
    with pytest.raises(ValueError, match="not valid UTF-8.*offset 5"):
        ours.encode(b"fine \xff more")
    with pytest.raises(ValueError, match="surrogate"):
        ours.encode("lone \udc80 surrogate")
    with pytest.raises(TypeError, match=r"str \| bytes"):
        ours.encode(42)
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": {"type": "Unigram"}}')
    with pytest.raises(ValueError, match="broken.json"):
        mantissa.data.Tokenizer(broken)
    with pytest.raises(ValueError, match="model.type"):
        mantissa.data.Tokenizer.from_str(broken.read_text())
    with pytest.raises(ValueError, match="missing.json"):
        mantissa.data.Tokenizer(tmp_path / "missing.json")


@pytest.mark.parametrize("case", ["byte_level_bpe", "wordpiece", "wide"])
def test_tokenize_writes_what_the_cli_writes(tmp_path: Path, case: str) -> None:
    tok, text = wide_tokenizer() if case == "wide" else (CASES[case][0](), TRAIN + HELD_OUT)
    path = saved(tok, tmp_path, case)
    src = tmp_path / "in.txt"
    src.write_bytes(text.encode("utf-8"))
    want = tok.encode(text, add_special_tokens=False).ids
    summary = mantissa.data.tokenize(path, src, tmp_path / "py.bin")
    assert summary["tokens"] == len(want) and summary["text_bytes"] == len(text.encode("utf-8"))
    assert summary["vocab_size"] == tok.get_vocab_size()
    written = (tmp_path / "py.bin").read_bytes()
    assert written == cli_tokenize(path, src, tmp_path / "cli.bin")
    assert read_llmc(tmp_path / "py.bin") == want
    assert written[:4] == np.int32(20240801 if case == "wide" else 20240520).tobytes()
    # write_tokens goes through the same writer.
    mantissa.data.write_tokens(want, tmp_path / "ids.bin", vocab_size=tok.get_vocab_size())
    assert (tmp_path / "ids.bin").read_bytes() == written


def test_tokenize_refusals_leave_the_output_alone(tmp_path: Path) -> None:
    path = saved(bpe_tokenizer(TRAIN), tmp_path, "bpe")
    src, out = tmp_path / "in.txt", tmp_path / "out.bin"
    src.write_text("some text\n")
    mantissa.data.tokenize(str(path), str(src), str(out))
    before = out.read_bytes()
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine text \xff more")
    with pytest.raises(ValueError, match=r"in_path '.*bad.txt'.*not valid UTF-8.*offset 10"):
        mantissa.data.tokenize(path, bad, out)
    with pytest.raises(ValueError, match="in_path: .*missing.txt"):
        mantissa.data.tokenize(path, tmp_path / "missing.txt", out)
    with pytest.raises(ValueError, match="out_path .* would overwrite the input in_path"):
        mantissa.data.tokenize(path, src, src)
    assert out.read_bytes() == before
    link = tmp_path / "link.bin"
    link.symlink_to(out)
    with pytest.raises(ValueError, match="symbolic link"):
        mantissa.data.tokenize(path, src, link)
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    with pytest.raises(ValueError, match="not written by mantissa"):
        mantissa.data.tokenize(path, src, notes)
    assert link.is_symlink() and out.read_bytes() == before and notes.read_text() == "keep me"
