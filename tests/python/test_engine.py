"""The training engine from Python: records, the metrics file, the CLI's run,
saved weights, recipes and the experiment report."""

import json
import os
import shutil
import struct
import subprocess
import sys
import threading

import ml_dtypes
import numpy as np
import pytest

import mantissa

# A tiny GPT: seconds per run on a loaded 2-core machine.
TINY = dict(layers=1, d_model=32, heads=2, seq_len=16, batch_size=2, eval_every=2, eval_batches=2, warmup=1,
            threads=1, seed=7)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "text.txt"
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "away", "quickly", "home"]
    path.write_text(" ".join(rng.choice(words, 6000)) + "\n")
    return str(path)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def without_timing(records):
    drop = {"tokens_per_s", "step_ms"}
    return [{k: v for k, v in r.items() if k not in drop} for r in records if "run" not in r]


def test_generator_yields_the_jsonl_records_and_matches_the_cli(corpus, tmp_path):
    metrics = str(tmp_path / "py.jsonl")
    recs = list(mantissa.train("gpt", "fp8-delayed", steps=4, data=corpus, metrics=metrics, **TINY))
    assert recs[0]["run"]["recipe"]["name"] == "fp8-delayed"
    steps = [r for r in recs if "loss" in r]
    evals = [r for r in recs if "val_loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4] and [r["step"] for r in evals] == [2, 4]
    assert all(np.isfinite(r["loss"]) for r in steps)
    assert recs == read_jsonl(metrics)  # the records are the file's lines
    cli = os.environ.get("MANTISSA_CLI")
    if not cli:
        pytest.skip("MANTISSA_CLI (the mantissa binary) not set: scripts/test.sh sets it")
    out = str(tmp_path / "cli.jsonl")
    args = [cli, "train", "--model", "gpt", "--recipe", "fp8-delayed", "--steps", "4", "--data", corpus,
            "--metrics", out] + [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    assert without_timing(recs) == without_timing(read_jsonl(out))  # bit-identical losses


def test_callback_save_and_load_weights(corpus, tmp_path):
    got = []
    save = str(tmp_path / "model")
    summary = mantissa.train("gpt", "bf16-amp", steps=2, data=corpus, save=save, callback=got.append, **TINY)
    assert summary["steps"] == 2 and [r["step"] for r in got if "loss" in r] == [1, 2]
    weights = mantissa.load_weights(save)
    # Independent reader: the safetensors layout (8-byte header size, JSON, data).
    with open(os.path.join(save, "model.safetensors"), "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    names = [k for k in header if k != "__metadata__"]
    assert sorted(names) == sorted(weights)
    dtypes = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F16": np.float16}
    for name in names:
        h = header[name]
        b, e = h["data_offsets"]
        ref = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dtypes[h["dtype"]]).astype(np.float32)
        assert weights[name].shape == tuple(h["shape"])
        assert np.array_equal(weights[name].reshape(-1), ref)


def test_closing_the_generator_stops_the_run(corpus):
    gen = mantissa.train("gpt", "fp32", steps=1000, data=corpus, **TINY)
    first = [next(gen) for _ in range(3)]
    gen.close()  # returns only once the training thread has stopped
    assert "run" in first[0] and first[1]["step"] == 1


def test_bad_settings_raise_before_training(corpus):
    with pytest.raises(ValueError, match="unknown training setting 'no-such-key'"):
        mantissa.train("gpt", "fp32", steps=1, data=corpus, no_such_key=1)
    with pytest.raises(ValueError, match="recipe"):
        mantissa.train("gpt", "no-such-recipe", steps=1, data=corpus)
    with pytest.raises(TypeError, match="layers"):
        mantissa.train("gpt", "fp32", steps=1, data=corpus, layers="four")
    with pytest.raises(ValueError):
        mantissa.train("gpt", "fp32", steps=1, data="/nonexistent/file.txt")
    with pytest.raises(ValueError):
        mantissa.load_weights("/nonexistent-dir")


def test_recipes_and_overrides():
    names = [r["name"] for r in mantissa.recipes()]
    assert {"fp32", "bf16-amp", "fp8-delayed", "mxfp8"} <= set(names)
    r = mantissa.recipe("fp8-delayed", ["amax_history=16", "cast_margin=1"])
    assert r["amax_history"] == 16 and r["cast_margin"] == 1 and r["cast_forward"] == "e4m3fn"
    with pytest.raises(ValueError, match="no_such_key"):
        mantissa.recipe("fp8-delayed", ["no_such_key=1"])


def test_experiment_writes_the_report(corpus, tmp_path):
    out = str(tmp_path / "report")
    r = mantissa.experiment(out, recipes=["fp32", "bf16-amp"], mlp_recipes=["none"], seeds=1, tokens=256,
                            data=corpus, layers=1, d_model=32, heads=2, seq_len=16, batch_size=2, threads=1)
    assert os.path.isfile(r["markdown"]) and os.path.isfile(r["html"])
    assert [x["status"] for x in r["runs"]] == ["ok", "ok"]
    text = open(r["markdown"]).read()
    assert "bf16-amp" in text


def test_a_session_runs_in_one_thread_at_a_time(corpus):
    s = mantissa._core.Session(dict(TINY, model="gpt", recipe="fp32", steps=3, data=corpus))
    started, release = threading.Event(), threading.Event()
    names, errors = [], []

    def on_record(line):
        if not started.is_set():  # the running thread, between steps, may read
            names.append(sorted(s.weights()))
            with pytest.raises(RuntimeError, match="already running"):
                s.run(0, lambda _: None)
            started.set()
            release.wait(120)

    def work():
        try:
            s.run(0, on_record)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    try:
        assert started.wait(120)
        for call in (lambda: s.run(0, lambda _: None), s.weights, lambda: s.step, s.run_info):
            with pytest.raises(RuntimeError, match="is running in another thread"):
                call()
    finally:
        release.set()
        t.join(300)
    assert not errors and names
    assert s.step == 3 and sorted(s.weights()) == names[0]


def test_an_open_generator_is_stopped_at_exit(corpus):
    # report() is registered before mantissa's exit hook, so it runs after it.
    script = f"""
import atexit, threading
def report():
    alive = any(t.name == "mantissa-train" for t in threading.enumerate())
    print("alive" if alive else "stopped", flush=True)
atexit.register(report)
import mantissa
gen = mantissa.train("gpt", "fp32", steps=100000, data={corpus!r}, **{TINY!r})
next(gen), next(gen)
print("exiting", flush=True)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["exiting", "stopped"]


def first_f32_offset(path):
    """The file offset of the first value of the first F32 tensor in a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    name = next(k for k, h in header.items() if k != "__metadata__" and h["dtype"] == "F32")
    return 8 + n + header[name]["data_offsets"][0]


def patch(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_load_weights_checks_what_eval_checks(corpus, tmp_path):
    save = str(tmp_path / "ck")
    for steps in (2, 4):  # the second save keeps the first as ck.prev
        mantissa.train("gpt", "fp32", steps=steps, data=corpus, save=save, callback=lambda _: None, **TINY)
    latest, prev = mantissa.load_weights(save), mantissa.load_weights(save + ".prev")
    assert sorted(latest) == sorted(prev) and any(not np.array_equal(latest[k], prev[k]) for k in latest)

    # A saved model directory (no manifest) holding a NaN is refused.
    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(save, name), model / name)
    got = mantissa.load_weights(str(model))
    assert all(np.array_equal(got[k], latest[k]) for k in latest)
    patch(model / "model.safetensors", first_f32_offset(model / "model.safetensors"), struct.pack("<f", np.nan))
    with pytest.raises(ValueError, match="non-finite"):
        mantissa.load_weights(str(model))

    # A checkpoint whose bytes no longer match its manifest's CRC-32 falls
    # back to ck.prev, with a warning; with both corrupt, neither is used.
    weights = os.path.join(save, "model.safetensors")
    at = first_f32_offset(weights)
    patch(weights, at, struct.pack("<f", 0.5 + struct.unpack("<f", open(weights, "rb").read()[at:at + 4])[0]))
    with pytest.warns(RuntimeWarning, match="using the previous checkpoint"):
        fallback = mantissa.load_weights(save)
    assert all(np.array_equal(fallback[k], prev[k]) for k in prev)
    prev_weights = os.path.join(save + ".prev", "model.safetensors")
    patch(prev_weights, first_f32_offset(prev_weights), struct.pack("<f", 123.0))
    with pytest.raises(ValueError, match="not usable either"):
        mantissa.load_weights(save)


def test_out_of_range_training_settings_raise_value_error():
    for seed in (2**63, -2**63 - 1):
        with pytest.raises(ValueError, match=f"training setting 'seed': {seed} is out of range"):
            mantissa.train("gpt", "fp32", steps=1, data="/nonexistent/file.txt", seed=seed)
