#!/usr/bin/env python3
"""Make the golden fixtures for moor's Qwen3.5 forward pass.

Builds three tiny random Qwen3.5 text models with Hugging Face transformers
(`Qwen3_5ForCausalLM`, the reference implementation), saves each as a
checkpoint (config.json + model.safetensors) and records, in golden.bin, the
logits transformers computes for a 300-token one-shot prefill followed by 32
greedy decode steps through its cache. For the first model it also writes the
layer-0 Gated DeltaNet state after the prefill (state0.bin).

Usage:  python3 make_golden.py [OUTDIR]      (default: the folder of this file)

        python3 make_golden.py --width27b OUTDIR [--device cuda] [--small]
                [--prompt 2048] [--decode 32] [--seed 2727]
        (one checkpoint of Qwen3.5-27B's width cut to 4 layers, L L L F, random
        bf16 weights, about 8.1 GB, its golden.bin and transformers' own
        run-to-run floor in floor.json: see w27_main and tests/golden/README.md)

Needs python3, torch, transformers 5.17, safetensors and numpy. Everything runs
on the CPU (the fixtures; --width27b runs where --device says). The `fla`, `causal_conv1d` and `kernels` packages must be absent so
that transformers' plain torch code paths are what runs. tests/golden/README.md
describes the files.
"""

import argparse
import copy
import hashlib
import importlib.util
import json
import math
import os
import sys

# CPU only: hide any accelerator before torch is imported (the fixtures). The
# --width27b mode may run on a GPU (--device cuda), so it leaves them visible.
if not any(a.startswith("--width27b") for a in sys.argv[1:]):
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import transformers  # noqa: E402

try:
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402
except ImportError:  # pragma: no cover - older layouts
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM  # noqa: E402
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig  # noqa: E402
import transformers.models.qwen3_5.modeling_qwen3_5 as mq  # noqa: E402

from safetensors import safe_open  # noqa: E402

from qwen35_names import LIN, expected_shapes  # noqa: E402 (this folder)

EXPECTED_TRANSFORMERS = "5.17.0"
N_PROMPT = 300
N_DECODE = 32
VOCAB = 512
PROMPT_SEED = 20260317
GOLDEN_MAGIC = b"MOORGLD1"
STATE_MAGIC = b"MOORGST1"
FORMAT_VERSION = 1

FULL = "full_attention"

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=32,
    linear_value_head_dim=32,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    max_position_embeddings=4096,
    hidden_act="silu",
    attention_bias=False,
    attention_dropout=0.0,
    # Rotary dim = 0.25 * 32 = 8, i.e. 4 frequencies; the MRoPE sections must
    # add up to 4 (the real model: [11, 11, 10] over 32). For text all three
    # position rows are equal, so the sections do not change the result.
    rope_parameters=dict(
        rope_type="default",
        rope_theta=1e7,
        partial_rotary_factor=0.25,
        mrope_section=[2, 1, 1],
        mrope_interleaved=True,
    ),
)

FIXTURES = [
    dict(name="f32_untied", dtype=torch.float32, tie=False, seed=101,
         layer_types=[LIN, LIN, LIN, FULL], extra={}, write_state=True),
    dict(name="bf16_tied", dtype=torch.bfloat16, tie=True, seed=202,
         layer_types=[LIN, LIN, LIN, FULL] * 2, extra={}, write_state=False),
    dict(name="f32_tied_r3", dtype=torch.float32, tie=True, seed=303,
         layer_types=[LIN, LIN, LIN, FULL], extra=dict(linear_num_value_heads=6), write_state=False),
]

# Gain of the untied lm_head: logits std ~= LM_HEAD_GAIN (the final norm has RMS ~1).
LM_HEAD_GAIN = 2.0
# Gain of the matrices that write into the residual stream (out_proj, o_proj, down_proj). Above 1, the layers'
# contributions outweigh the token embedding in the final hidden state, so a tied head does not just predict
# the token it was fed (which would make the greedy decode repeat one token).
RESID_GAIN = 3.0
RESID_WRITERS = ("linear_attn.out_proj.weight", "self_attn.o_proj.weight", "mlp.down_proj.weight")


def say(*a):
    print(*a, flush=True)


def warn(msg):
    print("WARNING: " + msg, flush=True)


def dtype_name(dt):
    return str(dt).replace("torch.", "")


# ---------------------------------------------------------------------------
# Environment


def kernel_packages():
    """The optional kernel packages that would take the GDN off transformers' torch code."""
    found = []
    for pkg, probe in (("fla", "is_flash_linear_attention_available"),
                       ("causal_conv1d", "is_causal_conv1d_available"),
                       ("kernels", "is_kernels_available")):
        avail = False
        fn = getattr(transformers.utils, probe, None)
        if fn is not None:
            try:
                avail = bool(fn())
            except Exception:
                avail = False
        # A folder of that name on sys.path (moor has a kernels/ folder) is a namespace package, not the package.
        spec = importlib.util.find_spec(pkg)
        if spec is not None and spec.origin not in (None, "namespace"):
            avail = True
        if avail:
            found.append(pkg)
    return found


def check_environment(allow_kernels):
    say("python       %s" % sys.version.split()[0])
    say("torch        %s" % torch.__version__)
    say("transformers %s" % transformers.__version__)
    say("numpy        %s" % np.__version__)
    try:
        import safetensors
        say("safetensors  %s" % safetensors.__version__)
    except Exception:  # pragma: no cover
        pass
    if transformers.__version__ != EXPECTED_TRANSFORMERS:
        warn("transformers is %s, the fixtures are defined against %s"
             % (transformers.__version__, EXPECTED_TRANSFORMERS))
    found = kernel_packages()
    if found:
        msg = ("package(s) %s importable: transformers may route the GDN through them instead of its torch "
               "code; the fixtures must come from the torch paths" % ", ".join(found))
        if not allow_kernels:
            sys.exit("ERROR: " + msg + " (pass --allow-kernels to go on anyway)")
        warn(msg)
    torch.set_num_threads(1)  # one thread: reduction order, hence the bits, do not depend on the core count
    say("torch threads %d, device cpu" % torch.get_num_threads())


# ---------------------------------------------------------------------------
# Model construction


