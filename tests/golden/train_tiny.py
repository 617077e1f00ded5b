#!/usr/bin/env python3
"""Train a small Qwen3.5 text model on text found on this machine, for the codec's figures.

The codec of issue 11 (byte planes + zstd, cached/codec.c) is measured on KV rows and recurrent states. Every model
we have has random weights, whose activations are near-Gaussian with incompressible bf16 mantissas; a trained model's
are not. No trained checkpoint can be downloaded, so this script trains one: models/tiny's shape (hidden 256, 8 layers
L L L F L L L F, vocab 151,669, tied embedding) initialised as transformers does, on the .py/.md/.rst/.txt files of
Python's standard library, site-packages and /usr/share/doc and this repository's sources (no network), for a few
minutes on a GPU, with AdamW in bf16 autocast over fp32 weights.

Usage:  python3 train_tiny.py OUTDIR [--minutes 3] [--seed 1] [--device cuda]
        python3 train_tiny.py --check-names      (no torch: the expected tensors against models/tiny's header)

OUTDIR gets config.json (models/tiny's), model.safetensors (models/tiny's names and dtypes: bf16, A_log, dt_bias and
linear_attn.norm.weight fp32), tokenizer.json, tokenizer_config.json and bench_ids.i32: held-out text's token ids
(never trained on), little-endian int32, for tests/bench/bench_spill's part 1. Needs python3, torch, transformers 5.17,
safetensors, numpy and tokenizers (the GPU host; not the CPU machine). tests/golden/README.md says more.
"""

import argparse
import hashlib
import importlib.util
import json
import math
import os
import random
import shutil
import struct
import sys
import sysconfig
import time

from qwen35_names import LIN, expected_shapes  # this folder

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# Qwen3_5TextConfig's arguments taken from the template's config.json (the rest are transformers' defaults).
CFG_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "layer_types",
            "num_attention_heads", "num_key_value_heads", "head_dim", "linear_num_key_heads",
            "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
            "hidden_act", "rms_norm_eps", "rope_parameters", "tie_word_embeddings", "max_position_embeddings")
# Kept in fp32 in the checkpoint, as models/tiny (and the released Qwen3.5 checkpoints) hold them.
F32_SUFFIXES = (".linear_attn.A_log", ".linear_attn.dt_bias", ".linear_attn.norm.weight")
TEXT_SUFFIXES = (".py", ".md", ".rst", ".txt", ".c", ".h")
MIN_BENCH_IDS = 8192


def say(*a):
    print(*a, flush=True)


def die(msg):
    sys.exit("train_tiny.py: ERROR: " + msg)


# ---------------------------------------------------------------------------
# Names, shapes and dtypes (stdlib only)


def expected_tensors(cj):
    """name -> (shape, dtype) of the checkpoint our loader reads, from a config.json dict (qwen35_names.py, plus the
    dtypes models/tiny holds)."""
    if len(cj["layer_types"]) != cj["num_hidden_layers"]:
        die("config: %d layer_types for %d layers" % (len(cj["layer_types"]), cj["num_hidden_layers"]))
    exp = expected_shapes(cj.__getitem__)
    return {k: (s, "F32" if k.endswith(F32_SUFFIXES) else "BF16") for k, s in exp.items()}


def read_header(path):
    """A safetensors file's tensors as name -> (shape, dtype): an 8-byte little-endian length, then JSON."""
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            h = json.loads(f.read(n))
    except (OSError, ValueError, struct.error) as e:
        die("cannot read the safetensors header of %s: %s" % (path, e))
    return {k: (tuple(v["shape"]), v["dtype"]) for k, v in h.items() if k != "__metadata__"}


def compare(exp, got, what):
    """Fails with the differences between two name -> (shape, dtype) maps."""
    missing, extra = sorted(set(exp) - set(got)), sorted(set(got) - set(exp))
    wrong = ["%s: %s, expected %s" % (k, got[k], exp[k]) for k in sorted(set(exp) & set(got)) if got[k] != exp[k]]
    if missing or extra or wrong:
        die("%s: missing %s, extra %s, wrong %s" % (what, missing, extra, wrong))


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die("cannot read %s: %s" % (path, e))


def check_names(like):
    cj = load_json(os.path.join(like, "config.json"))
    exp = expected_tensors(cj)
    compare(exp, read_header(os.path.join(like, "model.safetensors")), "%s/model.safetensors" % like)
    say("ok: the %d expected tensors (names, shapes, dtypes) are those of %s/model.safetensors" % (len(exp), like))


# ---------------------------------------------------------------------------
# The corpus: text files on this machine, no network


