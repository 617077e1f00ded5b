#!/usr/bin/env python3
"""Record transformers' intermediates for a golden fixture (bf16_tied by default).

Runs the fixture's checkpoint the way make_golden.py does (CPU, one thread,
eager attention, torch paths for the Gated DeltaNet): the 300-token prefill,
then the 32 decode steps fed with the fixture's tokens. Forward hooks and
wrapped module functions record, per layer, every tensor where the model
rounds (projections, conv + SiLU, beta, g, the delta rule's output, the gated
norm, q/k norms, RoPE, attention, the output gate, the MLP, the residual
stream), the final norm and the logits. Written to OUTDIR as MOORDMP1 files
(tests/engine/golden_probe.c reads them):

    magic "MOORDMP1", then records: name char[64] (NUL padded), ndim u32,
    dims u32[4], data f32[prod(dims)] (bf16 values widened exactly).

Also writes the noise floors: the same checkpoint upcast to fp32 (its logits
and residual stream), and bf16 on a CUDA GPU when one is there, each against
the CPU bf16 reference (argmax agreement), and dumps the source of the
modeling functions that matter to OUTDIR/code.txt.

Usage: python3 probe_golden.py FIXTURE_DIR OUTDIR
"""

import inspect
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

import transformers
import transformers.models.qwen3_5.modeling_qwen3_5 as mq
from transformers import Qwen3_5ForCausalLM

MAGIC = b"MOORDMP1"
MAX_FILE = 15 << 20


def say(*a):
    print(*a, flush=True)


def read_golden(path):
    raw = open(path, "rb").read()
    assert raw[:8] == b"MOORGLD1"
    ver, n_prompt, n_decode, vocab = struct.unpack_from("<4I", raw, 8)
    off = 24
    prompt = np.frombuffer(raw, "<i4", n_prompt, off).tolist()
    off += 4 * n_prompt
    pre = np.frombuffer(raw, "<f4", n_prompt * vocab, off).reshape(n_prompt, vocab)
    off += 4 * n_prompt * vocab
    fed = np.frombuffer(raw, "<i4", n_decode, off).tolist()
    off += 4 * n_decode
    dec = np.frombuffer(raw, "<f4", n_decode * vocab, off).reshape(n_decode, vocab)
    return prompt, pre, fed, dec


class Writer:
    """Records into files of at most MAX_FILE bytes: PREFIX_0.bin, _1, ..."""

    def __init__(self, outdir, prefix):
        self.outdir, self.prefix, self.n, self.f, self.size = outdir, prefix, 0, None, 0

    def put(self, name, arr):
        a = np.ascontiguousarray(np.asarray(arr, dtype=np.float32))
        dims = list(a.shape)[:4]
        assert a.ndim <= 4, (name, a.shape)
        rec = name.encode()[:63].ljust(64, b"\0") + struct.pack("<5I", a.ndim, *(dims + [0] * (4 - len(dims))))
        body = a.astype("<f4").tobytes()
        if self.f is None or self.size + len(rec) + len(body) > MAX_FILE:
            if self.f:
                self.f.close()
            self.f = open(os.path.join(self.outdir, "%s_%d.bin" % (self.prefix, self.n)), "wb")
            self.n += 1
            self.f.write(MAGIC)
            self.size = 8
        self.f.write(rec)
        self.f.write(body)
        self.size += len(rec) + len(body)

    def close(self):
        if self.f:
            self.f.close()


def f32(t):
    return t.detach().float().cpu().numpy()


def rows(t, T):
    """[B=1, T, ...] or [T, ...] to [T, -1]."""
    a = f32(t)
    return a.reshape(T, -1)