def make_config(fx):
    kw = copy.deepcopy(COMMON)
    kw.update(fx["extra"])
    kw["num_hidden_layers"] = len(fx["layer_types"])
    kw["layer_types"] = list(fx["layer_types"])
    kw["tie_word_embeddings"] = fx["tie"]
    cfg = Qwen3_5TextConfig(**kw)
    # No MTP weights: this transformers version has no MTP field in the text config and
    # Qwen3_5ForCausalLM builds no MTP block; disable it if a field exists.
    if hasattr(cfg, "mtp_num_hidden_layers"):
        cfg.mtp_num_hidden_layers = 0
    cfg._attn_implementation = "eager"
    # Sanity: the config holds what we asked for.
    assert cfg.layer_types == fx["layer_types"], cfg.layer_types
    assert cfg.rope_parameters["partial_rotary_factor"] == 0.25, cfg.rope_parameters
    assert float(cfg.rope_parameters["rope_theta"]) == 1e7, cfg.rope_parameters
    assert cfg.head_dim == 32 and cfg.tie_word_embeddings == fx["tie"]
    return cfg


def init_weights(model, cfg, seed):
    """Overwrite every parameter from a fixed-seed generator, chosen by name."""
    g = torch.Generator().manual_seed(seed)
    H = cfg.hidden_size

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std + mean

    done = []
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):  # tied lm_head is not listed (same object as the embedding)
            shape = tuple(p.shape)
            if name.endswith("embed_tokens.weight"):
                val = normal(shape, 1.0)
            elif name == "lm_head.weight":
                val = normal(shape, LM_HEAD_GAIN / math.sqrt(H))
            elif name.endswith("linear_attn.norm.weight"):
                val = normal(shape, 0.1, mean=1.0)  # plain weight (not 1 + w)
            elif name.endswith("norm.weight"):
                val = normal(shape, 0.1)  # zero-centred RMSNorm: the scale is (1 + w)
            elif name.endswith("A_log"):
                val = torch.rand(shape, generator=g, dtype=torch.float32) * 2.0 - 1.0
            elif name.endswith("dt_bias"):
                val = normal(shape, 0.5)
            elif name.endswith("conv1d.weight"):
                val = normal(shape, 0.5)
            elif name.endswith(RESID_WRITERS):
                val = normal(shape, RESID_GAIN / math.sqrt(shape[1]))  # Linear [out, in]
            elif name.endswith(".weight") and p.dim() == 2:
                val = normal(shape, 1.0 / math.sqrt(shape[1]))  # Linear [out, in]
            else:
                raise RuntimeError("no init rule for parameter %s %s" % (name, shape))
            p.copy_(val)
            done.append(name)
    return done


def build_model(fx):
    cfg = make_config(fx)
    torch.manual_seed(fx["seed"])
    model = Qwen3_5ForCausalLM(cfg)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    model.eval()
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    for n, p in model.named_parameters():
        assert p.dtype == torch.float32, (n, p.dtype)
    emb = model.model.embed_tokens.weight
    head = model.lm_head.weight
    if fx["tie"]:
        if head.data_ptr() != emb.data_ptr():
            model.tie_weights()
            head = model.lm_head.weight
        assert head.data_ptr() == emb.data_ptr(), "tie_word_embeddings=True but lm_head is not tied"
    else:
        assert head.data_ptr() != emb.data_ptr(), "tie_word_embeddings=False but lm_head is tied"
    init_weights(model, cfg, fx["seed"] + 1)
    if fx["tie"]:
        assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    return model, cfg


# ---------------------------------------------------------------------------
# Checkpoint checks


def expected_tensors(cfg):
    """name -> shape, as SPEC-qwen35.md section 2 describes (text-only prefix `model.`)."""
    return expected_shapes(lambda k: getattr(cfg, k))


def save_checkpoint(model, cfg, outdir, target_dtype, print_names):
    os.makedirs(outdir, exist_ok=True)
    for stale in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
        if os.path.exists(os.path.join(outdir, stale)):
            os.remove(os.path.join(outdir, stale))
    try:
        model.config.dtype = dtype_name(target_dtype)
    except Exception as e:  # pragma: no cover
        warn("could not set config.dtype: %r" % (e,))
    try:
        model.save_pretrained(outdir, safe_serialization=True)
    except TypeError:
        model.save_pretrained(outdir)
    gc = os.path.join(outdir, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)  # not part of the fixture
    st = os.path.join(outdir, "model.safetensors")
    if not os.path.exists(st):
        sys.exit("ERROR: save_pretrained wrote no single model.safetensors in %s: %s" % (outdir, os.listdir(outdir)))

    with open(os.path.join(outdir, "config.json")) as f:
        cj = json.load(f)
    say("  config.json: model_type=%s architectures=%s dtype=%s tie=%s layer_types=%s rope=%s"
        % (cj.get("model_type"), cj.get("architectures"), cj.get("dtype", cj.get("torch_dtype")),
           cj.get("tie_word_embeddings"), cj.get("layer_types"), cj.get("rope_parameters")))
    if cj.get("model_type") != "qwen3_5_text":
        warn("config.json model_type is %r, expected 'qwen3_5_text'" % cj.get("model_type"))
    if "mtp_num_hidden_layers" in cj:
        say("  config.json mtp_num_hidden_layers=%s" % cj["mtp_num_hidden_layers"])

    saved = {}
    with safe_open(st, framework="pt") as f:
        meta = f.metadata()
        for k in f.keys():
            saved[k] = f.get_tensor(k)
    if print_names:
        say("  saved tensors (%d), metadata %s:" % (len(saved), meta))
        for k in sorted(saved):
            say("    %-52s %-10s %s" % (k, dtype_name(saved[k].dtype), tuple(saved[k].shape)))

    # Names: accept the multimodal prefix too, but say so (the C loader accepts both).
    prefix_lm = [k for k in saved if k.startswith("model.language_model.")]
    if prefix_lm:
        warn("tensors saved under model.language_model.* (%d of them), not model.*" % len(prefix_lm))
    norm = {("model." + k[len("model.language_model."):] if k.startswith("model.language_model.") else k): v
            for k, v in saved.items()}
    exp = expected_tensors(cfg)
    missing = sorted(set(exp) - set(norm))
    extra = sorted(set(norm) - set(exp))
    if cfg.tie_word_embeddings and "lm_head.weight" in extra:
        warn("tied model saved an lm_head.weight as well")
        extra.remove("lm_head.weight")
    if missing or extra:
        sys.exit("ERROR: saved tensor names differ from the expected set: missing %s extra %s" % (missing, extra))
    for k, shape in exp.items():
        if tuple(norm[k].shape) != shape:
            sys.exit("ERROR: %s has shape %s, expected %s" % (k, tuple(norm[k].shape), shape))
        if norm[k].dtype != target_dtype:
            sys.exit("ERROR: %s saved as %s, expected %s" % (k, norm[k].dtype, target_dtype))
    # Saved values are the model's, bit for bit.
    sd = model.state_dict()
    for k, v in norm.items():
        if k in sd and not torch.equal(sd[k], v):
            sys.exit("ERROR: saved %s differs from the model's parameter" % k)
    return st, len(saved), os.path.getsize(st)


