"""mantissa.torch.wrap on transformers' GPT-2, Llama and BERT, built offline from tiny configs: every
nn.Linear and Conv1D product is cast and counted, the outputs move by a cast-sized amount, and what
stays uncast (attention's batched products) is named."""

import copy
import glob
import importlib.metadata
import os
import re
import sys
import tempfile
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import mantissa.torch as mt  # noqa: E402


def _torch_metadata_visible():
    """transformers finds torch by its package metadata. Debian's torch, seen from the venv through a
    .pth link to the package directory alone, has none there: this process gets a link to its egg-info."""
    try:
        importlib.metadata.version("torch")
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    site = os.path.dirname(os.path.dirname(os.path.realpath(torch.__file__)))
    infos = sorted(glob.glob(os.path.join(site, "torch-*.egg-info"))
                   + glob.glob(os.path.join(site, "torch-*.dist-info")))
    if infos:
        d = tempfile.mkdtemp(prefix="mantissa-torch-metadata-")
        os.symlink(infos[0], os.path.join(d, os.path.basename(infos[0])))
        sys.path.append(d)


_torch_metadata_visible()
transformers = pytest.importorskip(
    "transformers", reason="transformers (scripts/requirements-oracles.txt: transformers==4.36.2) is not installed")
if not transformers.utils.is_torch_available():
    pytest.skip("transformers does not see torch (no package metadata for it)", allow_module_level=True)
from transformers.pytorch_utils import Conv1D  # noqa: E402

V, T, B, LAYERS = 128, 32, 2, 2


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=64, n_layer=LAYERS, n_head=2)
    return transformers.GPT2LMHeadModel(cfg)


def llama():
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T)
    return transformers.LlamaForCausalLM(cfg)


def bert():
    cfg = transformers.BertConfig(vocab_size=V, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=2,
                                  intermediate_size=128, max_position_embeddings=T)
    return transformers.BertForMaskedLM(cfg)


# Per model: the cast layers by type, the tied embedding, and the modules whose batched products are left.
MODELS = {
    "gpt2": (gpt2, {"Conv1D": 4 * LAYERS, "Linear": 1}, {"transformer.wte": "lm_head"},
             [f"transformer.h.{i}.attn" for i in range(LAYERS)]),
    "llama": (llama, {"Linear": 7 * LAYERS + 1}, {}, [f"model.layers.{i}.self_attn" for i in range(LAYERS)]),
    "bert": (bert, {"Linear": 6 * LAYERS + 2}, {"bert.embeddings.word_embeddings": "cls.predictions.decoder"},
             [f"bert.encoder.layer.{i}.attention.self" for i in range(LAYERS)]),
}