class Recorder:
    """Hooks on one model; rec[phase][name] = list of [T, -1] arrays."""

    def __init__(self, model, T_of_call):
        self.model = model
        self.layer = -1
        self.phase = "p"
        self.rec = {"p": {}, "d": {}}
        self.hooks = []
        self.orig = {}
        self.T = None

    def put(self, name, arr2d):
        self.rec[self.phase].setdefault(name, []).append(arr2d)

    def L(self, name):
        return "L%d.%s" % (self.layer, name)

    def install(self):
        m = self.model.model
        rec = self

        def layer_pre(idx):
            def f(mod, args, kwargs):
                rec.layer = idx
                hs = kwargs.get("hidden_states", args[0] if args else None)
                rec.T = hs.shape[1]
                rec.put(rec.L("x_in"), rows(hs, rec.T))
            return f

        def layer_post(mod, args, kwargs, out):
            o = out[0] if isinstance(out, tuple) else out
            rec.put(rec.L("x_out"), rows(o, rec.T))

        def out_hook(name):
            def f(mod, args, out):
                o = out[0] if isinstance(out, tuple) else out
                rec.put(rec.L(name), rows(o, rec.T))
            return f

        def in_hook(name):
            def f(mod, args):
                rec.put(rec.L(name), rows(args[0], rec.T))
            return f

        for i, lay in enumerate(m.layers):
            H = self.hooks
            H.append(lay.register_forward_pre_hook(layer_pre(i), with_kwargs=True))
            H.append(lay.register_forward_hook(layer_post, with_kwargs=True))
            H.append(lay.input_layernorm.register_forward_hook(out_hook("xn1")))
            H.append(lay.post_attention_layernorm.register_forward_pre_hook(in_hook("h1")))
            H.append(lay.post_attention_layernorm.register_forward_hook(out_hook("xn2")))
            H.append(lay.mlp.gate_proj.register_forward_hook(out_hook("gate")))
            H.append(lay.mlp.up_proj.register_forward_hook(out_hook("up")))
            H.append(lay.mlp.down_proj.register_forward_pre_hook(in_hook("act")))
            H.append(lay.mlp.down_proj.register_forward_hook(out_hook("mlp_out")))
            if hasattr(lay, "linear_attn"):
                la = lay.linear_attn
                H.append(la.in_proj_qkv.register_forward_hook(out_hook("qkv")))
                H.append(la.in_proj_z.register_forward_hook(out_hook("z")))
                H.append(la.in_proj_b.register_forward_hook(out_hook("b")))
                H.append(la.in_proj_a.register_forward_hook(out_hook("a")))
                H.append(la.norm.register_forward_pre_hook(in_hook("core")))
                H.append(la.norm.register_forward_hook(out_hook("gnorm")))
                H.append(la.out_proj.register_forward_hook(out_hook("mix_out")))
            else:
                sa = lay.self_attn
                H.append(sa.q_proj.register_forward_hook(out_hook("qg")))
                H.append(sa.k_proj.register_forward_hook(out_hook("k")))
                H.append(sa.v_proj.register_forward_hook(out_hook("v")))
                H.append(sa.q_norm.register_forward_hook(out_hook("qn")))
                H.append(sa.k_norm.register_forward_hook(out_hook("kn")))
                H.append(sa.o_proj.register_forward_pre_hook(in_hook("gated")))
                H.append(sa.o_proj.register_forward_hook(out_hook("mix_out")))
        H = self.hooks

        def final_hook(mod, args, out):
            rec.put("final", rows(out, rec.T))

        H.append(m.norm.register_forward_hook(final_hook))

        def rot_hook(mod, args, out):
            cos, sin = out
            rec.put("cos", rows(cos, cos.shape[1]))
            rec.put("sin", rows(sin, sin.shape[1]))

        H.append(m.rotary_emb.register_forward_hook(rot_hook))

        def wrap(name, fn):
            self.orig[name] = fn

            def w(*a, **k):
                out = fn(*a, **k)
                if name == "causal_conv1d_fn":
                    # out [B, C, T'] (T' = T, or more with previous states)
                    o = out[:, :, -rec.T:]
                    rec.put(rec.L("conv"), f32(o[0].transpose(0, 1)))
                elif name == "causal_conv1d_update":
                    rec.put(rec.L("conv"), f32(out[0].transpose(0, 1)))
                elif name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"):
                    g = k.get("g")
                    beta = k.get("beta")
                    rec.put(rec.L("g"), rows(g, rec.T))
                    rec.put(rec.L("beta"), rows(beta, rec.T))
                    rec.put(rec.L("core_raw"), rows(out[0], rec.T))
                elif name == "apply_rotary_pos_emb":
                    qe, ke = out  # [B, H, T, D]
                    rec.put(rec.L("qr"), f32(qe[0].transpose(0, 1)).reshape(rec.T, -1))
                    rec.put(rec.L("kr"), f32(ke[0].transpose(0, 1)).reshape(rec.T, -1))
                elif name == "eager_attention_forward":
                    ao, aw = out  # [B, T, H, D], [B, H, T, S]
                    rec.put(rec.L("att"), rows(ao, rec.T))
                    if rec.phase == "p":
                        rec.put(rec.L("probs"), f32(aw[0]).reshape(-1, aw.shape[-1]))
                return out
            setattr(mq, name, w)

        for n in ("causal_conv1d_fn", "causal_conv1d_update", "torch_chunk_gated_delta_rule",
                  "torch_recurrent_gated_delta_rule", "apply_rotary_pos_emb", "eager_attention_forward"):
            wrap(n, getattr(mq, n))

    def remove(self):
        for h in self.hooks:
            h.remove()
        for n, fn in self.orig.items():
            setattr(mq, n, fn)