def reload_checkpoint(outdir, target_dtype):
    try:
        m = Qwen3_5ForCausalLM.from_pretrained(outdir, dtype=target_dtype, attn_implementation="eager")
    except Exception as e:
        warn("from_pretrained(%s) failed: %r; using the in-memory model" % (outdir, e))
        return None
    m.eval()
    return m


# ---------------------------------------------------------------------------
# Instrumentation: which GDN kernels transformers calls, with what length


class CallLog:
    NAMES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule",
             "causal_conv1d_fn", "causal_conv1d_update")

    def __init__(self):
        self.calls = []
        self.orig = {}

    def __enter__(self):
        for n in self.NAMES:
            fn = getattr(mq, n, None)
            if fn is None:
                continue
            self.orig[n] = fn

            def wrap(*a, _fn=fn, _n=n, **k):
                x = a[0] if a else next(iter(k.values()))
                length = x.shape[1] if "delta" in _n else x.shape[-1]
                self.calls.append((_n, int(length)))
                return _fn(*a, **k)

            setattr(mq, n, wrap)
        return self

    def __exit__(self, *exc):
        for n, fn in self.orig.items():
            setattr(mq, n, fn)
        return False

    def take(self):
        c, self.calls = self.calls, []
        out = {}
        for n, L in c:
            out.setdefault(n, set()).add(L)
        return {n: sorted(v) for n, v in out.items()}


# ---------------------------------------------------------------------------
# Cache access (the layout changed across transformers 5.x; try the known ones)


def _pick(x, idx=0):
    if x is None:
        return None
    if torch.is_tensor(x):
        return x
    if isinstance(x, dict):
        return x.get(idx)
    if isinstance(x, (list, tuple)):
        return x[idx] if len(x) > idx else None
    return None


def layer_states(cache, layer_idx):
    """(conv_state, recurrent_state) of a linear-attention layer, batch dim kept."""
    conv = rec = None
    layers = getattr(cache, "layers", None)
    if layers is not None and len(layers) > layer_idx:
        lay = layers[layer_idx]
        conv = _pick(getattr(lay, "conv_states", None))
        rec = _pick(getattr(lay, "recurrent_states", None))
    if conv is None:
        conv = _pick(getattr(cache, "conv_states", None), layer_idx)
    if rec is None:
        rec = _pick(getattr(cache, "recurrent_states", None), layer_idx)
    if conv is None or rec is None:
        raise RuntimeError("cannot find layer %d's conv/recurrent state in %r" % (layer_idx, type(cache)))
    return conv, rec


# ---------------------------------------------------------------------------
# The golden run


