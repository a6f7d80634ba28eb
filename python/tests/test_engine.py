"""The asyncio engine: continuous batching gives one-at-a-time's outputs and reuses prefixes."""
import asyncio
import contextlib

import pytest

import tokenkv
from conftest import STORIES

SYSTEM = "Once upon a time there was a little town with a big park."
NAMES = ["Lily", "Tom", "Sam", "Max", "Ben", "Mia", "Zoe", "Tim", "Sue", "Ann",
         "Bob", "Dan", "Eve", "Jon", "Kim", "Lee", "Ned", "Pam", "Ray", "Ted"]


@pytest.fixture
def engine(stories):
    e = tokenkv.Engine(stories, n_cells=4096, n_seq_max=32, n_threads=2)
    yield e
    e.close()


async def _collect(engine, session, prompt, **kw):
    return [t.id async for t in engine.generate(session, prompt, **kw)]


def _one_at_a_time(model, prompt, n):
    c = tokenkv.Context(model, n_cells=512, n_seq_max=1, n_threads=1)
    sampler = tokenkv.Sampler(model.n_vocab, temperature=0)
    _, logits = c.sequence(0).sync(model.tokenize(prompt), return_logits=True)
    out = []
    while len(out) < n:
        t = sampler.sample(logits)
        if model.is_eog(t):
            break
        out.append(t)
        logits = c.sequence(0).decode([t])
    return out