def run(model, prompt, fed, dev="cpu"):
    """Prefill once, then the decode steps fed with `fed` (teacher forcing). Logits as f32 numpy."""
    T = len(prompt)
    with torch.no_grad():
        ids = torch.tensor([prompt], dtype=torch.long, device=dev)
        out = model(input_ids=ids, position_ids=torch.arange(T, dtype=torch.long, device=dev)[None], use_cache=True)
        cache = out.past_key_values
        pre = f32(out.logits[0])
        rows_ = []
        for i, tok in enumerate(fed):
            out = model(input_ids=torch.tensor([[tok]], dtype=torch.long, device=dev),
                        position_ids=torch.tensor([[T + i]], dtype=torch.long, device=dev),
                        past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            rows_.append(f32(out.logits[0, -1]))
    return pre, np.stack(rows_)


def argmax_agree(a_pre, a_dec, r_pre, r_dec, round_a):
    """Rows where argmax(a) == argmax(r); a rounded to bf16 first when round_a."""
    def am(x, rnd):
        if rnd:
            x = torch.from_numpy(np.ascontiguousarray(x)).bfloat16().float().numpy()
        return np.argmax(x, axis=-1)
    same_p = am(a_pre, round_a) == np.argmax(r_pre, -1)
    same_d = am(a_dec, round_a) == np.argmax(r_dec, -1)
    n = len(same_p) + len(same_d)
    s = int(same_p.sum() + same_d.sum())
    mr = max(float(np.abs(a_pre - r_pre).max() / np.abs(r_pre).max()),
             float(np.abs(a_dec - r_dec).max() / np.abs(r_dec).max()))
    return s, n, mr


def primitives():
    """How torch's bf16 CPU primitives round: the fraction of outputs that differ from round(exact)."""
    g = torch.Generator().manual_seed(1)
    rnd = lambda t: t.to(torch.bfloat16)  # noqa: E731
    b = lambda *s: torch.randn(*s, generator=g).to(torch.bfloat16)  # noqa: E731
    out = []

    def rep(name, got, exact):
        d = (got.float() != rnd(exact).float())
        out.append("%-40s differ %.5f of %d" % (name, float(d.float().mean()), d.numel()))

    x, W = b(300, 64), b(256, 64) * 0.125
    rep("linear bf16 [300,64]x[256,64]^T", F.linear(x, W), x.double() @ W.double().T)
    x2, W2 = b(300, 128), b(64, 128) * 0.1
    rep("linear bf16 K=128", F.linear(x2, W2), x2.double() @ W2.double().T)
    x1 = b(1, 64)
    rep("linear bf16 one row", F.linear(x1, W), x1.double() @ W.double().T)
    c = b(1, 256, 300)
    wc = b(256, 1, 4)
    ex = F.conv1d(c.double(), wc.double(), padding=3, groups=256)[:, :, :300]
    got = F.conv1d(c, wc, padding=3, groups=256)[:, :, :300]
    rep("conv1d depthwise bf16", got, ex)
    got32 = F.conv1d(c.float(), wc.float(), padding=3, groups=256)[:, :, :300]
    rep("conv1d depthwise bf16 vs fp32 conv", got, got32.double())
    y = b(300, 256) * 3
    rep("silu bf16", F.silu(y), F.silu(y.double()))
    rep("sigmoid bf16", torch.sigmoid(y), torch.sigmoid(y.double()))
    rep("bf16 * 0.17677669529663687", y * 0.17677669529663687, y.double() * 0.17677669529663687)
    q, k = b(1, 4, 300, 32), b(1, 4, 300, 32)
    rep("matmul bf16 4D q k^T", torch.matmul(q, k.transpose(2, 3)), torch.matmul(q.double(), k.double().transpose(2, 3)))
    p = torch.softmax(b(1, 4, 300, 300).float(), -1).to(torch.bfloat16)
    v = b(1, 4, 300, 32)
    rep("matmul bf16 4D p v", torch.matmul(p, v), torch.matmul(p.double(), v.double()))
    s32 = b(4, 300, 300).float()
    sm = torch.softmax(s32, -1)
    e = torch.exp(s32.double() - s32.double().max(-1, keepdim=True).values)
    out.append("%-40s max rel vs f64 %.3g" % ("softmax f32", float(((sm.double() - e / e.sum(-1, keepdim=True)).abs()
                                                                     / (e / e.sum(-1, keepdim=True))).max())))
    xs = b(300, 64).float()
    r1 = torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + 1e-6)
    r2 = 1.0 / torch.sqrt(xs.pow(2).mean(-1, keepdim=True) + 1e-6)
    out.append("%-40s differ %.5f" % ("rsqrt vs 1/sqrt (fp32)", float((r1 != r2).float().mean())))
    a, c2 = b(300, 64), b(300, 64)
    rep("bf16 + bf16", a + c2, a.double() + c2.double())
    return out