def run_golden(model, prompt, n_decode, state_layer=None, capture=False):
    """Prefill once, then greedy-decode n_decode tokens through the cache."""
    res = {}
    la = model.model.layers[0].linear_attn if capture else None
    grabbed = {}
    hooks = []
    if capture:
        def pre_la(mod, args, kwargs):
            if "x" not in grabbed:
                hs = kwargs.get("hidden_states", args[0] if args else None)
                grabbed["x"] = hs.detach().clone()

        def pre_norm(mod, args, kwargs):
            if "o" not in grabbed:
                grabbed["o"] = args[0].detach().clone()

        hooks.append(la.register_forward_pre_hook(pre_la, with_kwargs=True))
        hooks.append(la.norm.register_forward_pre_hook(pre_norm, with_kwargs=True))
    T = len(prompt)
    with torch.no_grad(), CallLog() as log:
        ids = torch.tensor([prompt], dtype=torch.long)
        out = model(input_ids=ids, position_ids=torch.arange(T, dtype=torch.long)[None], use_cache=True)
        for h in hooks:
            h.remove()
        res["prefill_calls"] = log.take()
        cache = out.past_key_values
        res["cache_type"] = type(cache).__name__
        try:
            res["cache_len_after_prefill"] = int(cache.get_seq_length())
        except Exception:
            res["cache_len_after_prefill"] = None
        pre = out.logits[0].float().clone()
        assert tuple(pre.shape) == (T, VOCAB), pre.shape
        if state_layer is not None:
            conv, rec = layer_states(cache, state_layer)
            res["conv_state"] = conv.detach().clone()
            res["rec_state"] = rec.detach().clone()
        tok = int(torch.argmax(pre[-1]))
        fed, rows = [], []
        for i in range(n_decode):
            out = model(input_ids=torch.tensor([[tok]], dtype=torch.long),
                        position_ids=torch.tensor([[T + i]], dtype=torch.long),
                        past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            row = out.logits[0, -1].float().clone()
            fed.append(tok)
            rows.append(row)
            tok = int(torch.argmax(row))
        res["decode_calls"] = log.take()
        try:
            res["cache_len_after_decode"] = int(cache.get_seq_length())
        except Exception:
            res["cache_len_after_decode"] = None
    res["prefill"] = pre
    res["fed"] = fed
    res["decode"] = torch.stack(rows)
    res["grabbed"] = grabbed
    return res


# ---------------------------------------------------------------------------
# Independent float64 reference of layer 0's GDN (SPEC-qwen35.md section 5.5)


def reference_gdn(la, cfg, x):
    """x: [T, H] input of layer 0's linear_attn. Returns mixed (pre-conv), S [Hv,dk,dv], o [T,Hv,dv]."""
    Hk, Hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, Kc = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim
    r = Hv // Hk
    x = x.double()
    T = x.shape[0]
    W = lambda lin: lin.weight.detach().double()  # noqa: E731
    mixed = x @ W(la.in_proj_qkv).T
    C = mixed.shape[1]
    b = x @ W(la.in_proj_b).T
    a = x @ W(la.in_proj_a).T
    w = la.conv1d.weight.detach().double()[:, 0, :]  # [C, Kc], tap Kc-1 = current token
    padded = torch.cat([torch.zeros(Kc - 1, C, dtype=torch.float64), mixed])
    c = sum(padded[j:j + T] * w[:, j] for j in range(Kc))
    u = c * torch.sigmoid(c)
    q = u[:, :Hk * dk].reshape(T, Hk, dk)
    k = u[:, Hk * dk:2 * Hk * dk].reshape(T, Hk, dk)
    v = u[:, 2 * Hk * dk:].reshape(T, Hv, dv)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * dk ** -0.5
    beta = torch.sigmoid(b)
    g = -torch.exp(la.A_log.detach().double()) * F.softplus(a + la.dt_bias.detach().double())
    grp = torch.arange(Hv) // r  # value head h reads key/query head h // r
    qq, kk = q[:, grp], k[:, grp]
    S = torch.zeros(Hv, dk, dv, dtype=torch.float64)
    outs = []
    for t in range(T):
        S = S * torch.exp(g[t])[:, None, None]
        m = torch.einsum("hij,hi->hj", S, kk[t])
        d = beta[t][:, None] * (v[t] - m)
        S = S + kk[t][:, :, None] * d[:, None, :]
        outs.append(torch.einsum("hij,hi->hj", S, qq[t]))
    return mixed, S, torch.stack(outs)


def rel_err(a, b):
    a = a.double()
    b = b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def check_layer0(model, cfg, res, exact):
    """Compare transformers' layer-0 state/output with the float64 reference. Returns (S [Hv,dk,dv], conv, ok)."""
    la = model.model.layers[0].linear_attn
    x = res["grabbed"]["x"][0]
    mixed, S_ref, o_ref = reference_gdn(la, cfg, x)
    Hv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    tol = 1e-4 if exact else 5e-2
    ok = True

    o_tf = res["grabbed"]["o"].reshape(x.shape[0], Hv, dv)
    e_o = rel_err(o_tf, o_ref)
    say("  layer-0 GDN core output (prefill, chunked) vs float64 recurrent reference: rel err %.2e" % e_o)
    ok &= e_o < tol

    rec = res["rec_state"]
    say("  layer-0 recurrent state in the cache: shape %s dtype %s" % (tuple(rec.shape), dtype_name(rec.dtype)))
    rec0 = rec[0]
    S_out = None
    if tuple(rec0.shape) == (Hv, dk, dv):
        e_d = rel_err(rec0, S_ref)
        e_t = rel_err(rec0.transpose(-1, -2), S_ref) if dk == dv else float("inf")
        say("  recurrent state vs reference S[h][k_i][v_j]: as held %.2e, transposed %.2e" % (e_d, e_t))
        if e_d < tol and e_d <= e_t:
            say("  => cache holds S as [B, Hv, dk, dv] (S[h][i][j], i = key index, j = value index)")
            S_out = rec0
        elif e_t < tol:
            say("  => cache holds S transposed, [B, Hv, dv, dk]; state0.bin gets it transposed back")
            S_out = rec0.transpose(-1, -2)
    elif tuple(rec0.shape) == (Hv, dv, dk):
        e_t = rel_err(rec0.transpose(-1, -2), S_ref)
        say("  recurrent state is [B, Hv, dv, dk]; transposed vs reference %.2e" % e_t)
        if e_t < tol:
            S_out = rec0.transpose(-1, -2)
    if S_out is None:
        warn("layer-0 recurrent state does not match the reference in any known layout")
        ok = False
        S_out = rec0

    conv = res["conv_state"]
    say("  layer-0 conv state in the cache: shape %s dtype %s" % (tuple(conv.shape), dtype_name(conv.dtype)))
    conv0 = conv[0]
    n = conv0.shape[-1]
    e_c = rel_err(conv0, mixed[-n:].T)
    say("  conv state vs the last %d pre-conv inputs (in_proj_qkv outputs) [conv_dim, %d], oldest first: "
        "rel err %.2e" % (n, n, e_c))
    ok &= e_c < tol
    return S_out.float(), conv0.float(), bool(ok)


# ---------------------------------------------------------------------------
# Files


def write_golden(path, prompt, pre, fed, dec):
    n_prompt, vocab = pre.shape
    n_decode = len(fed)
    with open(path, "wb") as f:
        f.write(GOLDEN_MAGIC)
        f.write(np.array([FORMAT_VERSION, n_prompt, n_decode, vocab], dtype="<u4").tobytes())
        f.write(np.asarray(prompt, dtype="<i4").tobytes())
        f.write(np.ascontiguousarray(pre.numpy().astype("<f4")).tobytes())
        f.write(np.asarray(fed, dtype="<i4").tobytes())
        f.write(np.ascontiguousarray(dec.numpy().astype("<f4")).tobytes())
    # Read it back.
    raw = open(path, "rb").read()
    want = 8 + 16 + 4 * n_prompt + 4 * n_prompt * vocab + 4 * n_decode + 4 * n_decode * vocab
    assert len(raw) == want, (len(raw), want)
    assert raw[:8] == GOLDEN_MAGIC
    hdr = np.frombuffer(raw, dtype="<u4", count=4, offset=8)
    assert list(hdr) == [FORMAT_VERSION, n_prompt, n_decode, vocab]
    off = 24
    p = np.frombuffer(raw, dtype="<i4", count=n_prompt, offset=off)
    off += 4 * n_prompt
    lp = np.frombuffer(raw, dtype="<f4", count=n_prompt * vocab, offset=off).reshape(n_prompt, vocab)
    off += 4 * n_prompt * vocab
    d = np.frombuffer(raw, dtype="<i4", count=n_decode, offset=off)
    off += 4 * n_decode
    ld = np.frombuffer(raw, dtype="<f4", count=n_decode * vocab, offset=off).reshape(n_decode, vocab)
    assert list(p) == list(prompt) and list(d) == list(fed)
    assert np.array_equal(lp, pre.numpy()) and np.array_equal(ld, dec.numpy())
    assert int(np.argmax(lp[-1])) == fed[0]
    for i in range(n_decode - 1):
        assert int(np.argmax(ld[i])) == fed[i + 1]
    return hashlib.sha256(raw).hexdigest(), len(raw)


def write_state(path, S, conv, n_tokens, verified):
    Hv, dk, dv = S.shape
    conv_dim, conv_len = conv.shape
    with open(path, "wb") as f:
        f.write(STATE_MAGIC)
        f.write(np.array([FORMAT_VERSION, 0, n_tokens, Hv, dk, dv, conv_dim, conv_len, int(verified), 0],
                         dtype="<u4").tobytes())
        f.write(np.ascontiguousarray(S.numpy().astype("<f4")).tobytes())
        f.write(np.ascontiguousarray(conv.numpy().astype("<f4")).tobytes())
    raw = open(path, "rb").read()
    assert len(raw) == 8 + 40 + 4 * (Hv * dk * dv + conv_dim * conv_len)
    return hashlib.sha256(raw).hexdigest(), len(raw)


# ---------------------------------------------------------------------------


def margins(rows):
    top2 = torch.topk(rows, 2, dim=-1).values
    return top2[:, 0] - top2[:, 1]


def compare_runs(a, b):
    same = (a["fed"] == b["fed"] and torch.equal(a["prefill"], b["prefill"]) and torch.equal(a["decode"], b["decode"]))
    if same:
        return "bit-identical"
    return "DIFFERENT (prefill max|d| %.3e, decode max|d| %.3e, fed equal %s)" % (
        float((a["prefill"] - b["prefill"]).abs().max()), float((a["decode"] - b["decode"]).abs().max()),
        a["fed"] == b["fed"])


def make_fixture(fx, outroot, prompt, print_names):
    name = fx["name"]
    say("")
    say("=== %s: %s, %s, %d layers %s, Hk=%d Hv=%d" % (
        name, dtype_name(fx["dtype"]), "tied" if fx["tie"] else "untied", len(fx["layer_types"]),
        "".join("L" if t == LIN else "F" for t in fx["layer_types"]),
        COMMON["linear_num_key_heads"], fx["extra"].get("linear_num_value_heads", COMMON["linear_num_value_heads"])))
    model, cfg = build_model(fx)

    # Logit scale check on the float32 model, before the cast.
    with torch.no_grad():
        ids = torch.tensor([prompt], dtype=torch.long)
        lf32 = model(input_ids=ids, use_cache=False).logits[0].float()
    std32 = float(lf32.std())
    say("  float32 prefill logits std %.3f" % std32)
    if std32 < 0.5:
        sys.exit("ERROR: logits std %.3f is too small: greedy argmax would be a coin toss" % std32)
    if std32 < 1.0:
        warn("logits std %.3f < 1" % std32)

    if fx["dtype"] != torch.float32:
        # Module.to(dtype) would also cast the RoPE inv_freq buffers; a model loaded with from_pretrained keeps
        # them in float32 (they are not in the checkpoint), so keep them float32 here too.
        fp32_buffers = {n: b.clone() for n, b in model.named_buffers() if b.dtype == torch.float32}
        model = model.to(fx["dtype"])
        for n, b in model.named_buffers():
            if n in fp32_buffers:
                b.data = fp32_buffers[n]
    for n, p in model.named_parameters():
        assert p.dtype == fx["dtype"], (n, p.dtype)

    outdir = os.path.join(outroot, name)
    st, n_tensors, st_bytes = save_checkpoint(model, cfg, outdir, fx["dtype"], print_names)
    say("  model.safetensors: %d tensors, %d bytes" % (n_tensors, st_bytes))
    if st_bytes > 1 << 20:
        warn("model.safetensors is %.2f MiB (> 1 MiB)" % (st_bytes / 2 ** 20))

    res_mem = run_golden(model, prompt, N_DECODE, state_layer=0, capture=True)
    reloaded = reload_checkpoint(outdir, fx["dtype"])
    if reloaded is not None:
        say("  buffers: in-memory %s; reloaded %s" % (
            {n: dtype_name(b.dtype) for n, b in model.named_buffers()},
            {n: dtype_name(b.dtype) for n, b in reloaded.named_buffers()}))
        res = run_golden(reloaded, prompt, N_DECODE, state_layer=0, capture=True)
        cmp = compare_runs(res, res_mem)
        say("  golden from the reloaded checkpoint; vs the in-memory model: %s" % cmp)
        if cmp != "bit-identical":
            warn("%s: the reloaded checkpoint does not reproduce the in-memory model" % name)
        src = reloaded
    else:
        res, src = res_mem, model

    say("  cache %s; seq length after prefill %s, after decode %s" % (
        res["cache_type"], res["cache_len_after_prefill"], res["cache_len_after_decode"]))
    say("  prefill kernels (name: seq lens) %s" % res["prefill_calls"])
    say("  decode  kernels (name: seq lens) %s" % res["decode_calls"])

    S, conv, ok = check_layer0(src, cfg, res, exact=(fx["dtype"] == torch.float32))
    if fx["dtype"] == torch.float32 and not ok:
        warn("%s: layer-0 reference check FAILED" % name)

    pre, dec, fed = res["prefill"], res["decode"], res["fed"]
    sha, nbytes = write_golden(os.path.join(outdir, "golden.bin"), prompt, pre, fed, dec)
    m_dec = margins(dec)
    m_pre = margins(pre)
    summary = dict(name=name, tensors=n_tensors, safetensors_bytes=st_bytes, logits_std=float(pre.std()),
                   decode_std=float(dec.std()), first8=fed[:8], sha=sha, golden_bytes=nbytes,
                   min_margin_decode=float(m_dec.min()), min_margin_prefill=float(m_pre.min()),
                   ties_decode=int((m_dec == 0).sum()), ties_prefill=int((m_pre == 0).sum()), layer0_ok=ok)
    if fx["write_state"]:
        ssha, sbytes = write_state(os.path.join(outdir, "state0.bin"), S, conv, len(prompt), ok)
        summary["state_sha"] = ssha
        summary["state_bytes"] = sbytes
        summary["state_shapes"] = (tuple(S.shape), tuple(conv.shape))
    return summary


# ---------------------------------------------------------------------------
# --width27b: one checkpoint of Qwen3.5-27B's width with 4 layers (L L L F) for the GPU golden check (issue 10,
# section 5): random bf16 weights, transformers' logits of a one-shot prefill and greedy steps (golden.bin, the
# fixtures' format), and transformers' own run-to-run floor (floor.json) from which tests/engine/golden_check
# derives its tolerance. Nothing above this line changes for it: the fixtures' bits stay as they are.

W27_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "qwen35-27b", "config.json")
W27_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "linear_conv_kernel_dim", "rms_norm_eps", "max_position_embeddings",
            "hidden_act", "attention_bias", "tie_word_embeddings", "rope_parameters")
