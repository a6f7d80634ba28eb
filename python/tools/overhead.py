"""Python's cost per generated token: tokenkv.Llama's loop and the bare binding's loop
against `tokenkv run` (C) on the same model, prompt and greedy tokens.
  PYTHONPATH=build/python:python python3 python/tools/overhead.py [MODEL] [N]
Prints the best of 7 runs of each, in microseconds per generated token, and for the
Python loops the part spent outside tkv_decode (the time of each Sequence.decode call
is measured in the same run and taken away), which does not depend on the model."""
import os
import re
import subprocess
import sys
import time

import tokenkv

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
model_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "..", "shared", "models", "stories260K.gguf")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
prompt = "Once upon a time"
RUNS = 7


def c_run():
    err = subprocess.run([os.path.join(REPO, "build", "tokenkv"), "run", "-m", model_path, "-p", prompt, "-n", str(n),
                          "--temp", "0", "-t", "1"], capture_output=True, text=True, check=True).stderr
    m = re.search(r"generated (\d+) in ([\d.]+) ms", err)
    return float(m.group(2)) * 1e3 / int(m.group(1)), int(m.group(1))


llm = tokenkv.Llama(model_path=model_path, n_ctx=n + 64, n_threads=1, verbose=False)


def facade():
    t0 = time.perf_counter()
    r = llm(prompt, max_tokens=n, temperature=0)
    t1 = time.perf_counter()
    llm(prompt, max_tokens=1, temperature=0)
    t2 = time.perf_counter()
    k = r["usage"]["completion_tokens"]
    return ((t1 - t0) - (t2 - t1)) * 1e6 / (k - 1), k


decode_us = [0.0]
_orig_decode = tokenkv.Sequence.decode


def timed_decode(self, tokens):
    t0 = time.perf_counter()
    try:
        return _orig_decode(self, tokens)
    finally:
        decode_us[0] += (time.perf_counter() - t0) * 1e6


tokenkv.Sequence.decode = timed_decode
m = llm.model
ctx = tokenkv.Context(m, n_cells=n + 64, n_seq_max=1, n_threads=1)


def binding():
    seq = ctx.sequence(0)
    sampler = tokenkv.Sampler(m.n_vocab, temperature=0)
    _, logits = seq.sync(m.tokenize(prompt), return_logits=True)
    t0 = time.perf_counter()
    k = 0
    for _ in range(n - 1):
        t = sampler.sample(logits)
        if m.is_eog(t):
            break
        k += 1
        logits = seq.decode([t])
    return (time.perf_counter() - t0) * 1e6 / k, k


for name, fn in (("C tokenkv run", c_run), ("Python binding loop", binding), ("tokenkv.Llama", facade)):
    runs = []
    for _ in range(RUNS):
        decode_us[0] = 0.0
        per_token, k = fn()
        runs.append((per_token, k, per_token - decode_us[0] / k))
    best = min(runs)
    outside = "" if fn is c_run else f", outside tkv_decode {min(r[2] for r in runs):6.1f} us/token"
    print(f"{name:22s} {best[0]:8.1f} us/token ({best[1]} tokens){outside}")