def products(model):
    """Names of the nn.Linear and Conv1D layers, by type, found independently of mantissa."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, Conv1D)) and not isinstance(m, mt.CastLinear):
            out.setdefault(type(m).__name__, []).append(name)
    return out


def logits(model, ids, labels=None):
    return model(input_ids=ids, labels=labels)


@pytest.mark.parametrize("recipe", ["fp8-delayed", "mxfp8"])
@pytest.mark.parametrize("arch", list(MODELS))
def test_every_product_is_cast_and_reported(arch, recipe, caplog):
    build, counts, tied, attention = MODELS[arch]
    torch.manual_seed(0)
    model = build().eval()  # no dropout: the same function with and without casts
    found = products(model)
    assert {k: len(v) for k, v in found.items()} == counts  # the expected counts are the model's
    ref, bf16 = copy.deepcopy(model), copy.deepcopy(model)
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    with caplog.at_level("INFO", logger="mantissa.torch"), pytest.warns(mt.UncastWarning) as warned:
        mt.wrap(model, recipe, inputs={"input_ids": ids})
    rep = model.mantissa_report
    assert rep.wrapped == counts
    assert sorted(rep.layers) == sorted(n for v in found.values() for n in v)
    assert not products(model)  # no nn.Linear or Conv1D left
    assert rep.tied == tied and rep.readout is None
    # What is left: the attention scores and their product with the values, in each attention module.
    assert [u.name for u in rep.uncast] == attention and rep.unseen == []
    for u in rep.uncast:  # two matmul calls per attention module: q k^T and its product with v
        calls = re.findall(r"(\w+)\(\[[^)]*\)(?: x(\d+))?", u.what)
        assert {op for op, _ in calls} == {"matmul"} and sum(int(n or 1) for _, n in calls) == 2, u.what
    logged = [r.getMessage() for r in caplog.records if r.name == "mantissa.torch"]
    assert len(logged) == 1 and f"{sum(counts.values())} products cast" in logged[0]
    assert len(warned) == 1 and all(f"'{n}'" in str(warned[0].message) for n in attention)

    # The outputs move by a cast's amount: well above bf16's rounding, well below the outputs' size.
    mt.wrap(bf16, "bf16-amp")
    with torch.no_grad():
        y0, y, yb = (logits(m, ids).logits for m in (ref, model, bf16))
    err = float((y - y0).norm() / y0.norm())
    err_bf16 = float((yb - y0).norm() / y0.norm())
    assert 0 < err_bf16 and 4 * err_bf16 < err < 0.25, (err, err_bf16)

    # It trains: the loss and every cast layer's gradients are finite.
    out = logits(model, ids, labels=ids)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    for name in rep.layers:
        g = model.get_submodule(name).weight.grad
        assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0, name


@pytest.mark.parametrize("arch", list(MODELS))
def test_without_inputs_nothing_is_reported_uncast(arch):
    torch.manual_seed(0)
    model = MODELS[arch][0]()
    with warnings.catch_warnings():
        warnings.simplefilter("error", mt.UncastWarning)
        mt.wrap(model, "fp8-current")
    rep = model.mantissa_report
    assert rep.wrapped == MODELS[arch][1] and rep.uncast == [] and rep.unseen == []
    assert "audit() lists them" in str(rep)


def test_gpt2_conv1d_gradients_keep_their_layout_and_train():
    torch.manual_seed(0)
    model = gpt2()
    c_attn = model.transformer.h[0].attn.c_attn
    assert c_attn.weight.shape == (64, 3 * 64)  # [in, out]
    mt.wrap(model, "fp8-delayed")
    assert isinstance(model.transformer.h[0].attn.c_attn, mt.CastConv1D)
    assert model.transformer.h[0].attn.c_attn.weight is c_attn.weight  # the parameters are shared
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(2))
    losses = []
    for _ in range(8):
        opt.zero_grad()
        loss = logits(model, ids, labels=ids).loss
        loss.backward()
        assert c_attn.weight.grad.shape == c_attn.weight.shape
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.9 * losses[0]


@pytest.mark.parametrize("recipe,sets", [("fp8-delayed", []), ("mxfp8", []), ("nvfp4", ["bf16_layers=none"]),
                                         ("mxfp4", [])])
def test_transformers_conv1d_matches_the_transposed_linear(recipe, sets):
    torch.manual_seed(4)
    conv = nn.Sequential(Conv1D(96, 64))
    with torch.no_grad():
        conv[0].weight.mul_(2.0 ** torch.randint(-6, 7, (64, 1)))  # magnitudes spread along the contraction axis
        conv[0].bias.normal_()
    lin = nn.Sequential(nn.Linear(64, 96))
    with torch.no_grad():
        lin[0].weight.copy_(conv[0].weight.t())
        lin[0].bias.copy_(conv[0].bias)
    mt.wrap(conv, recipe, set=sets)
    mt.wrap(lin, recipe, set=sets)
    assert conv.mantissa_report.wrapped == {"Conv1D": 1}
    x = torch.randn(2, 32, 64)
    dy = torch.randn(2, 32, 96) * 1e-2
    xc, xl = x.clone().requires_grad_(), x.clone().requires_grad_()
    yc, yl = conv(xc), lin(xl)
    yc.backward(dy)
    yl.backward(dy)
    assert torch.equal(yc, yl) and torch.equal(xc.grad, xl.grad)
    assert torch.equal(conv[0].weight.grad, lin[0].weight.grad.t())