# --small: the same structure at a width that runs in seconds, to try the whole path (this script, then
# golden_check) before the 8 GB run: the 27B model's head shapes (attention head dim 256 with 6 query heads a KV
# head, GDN heads of 128 with r = Hv/Hk = 3, so the same kernels run in our engine, and the same RoPE), fewer heads,
# hidden 256, vocab 4,096, untied.
W27_SMALL = dict(vocab_size=4096, hidden_size=256, intermediate_size=512, num_attention_heads=6,
                 num_key_value_heads=1, linear_num_key_heads=2, linear_num_value_heads=6)
W27_PROMPT_SEED = 20261204
# Chunkings of the same prefill through the cache, each a valid way for transformers to compute the same logits:
# 1,024 + 1,024 (our grid; transformers' delta rule chunks by 64 from each call's start, so the chunk grid is the
# same) and 1,000 + 1,048 (a chunk grid shifted by 40 tokens: other delta-rule chunks, other GEMM shapes).
W27_SPLITS = (1024, 1000)
# A chunked run farther from the one-shot run than this is not bf16 noise: transformers' cache would be dropping
# state between calls, and a floor measured from it would mean nothing.
W27_FLOOR_SANE = 0.2


def w27_config(small):
    with open(W27_CONFIG) as f:
        full = json.load(f)
    kw = {k: copy.deepcopy(full[k]) for k in W27_KEYS}
    if small:
        kw.update(copy.deepcopy(W27_SMALL))
    kw["layer_types"] = list(full["layer_types"][:4])
    kw["num_hidden_layers"] = 4
    kw["attention_dropout"] = 0.0
    cfg = Qwen3_5TextConfig(**kw)
    if hasattr(cfg, "mtp_num_hidden_layers"):
        cfg.mtp_num_hidden_layers = 0
    cfg._attn_implementation = "eager"
    assert cfg.layer_types == [LIN, LIN, LIN, FULL], cfg.layer_types
    for k in ("vocab_size", "hidden_size", "intermediate_size", "head_dim", "linear_num_value_heads"):
        assert getattr(cfg, k) == kw[k], (k, getattr(cfg, k), kw[k])
    assert not cfg.tie_word_embeddings
    assert cfg.rope_parameters["partial_rotary_factor"] == 0.25, cfg.rope_parameters
    return cfg


