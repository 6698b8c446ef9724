"""The training engine from Python: the same runs, records and reports as the CLI."""

from __future__ import annotations

import json
import queue
import threading
from typing import Any, Callable, Dict, Iterator, Optional

import numpy as np

from . import _core


class _Stop(Exception):
    """Raised inside the record callback to end a run whose generator was closed."""


def train(model: str = "gpt", recipe: str = "fp32", *, steps: int = 1000,
          callback: Optional[Callable[[Dict[str, Any]], None]] = None, log: bool = False,
          **settings: Any) -> Any:
    """Trains as ``mantissa train`` does, with the same settings as keyword arguments.

    Keys are the CLI's flags with ``_`` for ``-`` (data, batch_size, seq_len, lr,
    set=["cast_margin=1"], metrics="run.jsonl", save="dir", ...); threads=N sets the
    library-wide thread count, as set_num_threads does.
    Each record is a dict, exactly a line of the metrics JSONL: first
    ``{"run": {...}}``, then one per step (step, loss, lr, ...) and one per
    evaluation (step, val_loss, val_bpc, ...).

    With ``callback``: calls it with every record, returns the run's summary.
    Without: returns a generator of the records (the run trains on a
    background thread; closing the generator stops it after the current step).
    """
    cfg = dict(settings, model=model, recipe=recipe, steps=steps)
    session = _core.Session(cfg)  # bad settings raise here, before any training
    if callback is not None:
        return session.run(0, lambda line: callback(json.loads(line)), log)
    return _records(session, log)


def _records(session: Any, log: bool) -> Iterator[Dict[str, Any]]:
    q: "queue.Queue[Any]" = queue.Queue(maxsize=64)
    stop = threading.Event()
    done = object()

    def put(line: str) -> None:
        if stop.is_set():
            raise _Stop()
        q.put(line)

    def work() -> None:
        try:
            session.run(0, put, log)
            q.put(done)
        except BaseException as e:  # handed to the reader
            q.put(e)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                if isinstance(item, _Stop):
                    return
                raise item
            yield json.loads(item)
    finally:
        stop.set()
        while t.is_alive():  # drain so a blocked put sees the stop
            try:
                q.get(timeout=0.1)
            except queue.Empty:
                pass
        t.join()


def experiment(out: str = "report", preset: str = "quick", *, log: bool = False, **settings: Any) -> Dict[str, Any]:
    """Runs ``mantissa experiment`` (the recipe study) and writes its report into ``out``.

    Settings: recipes=[...], mlp_recipes=[...] (["none"]: no MLP), seeds, tokens,
    data, mlp_data, resume, threads, layers, d_model, heads, seq_len,
    batch_size, mlp_steps, lr_standard, lr_unit. Returns the report paths
    ("markdown", "html") and each run's outcome ("runs").
    """
    return _core.experiment(dict(settings, out=out, preset=preset), log)


def load_weights(path: str) -> Dict[str, np.ndarray]:
    """A saved model's (or checkpoint's) parameters as fp32 numpy arrays, by name."""
    return _core.load_weights(path)
