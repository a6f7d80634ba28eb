"""Time from cancelling a request's task to the engine letting go of it, while it
generates and while its long prompt is being decoded (the abort flag cuts that step at its next layer check: a model of several layers
shows it; one of one layer cannot be cut).
  PYTHONPATH=build/python:python python3 python/tools/cancel_latency.py [MODEL]"""
import asyncio
import contextlib
import os
import statistics
import sys
import time

import tokenkv

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "..", "shared", "models", "stories260K.gguf")
model = tokenkv.Model(path)
engine = tokenkv.Engine(model, n_cells=8192, n_seq_max=64, n_batch=512, n_threads=1)


async def cancel_after(prompt, n_tokens, delay):
    s = engine.session("x")
    seen = []

    async def consume():
        async with contextlib.aclosing(engine.generate(s, prompt, max_tokens=10 ** 6, temperature=1.0)) as gen:
            async for t in gen:
                seen.append(t)
    task = asyncio.create_task(consume())
    while len(seen) < n_tokens:
        await asyncio.sleep(0)
    await asyncio.sleep(delay)
    t0 = time.monotonic()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    engine.close_session(s)
    return (time.monotonic() - t0) * 1e3, s.last


async def main():
    during_gen = [(await cancel_after(model.tokenize("Hello"), 5, 0))[0] for _ in range(20)]
    during_prompt = []
    for i in range(5):  # a new prompt each time: nothing of it is cached
        ms, _ = await cancel_after([1] + [3 + (i * 7919 + k * 31) % 509 for k in range(2000)], 0, 0.02)
        during_prompt.append(ms)
    print(f"cancel while generating: median {statistics.median(during_gen):.2f} ms, max {max(during_gen):.2f} ms")
    print(f"cancel during a 2000-token prompt (n_batch 512): median {statistics.median(during_prompt):.2f} ms, "
          f"max {max(during_prompt):.2f} ms; decodes cut by the abort flag: {engine.steps_aborted}")


asyncio.run(main())
engine.close()