def test_twenty_sessions_batched_equal_one_at_a_time_and_reuse_the_shared_prefix(stories, engine):
    prompts = [f"{SYSTEM} {name} went to the park." for name in NAMES]

    async def main():
        await _collect(engine, engine.session("warm"), SYSTEM, max_tokens=1)
        ideal = [min(engine.ctx.cache.match(stories.tokenize(p)), len(stories.tokenize(p)) - 1) for p in prompts]
        sessions = [engine.session(f"s{i}") for i in range(len(prompts))]
        steps0 = engine.steps
        outs = await asyncio.gather(*(_collect(engine, s, p, max_tokens=16) for s, p in zip(sessions, prompts)))
        return outs, ideal, [s.last["cached_tokens"] for s in sessions], engine.steps - steps0
    outs, ideal, cached, steps = asyncio.run(main())
    assert outs == [_one_at_a_time(stories, p, 16) for p in prompts]
    # the ideal: what was cached when all started (the shared system prompt), or what a prompt
    # that arrived before (in gather's order) shares with it, whichever is longer
    toks = [stories.tokenize(p) for p in prompts]

    def common(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n
    best = [max([ideal[i]] + [min(common(t, toks[j]), len(t) - 1) for j in range(i)]) for i, t in enumerate(toks)]
    assert cached == best
    assert best != ideal  # some names share a first token: the test sees prefixes shared in flight
    assert min(ideal) >= len(stories.tokenize(SYSTEM)) - 1
    assert steps < 16 * len(prompts)  # sessions shared decodes (one at a time would take 320)
    engine.ctx.cache.check()


def test_a_sessions_next_turn_reuses_its_last(stories, engine):
    async def main():
        s = engine.session("alice")
        first = await _collect(engine, s, SYSTEM, max_tokens=8)
        turn2 = stories.tokenize(SYSTEM) + first + stories.tokenize(" Then", add_special=False)
        await _collect(engine, s, turn2, max_tokens=4)
        return first, turn2, s.last
    first, turn2, last = asyncio.run(main())
    # everything but the answer's last token (never decoded) came from the cache
    assert last["cached_tokens"] == len(stories.tokenize(SYSTEM)) + len(first) - 1


def test_tenants_do_not_share_prefixes(engine):
    async def main():
        a, b = engine.session("a", tenant="acme"), engine.session("b", tenant="globex")
        await _collect(engine, a, SYSTEM, max_tokens=2)
        await _collect(engine, b, SYSTEM, max_tokens=2)
        c = engine.session("c", tenant="acme")
        await _collect(engine, c, SYSTEM, max_tokens=2)
        return a.last["cached_tokens"], b.last["cached_tokens"], c.last["cached_tokens"]
    # c repeats a's greedy request in a's tenant: the prompt but its last token is cached, and its
    # answer is known after it (that row is not computed again: the whole prompt counts)
    assert asyncio.run(main()) == (0, 0, len(tokenkv.Model(STORIES).tokenize(SYSTEM)))


def test_a_greedy_retry_is_answered_from_the_cache(stories, engine):
    prompt = f"{SYSTEM} Lily and Tom"

    async def main():
        first = await _collect(engine, engine.session("a"), prompt, max_tokens=24)
        steps0 = engine.steps
        again_session = engine.session("b")
        again = await _collect(engine, again_session, prompt, max_tokens=24)
        steps1 = engine.steps
        shorter = await _collect(engine, engine.session("c"), prompt, max_tokens=5)
        steps2 = engine.steps
        seeded = await _collect(engine, engine.session("d"), prompt, max_tokens=8, temperature=0.8, seed=3)
        return first, again, shorter, seeded, (steps1 - steps0, steps2 - steps1, engine.steps - steps2), \
            again_session.last
    first, again, shorter, seeded, steps, last = asyncio.run(main())
    assert first == _one_at_a_time(stories, prompt, 24)
    # the retries take the tokens the first run chose, as known tokens: no decode step at all
    assert again == first and shorter == first[:5]
    assert steps[:2] == (0, 0)
    assert last["cached_tokens"] == len(stories.tokenize(prompt))
    assert last["completion_tokens"] == len(first)
    # a sampler that draws knows nothing the greedy one chose: it decodes
    assert len(seeded) > 0 and steps[2] > 0


def test_a_seeded_retry_is_answered_from_the_cache(engine):
    prompt = f"{SYSTEM} Tom saw a cat"

    async def main():
        kw = dict(max_tokens=20, temperature=0.8, top_k=40, seed=11)
        first = await _collect(engine, engine.session("a"), prompt, **kw)
        steps0 = engine.steps
        again = await _collect(engine, engine.session("b"), prompt, **kw)
        steps1 = engine.steps
        other = await _collect(engine, engine.session("c"), prompt, **{**kw, "seed": 12})
        return first, again, other, steps1 - steps0, engine.steps - steps1
    first, again, other, steps, other_steps = asyncio.run(main())
    # the same seed and parameters: the sampler's state is the first run's at every step, so
    # its choices are known; another seed's state is another: it decodes
    assert again == first and steps == 0
    assert other_steps > 0


def test_cancelling_stops_the_request_and_frees_the_session(stories, engine):
    async def main():
        s = engine.session("x")
        got = []

        async def consume():
            # aclosing: the generator's cleanup runs when the task is cancelled, not at its GC
            async with contextlib.aclosing(engine.generate(s, SYSTEM, max_tokens=400)) as gen:
                async for t in gen:
                    got.append(t)
                    if len(got) == 3:
                        await asyncio.sleep(3600)  # never wakes: cancelled
        task = asyncio.create_task(consume())
        while len(got) < 3:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not s.busy and "cancel_ms" in s.last
        held = len(s.seq)
        again = await _collect(engine, s, SYSTEM, max_tokens=5)  # the session works again
        return held, again
    held, again = asyncio.run(main())
    assert held < len(stories.tokenize(SYSTEM)) + 400
    assert again == _one_at_a_time(stories, SYSTEM, 5)
    engine.ctx.cache.check()


def test_a_second_request_on_a_busy_session_is_refused(engine):
    async def main():
        s = engine.session("y")
        # more tokens than any earlier request's answer: known tokens (an earlier greedy answer to SYSTEM) cannot
        # finish it before the second request comes
        agen = engine.generate(s, SYSTEM, max_tokens=10 ** 6)
        await agen.__anext__()
        with pytest.raises(tokenkv.Busy):
            await engine.generate(s, SYSTEM).__anext__()
        await agen.aclose()
    asyncio.run(main())


def test_closing_the_engine_ends_its_requests(stories):
    e = tokenkv.Engine(stories, n_cells=1024, n_seq_max=4, n_threads=1)

    async def main():
        s = e.session("z")
        agen = e.generate(s, SYSTEM, max_tokens=10 ** 6)
        await agen.__anext__()
        await asyncio.get_running_loop().run_in_executor(None, e.close)
        with pytest.raises(tokenkv.Aborted, match="closed"):
            async for _ in agen:
                pass
    asyncio.run(main())