def main():
    fix, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    say("torch %s transformers %s numpy %s" % (torch.__version__, transformers.__version__, np.__version__))
    try:
        bf = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    except Exception as e:
        bf = repr(e)
    say("mkldnn %s bf16-capable %s; fla %s causal_conv1d %s" % (
        torch.backends.mkldnn.is_available(), bf, transformers.utils.is_flash_linear_attention_available(),
        transformers.utils.is_causal_conv1d_available()))
    with open(os.path.join(outdir, "code.txt"), "w") as f:
        for n in ("Qwen3_5RMSNorm", "Qwen3_5RMSNormGated", "causal_conv1d_fn", "causal_conv1d_update", "l2norm",
                  "torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "Qwen3_5GatedDeltaNet",
                  "rotate_half", "apply_rotary_pos_emb", "eager_attention_forward", "Qwen3_5Attention",
                  "Qwen3_5MLP", "Qwen3_5DecoderLayer", "Qwen3_5TextRotaryEmbedding", "Qwen3_5TextModel",
                  "Qwen3_5ForCausalLM"):
            obj = getattr(mq, n, None)
            f.write("\n######## %s\n" % n)
            try:
                f.write(inspect.getsource(obj))
            except Exception as e:
                f.write("(no source: %r)\n" % e)
        f.write("\n######## torch config\n" + torch.__config__.show())
        f.write("\n######## parallel\n" + torch.__config__.parallel_info())
        try:
            f.write("\n######## cpu\n" + open("/proc/cpuinfo").read().split("\n\n")[0])
        except Exception:
            pass

    for line in primitives():
        say("prim: " + line)
    prompt, g_pre, fed, g_dec = read_golden(os.path.join(fix, "golden.bin"))
    model = Qwen3_5ForCausalLM.from_pretrained(fix, dtype=torch.bfloat16, attn_implementation="eager").eval()
    say("buffers %s" % {n: str(b.dtype) for n, b in model.named_buffers()})
    rec = Recorder(model, None)
    rec.install()
    T = len(prompt)
    with torch.no_grad():
        ids = torch.tensor([prompt], dtype=torch.long)
        rec.phase = "p"
        out = model(input_ids=ids, position_ids=torch.arange(T, dtype=torch.long)[None], use_cache=True)
        cache = out.past_key_values
        pre = f32(out.logits[0])
        rec.rec["p"]["logits"] = [pre]
        rec.phase = "d"
        drows = []
        for i, tok in enumerate(fed):
            out = model(input_ids=torch.tensor([[tok]], dtype=torch.long),
                        position_ids=torch.tensor([[T + i]], dtype=torch.long),
                        past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            drows.append(f32(out.logits[0, -1]))
        dec = np.stack(drows)
        rec.rec["d"]["logits"] = [dec]
    rec.remove()
    say("reproduces golden.bin: prefill %s (max|d| %.3g), decode %s (max|d| %.3g)" % (
        np.array_equal(pre, g_pre), float(np.abs(pre - g_pre).max()),
        np.array_equal(dec, g_dec), float(np.abs(dec - g_dec).max())))
    w = Writer(outdir, "ref")
    w.put("inv_freq", f32(model.model.rotary_emb.inv_freq))
    for ph in ("p", "d"):
        for name, lst in rec.rec[ph].items():
            w.put(ph + "." + name, np.concatenate(lst, axis=0))
    w.close()
    say("ref names: %d" % (len(rec.rec["p"]) + len(rec.rec["d"])))

    # Noise floors. The reference argmax is golden's (bf16 logits).
    fl = Writer(outdir, "floor")
    lines = []

    def floor(tag, p, d, round_a):
        s, n, mr = argmax_agree(p, d, g_pre, g_dec, round_a)
        lines.append("%s vs CPU bf16 reference: argmax %d/%d (%.2f%%), max rel %.3g" % (tag, s, n, 100.0 * s / n, mr))
        say(lines[-1])
        fl.put(tag + ".p", p)
        fl.put(tag + ".d", d)

    # bf16, several threads (oneDNN may block differently)
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    p, d = run(model, prompt, fed)
    floor("cpu_bf16_mt", p, d, False)
    torch.set_num_threads(1)

    # fp32 upcast (RoPE buffers are fp32 already)
    m32 = Qwen3_5ForCausalLM.from_pretrained(fix, dtype=torch.float32, attn_implementation="eager").eval()
    r32 = Recorder(m32, None)
    r32.install()
    r32.phase = "p"
    p, d = run(m32, prompt, fed)
    r32.remove()
    floor("cpu_f32", p, d, False)
    for name, lst in r32.rec["p"].items():
        if name.endswith("x_out") or name == "final":
            fl.put("f32.p." + name, np.concatenate(lst, axis=0))
    # float64 upcast: the function itself
    m64 = Qwen3_5ForCausalLM.from_pretrained(fix, dtype=torch.float64, attn_implementation="eager").eval()
    for n_, b_ in m64.named_buffers():
        if b_.dtype == torch.float32:
            b_.data = b_.data.double()
    try:
        p, d = run(m64, prompt, fed)
        floor("cpu_f64", p, d, False)
    except Exception as e:
        say("f64 run failed: %r" % e)

    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        mg = Qwen3_5ForCausalLM.from_pretrained(fix, dtype=torch.bfloat16, attn_implementation="eager").eval().cuda()
        p, d = run(mg, prompt, fed, "cuda")
        floor("gpu_bf16", p, d, False)
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
        p, d = run(mg, prompt, fed, "cuda")
        floor("gpu_bf16_rr", p, d, False)
    fl.close()
    with open(os.path.join(outdir, "floors.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
