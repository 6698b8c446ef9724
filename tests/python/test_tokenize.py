"""`mantissa tokenize` against the Hugging Face `tokenizers` library: a small
byte-level BPE (GPT-2 style) and a small WordPiece (BERT style) trained here,
offline, on a corpus of ASCII, accents, CJK, emoji, digits, contractions, runs
of spaces, newlines and tabs, punctuation, control characters and special
tokens; the ids must agree token for token with `Tokenizer.encode(text,
add_special_tokens=False)` (mantissa adds no BOS/EOS and no [CLS]/[SEP]: a
corpus is one stream). Every assigned character, in several contexts, through
a vocabulary of exactly the words `tokenizers` cuts the text into. Also `mantissa.data.write_tokens`, and the files both
write loading in `mantissa train` (the Python tokenizer binding: test_tokenizer_binding.py)."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LINES = [
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "I'm sure you're right; they've said we'll see, he'd know, it's JOHN'S and don't 'quote' me 'n' stuff.",
    "Café, résumé, naïve, Ångström, Æsir, façade, Øre, Žižek, crème brûlée, São Paulo, Straße.",
    "Decomposed: e\u0301 a\u0300 o\u0308 n\u0303; Tiếng Việt; Ελληνικά Σίσυφος ΟΔΥΣΣΕΥΣ; İstanbul ıi; Кириллица.",
    "中文分词测试，你好世界。日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다. 𠀀𠀁 㐀",
    "Emoji: 😀 👍🏽 👨\u200d👩\u200d👧 🇫🇷 ❤️ 🥰 🫠 ✨🔥💯",
    "Digits 12345 3.14159 1,000,000 007 ²³ ½ Ⅻ ١٢٣ ०१२ 2026-12-04T21:41:23Z",
    "Spaces:  two   three    four\t\ttabs \t mixed\n\n\nthree newlines \r\n crlf\u00a0nbsp\u3000ideographic\u2028ls",
    "Punctuation: !@#$%^&*()_+-=[]{}|;':\",./<>?`~ — – … «» „“ ¿¡ · ※ 〈〉",
    "Controls: zero\u200bwidth soft\u00adhyphen bell\x07 private\ue000 bom\ufeff vt\x0bff\x0c nel\x85 end",
    "Assigned after Unicode 8.0: mark a\u08d4b a\u1abfb, punctuation c\u2e4fd, format e\U00013430f.",
    "Scripts: مرحبا بالعالم שלום नमस्ते สวัสดี ሰላም Ձեզ ნახვამდის",
    "Code: def f(x): return x**2 + 1  # comment\n    if a != b and c >= d: pass",
    "Long: " + "pneumonoultramicroscopicsilicovolcanoconiosis" * 3 + " " + "x" * 120,
    "   leading spaces, trailing spaces   ",
    "end of a document<|endoftext|>Start of the next one<|endoftext|> spaced <|endoftext|>",
    "BERT specials: [CLS] sentence [SEP] with a [MASK] and [mask] and [UNK] inline[SEP]x",
]


def corpus(seed: int, n: int) -> str:
    """LINES, then n lines mixing their words at random, joined by varied whitespace."""
    rng = random.Random(seed)
    words = [w for line in LINES for w in line.split(" ") if w]
    out = list(LINES)
    for _ in range(n):
        k = rng.randint(1, 14)
        seps = [" ", " ", " ", "  ", "\t", "\n", " \n", "", "   "]
        out.append("".join(rng.choice(words) + rng.choice(seps) for _ in range(k)))
    return "\n".join(out) + "\n"


def cli() -> str:
    path = os.environ.get("MANTISSA_CLI")
    if not path:
        pytest.skip("MANTISSA_CLI (the mantissa binary) not set: scripts/test.sh and ctest set it")
    return path


def bpe_tokenizer(text: str, add_prefix_space: bool = False) -> Tokenizer:
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator(text.splitlines(), trainer)
    return t


def wordpiece_tokenizer(text: str, **normalizer) -> Tokenizer:
    t = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    t.normalizer = normalizers.BertNormalizer(**normalizer)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=1000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        show_progress=False)
    t.train_from_iterator(text.splitlines(), trainer)
    return t


def read_llmc(path: Path) -> list[int]:
    raw = path.read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert header[0] in (20240520, 20240801)
    assert header[1] == (1 if header[0] == 20240520 else 7)
    ids = np.frombuffer(raw[1024:], dtype="<u2" if header[0] == 20240520 else "<u4")
    assert header[2] == len(ids)
    return ids.astype(np.int64).tolist()


def run_tokenize(tok: Tokenizer, text: str, tmp: Path, name: str) -> tuple[list[int], list[int]]:
    tj, src, out = tmp / f"{name}.json", tmp / f"{name}.txt", tmp / f"{name}.bin"
    tok.save(str(tj))
    src.write_bytes(text.encode("utf-8"))
    r = subprocess.run([cli(), "tokenize", "--tokenizer", str(tj), str(src), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = tok.encode(text, add_special_tokens=False).ids
    return read_llmc(out), want


def assert_same(got: list[int], want: list[int], tok: Tokenizer) -> None:
    if got != want:
        k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        show = lambda ids: [tok.id_to_token(i) for i in ids[max(0, k - 3):k + 4]]  # noqa: E731
        pytest.fail(f"first difference at token {k} of {len(want)} (mantissa has {len(got)}): "
                    f"mantissa {show(got)}, tokenizers {show(want)}")


TRAIN = corpus(1, 400)
HELD_OUT = corpus(2, 300) + "unseen: Ꭰ ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ﷺ ǅ ﬁ Ⓐ ⅷ 𐍈\n"


@pytest.mark.parametrize("add_prefix_space", [False, True])
def test_byte_level_bpe_agrees_with_tokenizers(tmp_path: Path, add_prefix_space: bool) -> None:
    tok = bpe_tokenizer(TRAIN, add_prefix_space)
    assert tok.get_vocab_size() == 1000
    for name, text in [("train", TRAIN), ("held_out", HELD_OUT)]:
        got, want = run_tokenize(tok, text, tmp_path, name)
        assert_same(got, want, tok)


@pytest.mark.parametrize("normalizer", [{}, {"lowercase": False}, {"strip_accents": False}, {"clean_text": False}])
def test_wordpiece_agrees_with_tokenizers(tmp_path: Path, normalizer: dict) -> None:
    tok = wordpiece_tokenizer(TRAIN, **normalizer)
    for name, text in [("train", TRAIN), ("held_out", HELD_OUT)]:
        got, want = run_tokenize(tok, text, tmp_path, name)
        assert_same(got, want, tok)
    assert tok.token_to_id("[UNK]") in want  # the long word and unseen characters


def test_added_token_options_agree_with_tokenizers(tmp_path: Path) -> None:
    text = TRAIN + "hello world, ahello hellos <mask>   after   <mask>x Yesterday yesterday [MASK]\n"
    for tok in (bpe_tokenizer(TRAIN), wordpiece_tokenizer(TRAIN)):
        tok.add_tokens([AddedToken("hello", single_word=True), AddedToken("yesterday", normalized=True)])
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
        got, want = run_tokenize(tok, text, tmp_path, "added")
        assert_same(got, want, tok)


def every_character() -> str:
    """Each character Python's unicodedata assigns (Unicode 14; later ones are where ICU 72,
    Unicode 15, and `tokenizers`, Unicode 16, may differ) past ASCII, bar the private-use
    planes 15 and 16, in contexts that show its classes: beside a letter, punctuation, a digit,
    itself, a space and an apostrophe."""
    import unicodedata

    chars = (chr(c) for c in range(0x80, 0xF0000) if not 0xD800 <= c <= 0xDFFF)
    return "".join(f"a{c}b !{c}1 {c}{c} '{c}\n" for c in chars if unicodedata.category(c) != "Cn")


def words_tokenizer(pre: Tokenizer, words: list[str]) -> Tokenizer:
    """A WordPiece whose vocabulary is exactly the words `tokenizers` cuts the text into, under
    pre's normalizer and pre-tokenizer: one id per word, so a character normalized or split
    differently anywhere gives another id (or [UNK])."""
    vocab = {"[UNK]": 0}
    for w in words:
        vocab.setdefault(w, len(vocab))
    t = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=10_000))
    t.normalizer, t.pre_tokenizer = pre.normalizer, pre.pre_tokenizer
    return t


@pytest.mark.parametrize("kind", ["byte_level", "bert", "bert_no_strip"])
def test_every_character_is_classified_as_tokenizers_does(tmp_path: Path, kind: str) -> None:
    text = every_character()
    pre = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    if kind == "byte_level":
        pre.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        normalized = text
    else:
        pre.normalizer = normalizers.BertNormalizer(strip_accents=None if kind == "bert" else False)
        pre.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        normalized = pre.normalizer.normalize_str(text)
    tok = words_tokenizer(pre, [w for w, _ in pre.pre_tokenizer.pre_tokenize_str(normalized)])
    assert tok.get_vocab_size() > 65536  # the uint32 format too
    got, want = run_tokenize(tok, text, tmp_path, kind)
    assert 0 not in want
    assert_same(got, want, tok)


def test_tokenized_file_trains(tmp_path: Path) -> None:
    """The reader of `train --data` takes what tokenize wrote."""
    tok = bpe_tokenizer(TRAIN)
    got, _ = run_tokenize(tok, TRAIN, tmp_path, "corpus")
    r = subprocess.run([cli(), "train", "--model", "gpt", "--data", str(tmp_path / "corpus.bin"), "--vocab-size",
                        "1000", "--layers", "1", "--d-model", "16", "--heads", "1", "--seq-len", "16",
                        "--batch-size", "2", "--steps", "1", "--eval-batches", "1", "--threads", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len(got) > 1000


def test_write_tokens_round_trip(tmp_path: Path) -> None:
    import mantissa.data

    rng = np.random.default_rng(0)
    small, out = rng.integers(0, 1000, 5000), tmp_path / "w.bin"
    mantissa.data.write_tokens(small, out)
    assert out.read_bytes()[:4] == np.int32(20240520).tobytes()
    assert read_llmc(out) == small.tolist()
    wide = rng.integers(0, 70_000, 5000).tolist()
    mantissa.data.write_tokens(wide, out)  # replaces its own file; ids past uint16 take uint32
    assert out.read_bytes()[:4] == np.int32(20240801).tobytes()
    assert read_llmc(out) == wide
    r = subprocess.run([cli(), "train", "--model", "gpt", "--data", str(out), "--vocab-size", "70000", "--layers", "1",
                        "--d-model", "16", "--heads", "1", "--seq-len", "16", "--batch-size", "2", "--steps", "1",
                        "--eval-batches", "1", "--threads", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    mantissa.data.write_tokens([1, 2, 3], out, vocab_size=65_536)
    assert out.read_bytes()[:4] == np.int32(20240520).tobytes()


def test_write_tokens_refusals(tmp_path: Path) -> None:
    import mantissa.data

    out = tmp_path / "w.bin"
    with pytest.raises(ValueError, match="at least one"):
        mantissa.data.write_tokens([], out)
    with pytest.raises(ValueError, match="integer"):
        mantissa.data.write_tokens(np.array([1.5]), out)
    with pytest.raises(ValueError, match="uint32"):
        mantissa.data.write_tokens([2**32], out)
    assert not out.exists()
    mantissa.data.write_tokens([7, 8, 9], out)
    before = out.read_bytes()
    with pytest.raises(ValueError, match="negative id -1 at index 1"):
        mantissa.data.write_tokens([1, -1], out)
    with pytest.raises(ValueError, match="token 2 is id 5, not below the vocabulary size 5"):
        mantissa.data.write_tokens([1, 2, 5, 6], out, vocab_size=5)
    with pytest.raises(ValueError, match="vocab_size"):
        mantissa.data.write_tokens([1], out, vocab_size=2**32 + 1)
    assert out.read_bytes() == before  # every refusal leaves the file as it was
    other = tmp_path / "notes.txt"
    other.write_text("keep me")
    with pytest.raises(ValueError, match="notes.txt' exists and was not written by mantissa"):
        mantissa.data.write_tokens([1], other)
    assert other.read_text() == "keep me"
    link = tmp_path / "link.bin"
    link.symlink_to(other)
    with pytest.raises(ValueError, match="link.bin' is a symbolic link"):
        mantissa.data.write_tokens([1], link)
    assert other.read_text() == "keep me" and link.is_symlink()
    link_to_tokens = tmp_path / "tokens_link.bin"
    link_to_tokens.symlink_to(out)  # even a link to a token file
    with pytest.raises(ValueError, match="symbolic link"):
        mantissa.data.write_tokens([1], link_to_tokens)
    assert out.read_bytes() == before and link_to_tokens.is_symlink()


def test_cli_refusals_leave_the_output_alone(tmp_path: Path) -> None:
    tok = bpe_tokenizer(TRAIN)
    tj = tmp_path / "tok.json"
    tok.save(str(tj))
    good = tmp_path / "in.txt"
    good.write_text("some text\n")
    out = tmp_path / "out.bin"
    assert subprocess.run([cli(), "tokenize", "--tokenizer", str(tj), str(good), str(out)]).returncode == 0
    before = out.read_bytes()

    def refused(args: list[str], *needles: str) -> None:
        r = subprocess.run([cli(), "tokenize", *args], capture_output=True, text=True)
        assert r.returncode == 2, (r.returncode, r.stderr)
        for n in needles:
            assert n in r.stderr, r.stderr
        assert out.read_bytes() == before

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine text \xff more")
    refused(["--tokenizer", str(tj), str(bad), str(out)], "not valid UTF-8", "offset 10")
    spec = json.loads(tj.read_text())

    def edited(path: list, value) -> dict:
        j = copy.deepcopy(spec)
        node = j
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return j

    for key, j in [("model.type", edited(["model", "type"], "Unigram")),
                   ("model.dropout", edited(["model", "dropout"], 0.1)),
                   ("model.byte_fallback", edited(["model", "byte_fallback"], 7)),
                   ("model.cache_size", edited(["model", "cache_size"], 10)),
                   ("model.merges[2]", edited(["model", "merges", 2], ["no such token", "x"])),
                   ("pre_tokenizer.type", edited(["pre_tokenizer"], {"type": "Metaspace"})),
                   ("normalizer.type", edited(["normalizer"], {"type": "NFKC"})),
                   ("truncation", edited(["truncation"], {"max_length": 5})),
                   ("added_tokens[0].id", edited(["added_tokens", 0, "id"], 2**32))]:
        broken = tmp_path / "broken.json"
        broken.write_text(json.dumps(j))
        refused(["--tokenizer", str(broken), str(good), str(out)], key, str(broken))
    link = tmp_path / "link.bin"
    link.symlink_to(out)
    r = subprocess.run([cli(), "tokenize", "--tokenizer", str(tj), str(good), str(link)], capture_output=True, text=True)
    assert r.returncode == 2 and "symbolic link" in r.stderr, r.stderr
    assert link.is_symlink() and out.read_bytes() == before
