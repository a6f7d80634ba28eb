"""Python threads meeting on one context or one Llama."""
import threading

import tokenkv
from conftest import STORIES

PROMPTS = ["Once upon a time", "The dog ran to the park", "Lily had a red ball", "The sun was hot"]


def test_two_threads_on_one_llama_get_what_one_thread_gets():
    llm = tokenkv.Llama(model_path=STORIES, n_ctx=1024, n_threads=1, verbose=False)
    alone = {p: llm(p, max_tokens=24, temperature=0)["choices"][0]["text"] for p in PROMPTS}
    llm.context.cache.clear()
    results, errors = {}, []

    def worker(k):
        try:
            for rep in range(3):
                for p in PROMPTS[k::2]:
                    if rep % 2:
                        text = "".join(c["choices"][0]["text"] for c in llm(p, max_tokens=24, temperature=0,
                                                                             stream=True))
                    else:
                        text = llm(p, max_tokens=24, temperature=0)["choices"][0]["text"]
                    results.setdefault(p, set()).add(text)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {p: {alone[p]} for p in PROMPTS}
    llm.context.cache.check()


def test_threads_never_see_busy_on_one_context():
    m = tokenkv.Model(STORIES)
    ctx = tokenkv.Context(m, n_cells=1024, n_seq_max=8, n_threads=1)
    toks = [m.tokenize(p) for p in PROMPTS]
    errors = []

    def worker(k):
        try:
            seq = ctx.sequence(k)
            for i in range(40):
                seq.sync(toks[(k + i) % 4])
                seq.decode([300 + i % 50])
                assert seq.tokens[:-1] == toks[(k + i) % 4]
                ctx.cache.stats()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ctx.cache.check()
