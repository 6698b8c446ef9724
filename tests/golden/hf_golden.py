"""Shared by make_golden_{bert,llama}_hf.py: load a directory mantissa saved with a
transformers model class strictly (any missing or unexpected parameter name is an error),
and write the directory plus transformers' logits into tests/golden/data/<name>_hf/."""
import os
import shutil
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import save_safetensors  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def source_dir(argv, script):
    """The saved directory named on the command line."""
    if len(argv) != 2:
        sys.exit(f"usage: {script} MANTISSA_SAVED_DIR")
    return argv[1]


def load_strictly(model_class, src):
    """model_class.from_pretrained(src) in fp32, eval mode, one thread; exits on any name mismatch."""
    model, info = model_class.from_pretrained(src, output_loading_info=True, torch_dtype=torch.float32)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"{src}: transformers did not load it strictly: {bad}")
    model.eval()
    torch.set_num_threads(1)
    return model


def write(name, src, ids, logits, script):
    """data/<name>_hf/ = src's config.json and model.safetensors + hf_logits.safetensors (ids, logits)."""
    out = os.path.join(DATA, f"{name}_hf")
    os.makedirs(out, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copyfile(os.path.join(src, f), os.path.join(out, f))
    save_safetensors(os.path.join(out, "hf_logits.safetensors"),
                     [("ids", ids.to(torch.int32)), ("logits", logits)],
                     {"generator": f"tests/golden/{script}, transformers {transformers.__version__}, "
                                   f"torch {torch.__version__}"})
    print(f"{src}: strict load ok, logits {tuple(logits.shape)} written to {out}")
