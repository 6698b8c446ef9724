"""llmc_inputs.py: the inputs llm.c's train_gpt2.c reads, for timing it beside mantissa.

  python3 bench/llmc_inputs.py --out DIR [--layers 12] [--d-model 768] [--heads 12]
                               [--seq-len 1024] [--vocab 50257] [--tokens 1048576] [--seed 0]

Writes DIR/model.bin, a GPT-2 checkpoint in llm.c's layout (version 3: a header of 256 int32 =
magic 20240326, version, max T, vocabulary, layers, heads, channels, padded vocabulary; then
every parameter in fp32, in llm.c's order and shapes, the token table padded to a multiple of 128
rows), random-initialised as GPT-2 is (normal 0.02, residual projections 0.02 / sqrt(2 L),
LayerNorm weights 1, biases 0); and DIR/tokens.bin, random token ids in llm.c's token format
(magic 20240520, version 1, uint16 ids). Speed does not depend on the values, only the shapes.
"""
import argparse
import os

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--tokens", type=int, default=1 << 20)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not 0 < a.vocab <= 65535:
        raise SystemExit("llmc_inputs.py: --vocab must be in [1, 65535] (llm.c's uint16 token files)")
    if a.d_model % a.heads:
        raise SystemExit("llmc_inputs.py: --d-model must be a multiple of --heads")
    L, C, T, V = a.layers, a.d_model, a.seq_len, a.vocab
    Vp = (V + 127) // 128 * 128
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)

    def normal(n: int, std: float) -> np.ndarray:
        return rng.standard_normal(n, dtype=np.float32) * np.float32(std)

    ones, zeros = np.ones, np.zeros
    wte = normal(Vp * C, 0.02)
    wte[V * C:] = 0  # llm.c's padding rows
    proj = 0.02 / np.sqrt(2 * L)
    params = [wte, normal(T * C, 0.01),                       # wte [Vp, C], wpe [T, C]
              ones(L * C, np.float32), zeros(L * C, np.float32),  # ln1 w, b
              normal(L * 3 * C * C, 0.02), zeros(L * 3 * C, np.float32),  # qkv w [L, 3C, C], b
              normal(L * C * C, proj), zeros(L * C, np.float32),  # attention projection
              ones(L * C, np.float32), zeros(L * C, np.float32),  # ln2 w, b
              normal(L * 4 * C * C, 0.02), zeros(L * 4 * C, np.float32),  # fc w [L, 4C, C], b
              normal(L * C * 4 * C, proj), zeros(L * C, np.float32),  # fc projection
              ones(C, np.float32), zeros(C, np.float32)]  # final LayerNorm
    header = np.zeros(256, np.int32)
    header[:8] = [20240326, 3, T, V, L, a.heads, C, Vp]
    with open(os.path.join(a.out, "model.bin"), "wb") as f:
        f.write(header.tobytes())
        for p in params:
            f.write(p.astype(np.float32).tobytes())
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, a.tokens]
    with open(os.path.join(a.out, "tokens.bin"), "wb") as f:
        f.write(header.tobytes())
        f.write(rng.integers(0, V, a.tokens, dtype=np.uint16).tobytes())
    print(f"llmc_inputs.py: {sum(p.size for p in params):,} parameters, {a.tokens:,} tokens in {a.out}")


if __name__ == "__main__":
    main()