def corpus_files():
    """(source, path) of every candidate file, sorted: the standard library's .py, site-packages' and /usr/share/doc's
    text files, this repository's sources and notes."""
    stdlib = sysconfig.get_paths()["stdlib"]
    site = sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")} |
                  set(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))
    roots = [("stdlib", stdlib, (".py",))] + [("site", s, TEXT_SUFFIXES) for s in site] + \
            [("doc", "/usr/share/doc", (".txt", ".md", ".rst")), ("repo", ROOT, (".md", ".c", ".h", ".py", ".cu"))]
    out, seen = [], set()
    for src, top, suffixes in roots:
        if not os.path.isdir(top):
            say("  (no %s)" % top)
            continue
        for d, dirs, files in os.walk(top):
            # not the site-packages inside the stdlib (walked as "site"), not build outputs, hidden or model folders
            dirs[:] = sorted(x for x in dirs if not x.startswith((".", "build", "__pycache__", "node_modules"))
                             and not (src == "stdlib" and x in ("site-packages", "dist-packages"))
                             and not (src == "repo" and x == "models"))
            for fn in sorted(files):
                p = os.path.join(d, fn)
                if fn.endswith(suffixes) and p not in seen:
                    seen.add(p)
                    out.append((src, p))
    return out


def gather_texts(seed, max_bytes):
    """Shuffled (fixed seed) files read as UTF-8, without duplicates, up to max_bytes in all: [(source, text)]."""
    files = corpus_files()
    random.Random(seed).shuffle(files)
    texts, hashes, total, per = [], set(), 0, {}
    for src, p in files:
        if total >= max_bytes:
            break
        try:
            if not 200 <= os.path.getsize(p) <= (512 << 10):
                continue
            with open(p, "rb") as f:
                b = f.read()
            t = b.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        h = hashlib.sha1(b).digest()
        if h in hashes:
            continue
        hashes.add(h)
        texts.append((src, t))
        total += len(b)
        per[src] = per.get(src, 0) + len(b)
    say("  %d candidate files, %d read (%.1f MB): %s" % (
        len(files), len(texts), total / 1e6, ", ".join("%s %.1f MB" % (k, v / 1e6) for k, v in sorted(per.items()))))
    return texts


def tokenize(tok, texts, eos, np):
    """Each text's ids then eos, concatenated: int32 numpy arrays, one a text."""
    out = []
    for i in range(0, len(texts), 512):
        for e in tok.encode_batch([t for _, t in texts[i:i + 512]], add_special_tokens=False):
            out.append(np.array(e.ids + [eos], dtype=np.int32))
    return out


# ---------------------------------------------------------------------------
# Training (torch, on the GPU host)


def kernel_packages():
    """Optional kernel packages that would take the GDN off transformers' torch code (make_golden.py's test)."""
    found = []
    for pkg in ("fla", "causal_conv1d", "kernels"):
        spec = importlib.util.find_spec(pkg)
        if spec is not None and spec.origin not in (None, "namespace"):  # moor's kernels/ is a namespace package
            found.append(pkg)
    return found


def lr_at(step, frac, peak, warmup):
    """Linear warmup over `warmup` steps, then a cosine over the time budget down to a tenth."""
    return peak * min(1.0, (step + 1) / warmup) * (0.1 + 0.45 * (1.0 + math.cos(math.pi * min(frac, 1.0))))