def w27_rule(name, p):
    """init_weights' rule for a parameter, as (kind, std, mean): the same distributions, drawn on the device."""
    shape = tuple(p.shape)
    if name.endswith("embed_tokens.weight"):
        return "n", 1.0, 0.0
    if name == "lm_head.weight":
        return "n", LM_HEAD_GAIN / math.sqrt(shape[1]), 0.0
    if name.endswith("linear_attn.norm.weight"):
        return "n", 0.1, 1.0
    if name.endswith("norm.weight"):
        return "n", 0.1, 0.0
    if name.endswith("A_log"):
        return "u", 0.0, 0.0
    if name.endswith("dt_bias"):
        return "n", 0.5, 0.0
    if name.endswith("conv1d.weight"):
        return "n", 0.5, 0.0
    if name.endswith(RESID_WRITERS):
        return "n", RESID_GAIN / math.sqrt(shape[1]), 0.0
    if name.endswith(".weight") and p.dim() == 2:
        return "n", 1.0 / math.sqrt(shape[1]), 0.0
    raise RuntimeError("no init rule for parameter %s %s" % (name, shape))


def w27_build(cfg, seed, device):
    """The model in float32 on the device, every parameter drawn from a seeded generator there, then cast to bf16
    with the RoPE buffers kept in float32 (as from_pretrained leaves them)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3_5ForCausalLM(cfg)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    model.eval()
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr(), "lm_head is tied"
    g = torch.Generator(device=device).manual_seed(seed + 1)
    n = 0
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            assert p.dtype == torch.float32 and p.device.type == torch.device(device).type, (name, p.dtype, p.device)
            kind, std, mean = w27_rule(name, p)
            if kind == "u":  # A_log ~ U(-1, 1)
                val = torch.rand(tuple(p.shape), generator=g, device=device, dtype=torch.float32) * 2.0 - 1.0
            else:
                val = torch.randn(tuple(p.shape), generator=g, device=device, dtype=torch.float32) * std + mean
            p.copy_(val)
            del val
            n += p.numel()
    return model, n


def w27_to_bf16(model):
    fp32_buffers = {n: b.clone() for n, b in model.named_buffers() if b.dtype == torch.float32}
    model = model.to(torch.bfloat16)
    for n, b in model.named_buffers():
        if n in fp32_buffers:
            b.data = fp32_buffers[n]
    for n, p in model.named_parameters():
        assert p.dtype == torch.bfloat16, (n, p.dtype)
    return model


def w27_save(model, cfg, outdir):
    """save_pretrained in one file if it will (our loader takes shards too), then names, shapes and dtypes checked
    against SPEC-qwen35.md section 2 from the headers alone (the file is 8 GB)."""
    os.makedirs(outdir, exist_ok=True)
    for stale in os.listdir(outdir):
        if stale.startswith("model") and (stale.endswith(".safetensors") or stale.endswith(".json")):
            os.remove(os.path.join(outdir, stale))
    model.config.dtype = "bfloat16"
    for kw in (dict(safe_serialization=True, max_shard_size="200GB"), dict(max_shard_size="200GB"), {}):
        try:
            model.save_pretrained(outdir, **kw)
            break
        except TypeError:
            continue
    gc = os.path.join(outdir, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    files = sorted(f for f in os.listdir(outdir) if f.endswith(".safetensors"))
    if not files:
        sys.exit("ERROR: save_pretrained wrote no safetensors in %s: %s" % (outdir, os.listdir(outdir)))
    with open(os.path.join(outdir, "config.json")) as f:
        cj = json.load(f)
    say("  config.json: model_type=%s dtype=%s hidden=%s layers=%s vocab=%s tie=%s rope=%s" % (
        cj.get("model_type"), cj.get("dtype", cj.get("torch_dtype")), cj.get("hidden_size"),
        cj.get("layer_types"), cj.get("vocab_size"), cj.get("tie_word_embeddings"), cj.get("rope_parameters")))
    shapes, dtypes, nbytes = {}, {}, 0
    for fn in files:
        path = os.path.join(outdir, fn)
        nbytes += os.path.getsize(path)
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                # the multimodal prefix is accepted, as by save_checkpoint and the C loader
                n = "model." + k[len("model.language_model."):] if k.startswith("model.language_model.") else k
                shapes[n] = tuple(sl.get_shape())
                dtypes[n] = sl.get_dtype()
    exp = expected_tensors(cfg)
    missing, extra = sorted(set(exp) - set(shapes)), sorted(set(shapes) - set(exp))
    if missing or extra:
        sys.exit("ERROR: saved tensor names differ from the expected set: missing %s extra %s" % (missing, extra))
    for k, shape in exp.items():
        if shapes[k] != shape:
            sys.exit("ERROR: %s has shape %s, expected %s" % (k, shapes[k], shape))
        if dtypes[k] not in ("BF16", "bfloat16"):
            sys.exit("ERROR: %s saved as %s, expected BF16" % (k, dtypes[k]))
    say("  %s: %d tensors, %d bytes (%.2f GiB)" % (" + ".join(files), len(shapes), nbytes, nbytes / 2 ** 30))
    return files, len(shapes), nbytes


def w27_run(model, prompt, device, chunks, fed=None, n_decode=0):
    """Prefill prompt in calls of the given lengths through the cache, then decode: greedy (fed None, n_decode
    steps) or teacher-forced with fed. Returns float32 CPU tensors [T, V] and [n, V], and the fed tokens. The greedy
    pick is numpy's argmax of the float32 row on the host: the first index on an exact tie, as golden.h's readers
    and write_golden expect."""
    T = len(prompt)
    assert sum(chunks) == T, (chunks, T)
    with torch.no_grad():
        cache, rows, pos = None, [], 0
        for c in chunks:
            ids = torch.tensor([prompt[pos:pos + c]], dtype=torch.long, device=device)
            out = model(input_ids=ids, position_ids=torch.arange(pos, pos + c, dtype=torch.long, device=device)[None],
                        past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            rows.append(out.logits[0].float().cpu())
            del out
            pos += c
        pre = torch.cat(rows)
        del rows
        steps = len(fed) if fed is not None else n_decode
        tok = int(np.argmax(pre[-1].numpy()))
        got, dec = [], []
        for i in range(steps):
            if fed is not None:
                tok = fed[i]
            out = model(input_ids=torch.tensor([[tok]], dtype=torch.long, device=device),
                        position_ids=torch.tensor([[T + i]], dtype=torch.long, device=device),
                        past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            row = out.logits[0, -1].float().cpu()
            got.append(tok)
            dec.append(row)
            tok = int(np.argmax(row.numpy()))
    return pre, torch.stack(dec), got


def w27_compare(a_pre, a_dec, r_pre, r_dec):
    """run a against the reference r, row by row (prefill rows, then decode rows): max |d|, max |d| / max |r| (the
    worst row), mean |d| over every logit, the last prefill row and the decode rows apart, and the argmax agreement:
    by index, and counting a pick that is exactly tied with the reference's argmax in its (bf16) logits."""
    a = torch.cat([a_pre, a_dec])
    r = torch.cat([r_pre, r_dec])
    n, T = a.shape[0], a_pre.shape[0]
    mabs = torch.empty(n, dtype=torch.float64)
    mrel = torch.empty(n, dtype=torch.float64)
    sums = 0.0
    for i in range(0, n, 128):  # in blocks: 2,080 rows of 248,320 logits are 2 GB a copy
        d = (a[i:i + 128].double() - r[i:i + 128].double()).abs()
        mabs[i:i + 128] = d.max(1).values
        mrel[i:i + 128] = mabs[i:i + 128] / r[i:i + 128].double().abs().max(1).values.clamp_min(1e-30)
        sums += float(d.sum())
    pa, pr = a.argmax(1), r.argmax(1)
    strict = int((pa == pr).sum())
    tied = int((r.gather(1, pa[:, None])[:, 0] == r.max(1).values).sum())
    return dict(bit_identical=bool(torch.equal(a, r)), rows=n, max_abs=float(mabs.max()), max_rel=float(mrel.max()),
                mean_abs=sums / a.numel(), last_prefill_max_abs=float(mabs[T - 1]),
                last_prefill_max_rel=float(mrel[T - 1]),
                decode_max_abs=float(mabs[T:].max()) if n > T else 0.0,
                decode_max_rel=float(mrel[T:].max()) if n > T else 0.0,
                argmax_same_index=strict, argmax_tie_aware=tied)


