"""The training engine from Python: the same runs, records and reports as the CLI."""

from __future__ import annotations

import atexit
import json
import queue
import threading
import warnings
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


class _Run:
    """A run on a background thread, its records handed over through a queue."""

    def __init__(self, session: Any, log: bool) -> None:
        self.q: "queue.Queue[Any]" = queue.Queue(maxsize=64)
        self.stop = threading.Event()
        self.done = object()
        self.thread = threading.Thread(target=self._work, args=(session, log), name="mantissa-train", daemon=True)

    def _put(self, line: str) -> None:
        if self.stop.is_set():
            raise _Stop()
        self.q.put(line)

    def _work(self, session: Any, log: bool) -> None:
        try:
            session.run(0, self._put, log)
            self.q.put(self.done)
        except BaseException as e:  # handed to the reader
            self.q.put(e)

    def end(self) -> None:
        """Stops the run after its current step and waits for the thread."""
        self.stop.set()
        while self.thread.is_alive():  # drain so a blocked put sees the stop
            try:
                self.q.get(timeout=0.1)
            except queue.Empty:
                pass
        self.thread.join()


# Runs whose generator is still open. The thread is a daemon (an abandoned
# generator must not keep the interpreter alive), so at exit each is stopped
# and joined while the interpreter still runs: a daemon thread that re-took
# the GIL during finalisation would hang or unwind through the C++ run.
_open_runs: "set[_Run]" = set()
_open_lock = threading.Lock()


@atexit.register
def _end_open_runs() -> None:
    with _open_lock:
        runs = list(_open_runs)
    for r in runs:
        r.end()


def _records(session: Any, log: bool) -> Iterator[Dict[str, Any]]:
    r = _Run(session, log)
    with _open_lock:
        _open_runs.add(r)
    r.thread.start()
    try:
        while True:
            item = r.q.get()
            if item is r.done:
                return
            if isinstance(item, BaseException):
                if isinstance(item, _Stop):
                    return
                raise item
            yield json.loads(item)
    finally:
        r.end()
        with _open_lock:
            _open_runs.discard(r)


def experiment(out: str = "report", preset: str = "quick", *, log: bool = False, **settings: Any) -> Dict[str, Any]:
    """Runs ``mantissa experiment`` (the recipe study) and writes its report into ``out``.

    Settings: recipes=[...], mlp_recipes=[...] (["none"]: no MLP), seeds, tokens,
    data, mlp_data, resume, threads, layers, d_model, heads, seq_len,
    batch_size, mlp_steps, lr_standard, lr_unit. Returns the report paths
    ("markdown", "html") and each run's outcome ("runs").
    """
    return _core.experiment(dict(settings, out=out, preset=preset), log)


def load_weights(path: str) -> Dict[str, np.ndarray]:
    """A saved model's (or checkpoint's) parameters as fp32 numpy arrays, by name.

    Checked as ``mantissa eval`` checks them: a checkpoint's manifest, sizes and
    CRC-32s, the model its config.json describes, finite values (ValueError
    naming the file or tensor). A corrupt checkpoint falls back to the one its
    last save replaced (DIR.prev), with a RuntimeWarning saying so.
    """
    weights, warning = _core.load_weights(path)
    if warning:
        warnings.warn(warning, RuntimeWarning, stacklevel=2)
    return weights