def train(args):
    for mod in ("numpy", "torch", "transformers", "safetensors", "tokenizers"):
        if importlib.util.find_spec(mod) is None:
            die("python module %s is missing (this script runs on the GPU host)" % mod)
    import numpy as np
    import torch
    import torch.nn.functional as F
    import transformers
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    try:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    except ImportError:  # older layouts
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

    t_start = time.time()
    say("python %s, torch %s, transformers %s, numpy %s" % (
        sys.version.split()[0], torch.__version__, transformers.__version__, np.__version__))
    if kernel_packages():
        say("note: %s importable: transformers may run the GDN through them" % ", ".join(kernel_packages()))
    dev = args.device
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            die("--device %s but torch sees no CUDA device" % dev)
        say("device %s: %s" % (dev, torch.cuda.get_device_name(torch.device(dev))))
        torch.backends.cuda.matmul.allow_tf32 = True
    if args.hold < MIN_BENCH_IDS:
        die("--hold %d: bench_spill reads up to %d ids" % (args.hold, MIN_BENCH_IDS))

    # the template: models/tiny's config and tokenizer
    like = args.like
    for fn in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if not os.path.isfile(os.path.join(like, fn)):
            die("%s/%s is missing (deploy/setup writes models/tiny)" % (like, fn))
    cj = load_json(os.path.join(like, "config.json"))
    for k in CFG_KEYS:
        if k not in cj:
            die("%s/config.json has no %s" % (like, k))
    exp = expected_tensors(cj)
    V = cj["vocab_size"]
    tok = Tokenizer.from_file(os.path.join(like, "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    if eos is None:
        die("the tokenizer has no <|endoftext|>")
    if tok.get_vocab_size(with_added_tokens=True) > V:
        die("the tokenizer has %d tokens, the model's vocab %d" % (tok.get_vocab_size(with_added_tokens=True), V))

    # the corpus: the first files of the shuffle are held out (bench_ids.i32), the rest trained on
    t0 = time.time()
    say("corpus (seed %d, up to %d MB):" % (args.seed, args.max_mb))
    texts = gather_texts(args.seed, args.max_mb << 20)
    docs = tokenize(tok, texts, eos, np)
    n_hold, hold = 0, []
    while n_hold < args.hold and len(hold) < len(docs):
        hold.append(docs[len(hold)])
        n_hold += len(hold[-1])
    bench = np.concatenate(hold)[:args.hold] if hold else np.zeros(0, np.int32)
    train_ids = np.concatenate(docs[len(hold):]) if len(docs) > len(hold) else np.zeros(0, np.int32)
    say("  %d held-out tokens from %d files, %d training tokens (%d distinct ids), %.1f s" % (
        len(bench), len(hold), len(train_ids), len(np.unique(train_ids)), time.time() - t0))
    if len(bench) < args.hold:
        die("only %d held-out tokens" % len(bench))
    if len(train_ids) < args.min_tokens:
        die("only %d training tokens (at least %d wanted): too little text on this machine" % (
            len(train_ids), args.min_tokens))
    if int(bench.max()) >= V or int(train_ids.max()) >= V or int(min(bench.min(), train_ids.min())) < 0:
        die("a token id outside [0, %d)" % V)

    # the model, initialised as transformers does (post_init), fp32 weights on the device
    kw = {k: json.loads(json.dumps(cj[k])) for k in CFG_KEYS}
    kw.update(attention_bias=False, attention_dropout=0.0)
    rp = kw["rope_parameters"]
    if "mrope_section" not in rp:
        # as make_golden.py's fixtures and the 27B's config: sections over the rotary half (for text, all three
        # position rows are equal and the sections change nothing; config.json stays models/tiny's)
        half = int(cj["head_dim"] * rp.get("partial_rotary_factor", 1.0)) // 2
        s0 = -(-half // 3)
        s1 = -(-(half - s0) // 2)
        rp.update(mrope_section=[s0, s1, half - s0 - s1], mrope_interleaved=True)
    cfg = Qwen3_5TextConfig(**kw)
    if hasattr(cfg, "mtp_num_hidden_layers"):
        cfg.mtp_num_hidden_layers = 0
    cfg._attn_implementation = "sdpa"
    for k in ("vocab_size", "hidden_size", "intermediate_size", "head_dim", "linear_num_value_heads",
              "tie_word_embeddings", "layer_types"):
        if getattr(cfg, k) != cj[k]:
            die("the config's %s is %r, config.json's %r" % (k, getattr(cfg, k), cj[k]))
    torch.manual_seed(args.seed)
    with torch.device(dev):
        model = Qwen3_5ForCausalLM(cfg)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("sdpa")
    if cfg.tie_word_embeddings and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        model.tie_weights()
        if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
            die("tie_word_embeddings is set but lm_head is not tied")
    params = dict(model.named_parameters())  # a tied lm_head is not listed (the embedding's object)
    compare({k: s for k, (s, _) in exp.items()}, {k: tuple(p.shape) for k, p in params.items()},
            "the model's parameters")
    n_params = sum(p.numel() for p in params.values())
    say("model: %s, %d parameters (%d in the embedding), %s; init std: embedding %.4f (initializer_range %g)" % (
        " ".join("L" if t == LIN else "F" for t in cj["layer_types"]), n_params,
        model.model.embed_tokens.weight.numel(), cfg._attn_implementation,
        float(model.model.embed_tokens.weight.std()), getattr(cfg, "initializer_range", float("nan"))))

    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.1), dict(params=no_decay, weight_decay=0.0)],
                            lr=args.lr, betas=(0.9, 0.95), fused=dev.startswith("cuda"))
    data = torch.from_numpy(train_ids).to(dev)
    g = torch.Generator(device=dev).manual_seed(args.seed)
    S, B = args.seq, args.batch
    ar = torch.arange(S + 1, device=dev)

    def step_loss(b):
        starts = torch.randint(0, len(train_ids) - S - 1, (b, 1), generator=g, device=dev)
        chunk = data[starts + ar].long()
        with torch.autocast(device_type=torch.device(dev).type, dtype=torch.bfloat16):
            logits = model(input_ids=chunk[:, :-1], use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, V), chunk[:, 1:].reshape(-1))

    # the first step finds a batch that fits: halved on running out of memory
    model.train()
    while True:
        try:
            loss = step_loss(B)
            loss.backward()
            break
        except torch.cuda.OutOfMemoryError:
            pass
        # out of the except block, so that the traceback's frames no longer hold the step's tensors
        loss = None
        opt.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        if B == 1:
            die("out of memory at batch 1 of %d tokens" % S)
        B //= 2
        say("  out of memory: batch %d" % B)
    first = float(loss)
    say("training %.1f min: batch %d x %d tokens, AdamW lr %g (warmup %d steps, cosine to a tenth), bf16 autocast; "
        "ln(vocab) = %.2f; setup took %.0f s" % (args.minutes, B, S, args.lr, args.warmup, math.log(V),
                                                 time.time() - t_start))
    say("  step %5d  loss %.3f (the first)" % (0, first))
    t_train = time.time()
    t_end = t_train + args.minutes * 60.0
    step, t_print, win, win_n, last = 0, t_train, torch.zeros((), device=dev), 0, first
    while True:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        lr = lr_at(step, (time.time() - t_train) / (t_end - t_train), args.lr, args.warmup)
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        now = time.time()
        if now - t_print >= 10.0 or now >= t_end:
            last = float(win / max(win_n, 1)) if win_n else last
            say("  step %5d  loss %.3f  lr %.2e  %.0f s  %.0f tok/s" % (
                step, last, lr, now - t_train, step * B * S / (now - t_train)))
            t_print, win, win_n = now, torch.zeros((), device=dev), 0
        if now >= t_end:
            break
        loss = step_loss(B)
        loss.backward()
        win += loss.detach()
        win_n += 1
    say("loss: first %.3f, last %.3f (ln(vocab) %.2f), %d steps, %d tokens" % (
        first, last, math.log(V), step, step * B * S))

    # the held-out text, never trained on: the loss there, in the prompt bench_spill prefills
    model.eval()
    with torch.no_grad(), torch.autocast(device_type=torch.device(dev).type, dtype=torch.bfloat16):
        x = torch.from_numpy(bench[:MIN_BENCH_IDS].astype(np.int64)).to(dev)[None]
        logits = model(input_ids=x, use_cache=False).logits
        held = float(F.cross_entropy(logits.float()[0, :-1], x[0, 1:]))
    say("held-out loss over %d tokens: %.3f" % (x.shape[1], held))

    # the checkpoint: models/tiny's config.json, names and dtypes
    out = args.outdir
    os.makedirs(out, exist_ok=True)
    for stale in ("model.safetensors.index.json", "generation_config.json"):
        if os.path.exists(os.path.join(out, stale)):
            os.remove(os.path.join(out, stale))
    tensors = {}
    for k, p in params.items():
        dt = torch.float32 if exp[k][1] == "F32" else torch.bfloat16
        tensors[k] = p.detach().to(dt).contiguous().cpu()
    st = os.path.join(out, "model.safetensors")
    save_file(tensors, st, metadata={"format": "pt"})
    compare(exp, read_header(st), st)
    shutil.copyfile(os.path.join(like, "config.json"), os.path.join(out, "config.json"))
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(like, fn), os.path.join(out, fn))
    bench.astype("<i4").tofile(os.path.join(out, "bench_ids.i32"))
    say("wrote %s: config.json, model.safetensors (%d tensors, %d bytes), tokenizer files, bench_ids.i32 (%d ids); "
        "%.0f s in all" % (out, len(tensors), os.path.getsize(st), len(bench), time.time() - t_start))
    if not last < args.max_loss:
        die("the loss fell only to %.3f (>= %.1f): the model did not learn; its rows would not be a trained "
            "model's" % (last, args.max_loss))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--minutes", type=float, default=3.0, help="training time (the setup and saving are extra)")
    ap.add_argument("--seed", type=int, default=1, help="the shuffle of the files, the init and the batches")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--like", default=os.path.join(ROOT, "models", "tiny"),
                    help="the template: its config.json (the shape) and tokenizer")
    ap.add_argument("--check-names", action="store_true",
                    help="compare the expected tensors with --like's model.safetensors header, no torch, and exit")
    ap.add_argument("--seq", type=int, default=1024, help="tokens a sequence")
    ap.add_argument("--batch", type=int, default=16, help="sequences a step (halved while it runs out of memory)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50, help="steps")
    ap.add_argument("--hold", type=int, default=16384, help="held-out tokens written to bench_ids.i32")
    ap.add_argument("--max-mb", type=int, default=96, help="text read, MiB")
    ap.add_argument("--min-tokens", type=int, default=2_000_000, help="fewer training tokens is an error")
    ap.add_argument("--max-loss", type=float, default=7.0, help="a last loss not below this is an error")
    args = ap.parse_args()
    if args.check_names:
        check_names(args.like)
        return
    if not args.outdir:
        ap.error("OUTDIR is required")
    train(args)


if __name__ == "__main__":
    main()
