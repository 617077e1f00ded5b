#!/usr/bin/env python3
"""More noise floors for a bf16 golden fixture: transformers' own bf16 forward
run in other valid ways (other matmul kernels, the prefill in chunks, token by
token, on a GPU), each against the CPU reference (golden.bin).

Usage: python3 floors_golden.py FIXTURE_DIR   (prints one line per run)"""
import os, sys, struct
import numpy as np
import torch
from transformers import Qwen3_5ForCausalLM

def read_golden(path):
    raw = open(path, "rb").read()
    ver, n_prompt, n_decode, vocab = struct.unpack_from("<4I", raw, 8)
    off = 24
    prompt = np.frombuffer(raw, "<i4", n_prompt, off).tolist(); off += 4 * n_prompt
    pre = np.frombuffer(raw, "<f4", n_prompt * vocab, off).reshape(n_prompt, vocab); off += 4 * n_prompt * vocab
    fed = np.frombuffer(raw, "<i4", n_decode, off).tolist(); off += 4 * n_decode
    dec = np.frombuffer(raw, "<f4", n_decode * vocab, off).reshape(n_decode, vocab)
    return prompt, pre, fed, dec

def run(model, prompt, fed, dev, chunks):
    T = len(prompt)
    with torch.no_grad():
        cache, rows, pos = None, [], 0
        for c in chunks:
            ids = torch.tensor([prompt[pos:pos + c]], dtype=torch.long, device=dev)
            out = model(input_ids=ids, position_ids=torch.arange(pos, pos + c, dtype=torch.long, device=dev)[None],
                        past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            rows.append(out.logits[0].float().cpu().numpy())
            pos += c
        pre = np.concatenate(rows)
        d = []
        for i, tok in enumerate(fed):
            out = model(input_ids=torch.tensor([[tok]], dtype=torch.long, device=dev),
                        position_ids=torch.tensor([[T + i]], dtype=torch.long, device=dev),
                        past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            d.append(out.logits[0, -1].float().cpu().numpy())
    return pre, np.stack(d)

def main():
    fix = sys.argv[1]
    torch.set_num_threads(1)
    prompt, gp, fed, gd = read_golden(os.path.join(fix, "golden.bin"))
    T = len(prompt)
    ref_p, ref_d = np.argmax(gp, -1), np.argmax(gd, -1)
    # a pick agrees when it is the reference's argmax (strict), or one of
    # its argmaxes: exactly tied with it in the reference's bf16 logits
    # (torch breaks a tie to the lowest index; either token is greedy)
    def agree(x, g, ref):
        pick = np.argmax(x, -1)
        strict = int((pick == ref).sum())
        tied = int((g[np.arange(len(pick)), pick] == g.max(-1)).sum())
        return strict, tied
    def report(tag, p, d):
        sp, tp = agree(p, gp, ref_p)
        sd, td = agree(d, gd, ref_d)
        s, t = sp + sd, tp + td
        n = len(ref_p) + len(ref_d)
        md = float(np.abs(p - gp).mean())
        mr = float(np.abs(p - gp).max() / np.abs(gp).max())
        print("%-34s argmax %d/%d (%.2f%%), with the reference's ties %d/%d (%.2f%%), prefill max rel %.3g, mean |d| %.4f"
              % (tag, s, n, 100.0 * s / n, t, n, 100.0 * t / n, mr, md), flush=True)
    m = Qwen3_5ForCausalLM.from_pretrained(fix, dtype=torch.bfloat16, attn_implementation="eager").eval()
    p, d = run(m, prompt, fed, "cpu", [T]); report("cpu bf16 (the reference)", p, d)
    p, d = run(m, prompt, fed, "cpu", [128, 128, T - 256]); report("cpu bf16, prefill 128+128+44", p, d)
    p, d = run(m, prompt, fed, "cpu", [64] * (T // 64) + [T % 64]); report("cpu bf16, prefill in 64s", p, d)
    p, d = run(m, prompt, fed, "cpu", [1] * T); report("cpu bf16, token by token", p, d)
    with torch.backends.mkldnn.flags(enabled=False):
        p, d = run(m, prompt, fed, "cpu", [T]); report("cpu bf16, oneDNN off", p, d)
        p, d = run(m, prompt, fed, "cpu", [128, 128, T - 256]); report("cpu bf16, oneDNN off, 128+128+44", p, d)
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        mg = Qwen3_5ForCausalLM.from_pretrained(fix, dtype=torch.bfloat16, attn_implementation="eager").eval().cuda()
        p, d = run(mg, prompt, fed, "cuda", [T]); report("gpu bf16", p, d)
        p, d = run(mg, prompt, fed, "cuda", [128, 128, T - 256]); report("gpu bf16, prefill 128+128+44", p, d)
        p, d = run(mg, prompt, fed, "cuda", [64] * (T // 64) + [T % 64]); report("gpu bf16, prefill in 64s", p, d)
        p, d = run(mg, prompt, fed, "cuda", [1] * T); report("gpu bf16, token by token", p, d)
    m32 = Qwen3_5ForCausalLM.from_pretrained(fix, dtype=torch.float32, attn_implementation="eager").eval()
    p, d = run(m32, prompt, fed, "cpu", [T]); report("cpu fp32", p, d)

main()