def w27_main(args):
    device = args.device
    # check_environment's one thread is for the fixtures' bits; here the host only compares and copies
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            sys.exit("ERROR: --device %s but torch sees no CUDA device" % device)
        # the same kernels and precision, run after run (floors_golden.py's settings)
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        say("device %s: %s" % (device, torch.cuda.get_device_name(torch.device(device))))
    outdir = args.width27b
    cfg = w27_config(args.small)
    V = cfg.vocab_size
    say("=== %s: hidden %d, intermediate %d, vocab %d, layers L L L F, attention %d/%d heads of %d, GDN %d/%d heads "
        "of %d/%d, bf16, untied" % (
            "27B width" if not args.small else "small (--small)", cfg.hidden_size, cfg.intermediate_size, V,
            cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.linear_num_key_heads,
            cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim))
    g = torch.Generator().manual_seed(W27_PROMPT_SEED)
    prompt = torch.randint(0, V, (args.prompt,), generator=g, dtype=torch.long).tolist()
    say("prompt: %d ids, first 8 %s" % (len(prompt), prompt[:8]))

    model, n_params = w27_build(cfg, args.seed, device)
    say("  %d parameters drawn on %s (seed %d)" % (n_params, device, args.seed + 1))
    with torch.no_grad():  # logit scale on the float32 model, before the cast
        ids = torch.tensor([prompt[:256]], dtype=torch.long, device=device)
        std32 = float(model(input_ids=ids, use_cache=False).logits[0].float().std())
    say("  float32 logits std over 256 tokens %.3f" % std32)
    if std32 < 0.5:
        sys.exit("ERROR: logits std %.3f is too small: greedy argmax would be a coin toss" % std32)
    model = w27_to_bf16(model)
    files, n_tensors, st_bytes = w27_save(model, cfg, outdir)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    # Everything below runs on the checkpoint as read back, as our engine reads it.
    m = Qwen3_5ForCausalLM.from_pretrained(outdir, dtype=torch.bfloat16, attn_implementation="eager")
    m = m.to(device).eval()
    say("  reloaded; buffers %s" % {n: dtype_name(b.dtype) for n, b in m.named_buffers()})
    T = len(prompt)
    with CallLog() as log:
        pre, dec, fed = w27_run(m, prompt, device, [T], n_decode=args.decode)
        calls = log.take()
    say("  one-shot prefill %d + %d greedy steps; GDN kernels called (name: lengths) %s" % (T, args.decode, calls))
    if "torch_chunk_gated_delta_rule" not in calls:
        warn("transformers' torch chunked delta rule did not run (a kernel package took the GDN?)")
    say("  logits std %.3f, greedy tokens %s" % (float(pre.std()), fed))
    sha, gbytes = write_golden(os.path.join(outdir, "golden.bin"), prompt, pre, fed, dec)
    say("  golden.bin %d bytes sha256 %s" % (gbytes, sha))

    runs = {}
    p2, d2, _ = w27_run(m, prompt, device, [T], fed=fed)
    runs["repeat one-shot"] = w27_compare(p2, d2, pre, dec)
    del p2, d2
    for first in W27_SPLITS:
        if first >= T:
            continue
        name = "chunked %d+%d" % (first, T - first)
        p2, d2, _ = w27_run(m, prompt, device, [first, T - first], fed=fed)
        runs[name] = w27_compare(p2, d2, pre, dec)
        del p2, d2
    if args.token_run:
        # Not part of floor.json's floor (the chunked runs'): the prefill in the recurrent form, one token a call,
        # is another valid execution, in which every product runs at another shape; golden_check's floor is the
        # larger of the two (on the H100 the chunked floor alone was half of it).
        p2, d2, _ = w27_run(m, prompt, device, [1] * T, fed=fed)
        runs["token by token (info)"] = w27_compare(p2, d2, pre, dec)
        del p2, d2
    say("  transformers against its own one-shot run (prefill rows + teacher-forced decode rows):")
    for name, r in runs.items():
        say("    %-22s %s max|d| %.4g, max rel %.4g (last prefill row %.4g, decode %.4g), mean|d| %.4g, "
            "argmax %d/%d (tie-aware %d)" % (
                name, "bit-identical," if r["bit_identical"] else "", r["max_abs"], r["max_rel"],
                r["last_prefill_max_rel"], r["decode_max_rel"], r["mean_abs"], r["argmax_same_index"], r["rows"],
                r["argmax_tie_aware"]))
    chunked = {k: v for k, v in runs.items() if k.startswith("chunked")}
    if not chunked:
        sys.exit("ERROR: --prompt %d is too short for a chunked run" % T)
    worst = max(v["max_rel"] for v in chunked.values())
    if worst > W27_FLOOR_SANE:
        sys.exit("ERROR: a chunked prefill is %.3g (max rel) from the one-shot run: not bf16 noise, no floor" % worst)
    floor = dict(max_abs=max(v["max_abs"] for v in chunked.values()), max_rel=worst,
                 mean_abs=max(v["mean_abs"] for v in chunked.values()),
                 argmax_flips=max(v["rows"] - v["argmax_same_index"] for v in chunked.values()))
    m_all = margins(torch.cat([pre[-1:], dec]))
    doc = dict(version=1, dtype="bfloat16", device=device,
               gpu=torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else None,
               torch=torch.__version__, transformers=transformers.__version__, small=bool(args.small),
               n_prompt=T, n_decode=len(fed), vocab=V, params=n_params, safetensors=files,
               safetensors_bytes=st_bytes, tensors=n_tensors, golden_sha256=sha, golden_bytes=gbytes,
               greedy=fed, logits_std=float(pre.std()),
               greedy_min_margin=float(m_all.min()), greedy_exact_ties=int((m_all == 0).sum()),
               runs=runs, floor=floor,
               floor_is="the largest of the chunked runs' figures against the one-shot run: the distance between "
                        "two valid executions of transformers' bf16 forward on this device")
    with open(os.path.join(outdir, "floor.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    say("  floor.json: max|d| %.4g, max rel %.4g, mean|d| %.4g, argmax flips %d; greedy top-2 margin min %.4g, "
        "exact ties %d" % (floor["max_abs"], floor["max_rel"], floor["mean_abs"], floor["argmax_flips"],
                           doc["greedy_min_margin"], doc["greedy_exact_ties"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--allow-kernels", action="store_true", help="go on even if fla/causal_conv1d/kernels import")
    ap.add_argument("--width27b", metavar="OUTDIR",
                    help="make the 4-layer checkpoint of 27B width in OUTDIR instead of the fixtures")
    ap.add_argument("--device", default="cpu", help="--width27b: where transformers runs (cpu, cuda)")
    ap.add_argument("--small", action="store_true", help="--width27b: a small width with the same structure")
    ap.add_argument("--prompt", type=int, default=2048, help="--width27b: prompt tokens")
    ap.add_argument("--decode", type=int, default=32, help="--width27b: greedy steps")
    ap.add_argument("--seed", type=int, default=2727, help="--width27b: weight seed")
    ap.add_argument("--no-token-run", dest="token_run", action="store_false",
                    help="--width27b: leave out the token-by-token prefill (recorded, not in the floor)")
    args = ap.parse_args()
    check_environment(args.allow_kernels)
    if args.width27b:
        w27_main(args)
        return

    g = torch.Generator().manual_seed(PROMPT_SEED)
    prompt = torch.randint(0, VOCAB, (N_PROMPT,), generator=g, dtype=torch.long).tolist()
    say("prompt: %d ids, first 8 %s" % (len(prompt), prompt[:8]))

    sums = []
    for i, fx in enumerate(FIXTURES):
        sums.append(make_fixture(fx, args.outdir, prompt, print_names=(i == 0)))

    say("")
    say("=== summary (transformers %s, torch %s)" % (transformers.__version__, torch.__version__))
    for s in sums:
        say("%s: %d tensors, safetensors %d B, logits std %.3f (decode %.3f), first 8 decode tokens %s"
            % (s["name"], s["tensors"], s["safetensors_bytes"], s["logits_std"], s["decode_std"], s["first8"]))
        say("    min top1-top2 margin: decode %.4f, prefill %.4f; exact top ties: decode %d, prefill %d; layer-0 check %s"
            % (s["min_margin_decode"], s["min_margin_prefill"], s["ties_decode"], s["ties_prefill"],
               "ok" if s["layer0_ok"] else "FAILED"))
        say("    golden.bin %d B sha256 %s" % (s["golden_bytes"], s["sha"]))
        if "state_sha" in s:
            say("    state0.bin %d B sha256 %s (S %s, conv %s)"
                % (s["state_bytes"], s["state_sha"], s["state_shapes"][0], s["state_shapes"][1]))


if __name__ == "__main__":
    main()
