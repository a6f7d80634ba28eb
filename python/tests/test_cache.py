"""The cache through Python: reuse == fresh, sequences, pins, events, save/load."""
import numpy as np
import pytest

import tokenkv
from conftest import STORIES

STORY = "Once upon a time there was a little dog named Max. He liked to run in the park with his friends."


def _fresh_logits(model, tokens):
    c = tokenkv.Context(model, n_cells=256, n_seq_max=2, n_threads=1)
    _, logits = c.sequence(0).sync(tokens, return_logits=True)
    return logits


def test_reuse_gives_the_fresh_logits_bit_for_bit(stories, ctx):
    a = stories.tokenize(STORY)
    b = a[:12] + stories.tokenize(" She had a red ball.", add_special=False)
    ctx.sequence(0).sync(a)
    reused, logits = ctx.sequence(1).sync(b, return_logits=True)
    assert reused == 12  # the shared prefix, computed by sequence 0
    assert ctx.cache.stats()["cells_shared"] == 12
    fresh = _fresh_logits(stories, b)
    assert logits.tobytes() == fresh.tobytes()
    # and a token-by-token decode after the reused prefix gives them too
    c2 = tokenkv.Context(stories, n_cells=256, n_seq_max=2, n_threads=2)
    c2.sequence(0).sync(a)
    seq = c2.sequence(1)
    assert seq.attach(b) == 12
    for t in b[12:]:
        step = seq.decode([t])
    assert step.tobytes() == fresh.tobytes()


def test_sequences_read_from_the_cache(stories, ctx):
    toks = stories.tokenize(STORY)
    s = ctx.sequence(0)
    s.sync(toks)
    assert s.tokens == toks and len(s) == len(toks) and s.namespace == 0
    f = s.fork()
    assert f.tokens == toks and ctx.cache.stats()["cells_used"] == len(toks)
    f.truncate(5)
    assert f.tokens == toks[:5] and s.tokens == toks
    f.release()
    s.clear()
    assert s.tokens == [] and len(s) == 0
    # what they held stays cached until evicted
    assert ctx.cache.match(toks) == len(toks)
    ctx.cache.check()


def test_namespaces_do_not_share(stories, ctx):
    toks = stories.tokenize(STORY)
    ctx.sequence(0).sync(toks, ns=7)
    assert ctx.sequence(0).namespace == 7
    assert ctx.cache.match(toks, ns=7) == len(toks) and ctx.cache.match(toks, ns=0) == 0
    assert ctx.sequence(1).sync(toks, ns=0) == 0


def test_pin_keeps_a_prefix_through_eviction(stories):
    c = tokenkv.Context(stories, n_cells=64, n_seq_max=2, n_threads=1)
    system = stories.tokenize("Once upon a time there was")
    c.sequence(0).sync(system)
    c.sequence(0).clear()
    with c.cache.pin(system) as pin:
        assert pin.length == len(system) and pin.handle
        assert c.cache.stats()["cells_pinned"] == len(system)
        c.cache.clear()
        assert c.cache.match(system) == len(system)
        # fill the cache with something else: the pinned prefix stays
        c.sequence(1).sync([1] + [300 + i % 100 for i in range(50)])
        assert c.cache.match(system) == len(system)
    c.sequence(1).clear()
    c.cache.clear()
    assert c.cache.match(system) == 0


def test_events_replay_gives_what_the_cache_holds(stories):
    c = tokenkv.Context(stories, n_cells=40, n_seq_max=4, n_threads=1, events=True)
    held = {}  # (ns, prefix tuple) -> cached, by replaying the events

    def replay():
        for ev in c.cache.events():
            if ev.kind == "cleared":
                held.clear()
            for end in range(ev.start + 1, ev.end + 1):
                key = (ev.ns, ev.tokens[:end])
                if ev.kind == "stored":
                    held[key] = True
                elif ev.kind == "removed":
                    held.pop(key, None)
    prompts = [stories.tokenize(p) for p in ("Once upon a time", "Once upon a dog ran", "The sun was hot and red")]
    for i, p in enumerate(prompts * 2):
        c.sequence(i % 4).sync(p)
        c.sequence(i % 4).clear()
        c.sequence((i + 1) % 4).sync([1] + [280 + i] * 20)  # forces evictions in 40 cells
        replay()
        for q in prompts:
            cached = c.cache.match(q)
            assert all((0, tuple(q[:k])) in held for k in range(1, cached + 1))
            assert (0, tuple(q[:cached + 1])) not in held or cached == len(q)


def test_sequence_save_and_load_round_trip(stories, ctx, tmp_path):
    toks = stories.tokenize(STORY)
    s = ctx.sequence(0)
    s.sync(toks)
    path = tmp_path / "seq.tkvc"
    s.save(path)
    other = tokenkv.Context(stories, n_cells=256, n_seq_max=2, n_threads=1)
    other.sequence(1).load(path)
    assert other.sequence(1).tokens == toks
    # the loaded K/V give the logits of a fresh computation, to the bit
    nxt = stories.tokenize(" The end.", add_special=False)
    reused, logits = other.sequence(1).sync(toks + nxt, return_logits=True)
    assert reused == len(toks)
    assert logits.tobytes() == _fresh_logits(stories, toks + nxt).tobytes()


def test_cache_directory_save_and_load(stories, ctx, tmp_path):
    a, b = stories.tokenize(STORY), stories.tokenize("The sun was hot and red")
    ctx.sequence(0).sync(a)
    ctx.sequence(1).sync(b)
    ctx.cache.save(tmp_path / "cache")
    other = tokenkv.Context(stories, n_cells=256, n_seq_max=2, n_threads=1)
    info = other.cache.load(tmp_path / "cache")
    assert info["files_skipped"] == 0 and info["tokens_loaded"] == len(a) + len(b) - 1  # BOS shared
    assert other.cache.match(a) == len(a) and other.cache.match(b) == len(b)
    other.cache.check()


def test_load_refuses_another_models_file(stories, ctx, tmp_path):
    ctx.sequence(0).sync(stories.tokenize(STORY))
    ctx.sequence(0).save(tmp_path / "s.tkvc")
    from conftest import TINY_LLAMA2
    other_model = tokenkv.Model(TINY_LLAMA2)
    other = tokenkv.Context(other_model, n_cells=256, n_seq_max=2, n_threads=1)
    with pytest.raises(tokenkv.InvalidArgument) as e:
        other.sequence(0).load(tmp_path / "s.tkvc")
    assert "s.tkvc" in e.value.message
    assert other.sequence(0).tokens == []
    with pytest.raises(tokenkv.IOFailure):
        other.sequence(0).load(tmp_path / "missing.tkvc")


def test_batched_decode_of_two_sequences_equals_one_at_a_time(stories, ctx):
    a, b = stories.tokenize("Once upon a time"), stories.tokenize("The dog ran")
    ctx.sequence(0).sync(a)
    ctx.sequence(1).sync(b)
    ctx.decode([0, 1], [300, 301], logits=[True, True])
    la, lb = ctx.logits(0), ctx.logits(1)
    assert la.tobytes() == _fresh_logits(stories, a + [300]).tobytes()
    assert lb.tobytes() == _fresh_logits(stories, b + [301]).tobytes()
    assert not np.array_equal(la, lb)


def test_model_from_bytes(stories):
    with open(STORIES, "rb") as f:
        m = tokenkv.Model.from_bytes(f.read())
    assert m.fingerprint() == stories.fingerprint()


def test_nodes_spell_every_cached_prefix(stories, ctx):
    a, b = stories.tokenize(STORY), stories.tokenize("Once upon a time the sun was hot")
    ctx.sequence(0).sync(a)
    ctx.sequence(1).sync(b)
    nodes = ctx.cache.nodes()
    by_id = {n.id: n for n in nodes}

    def prefix(n):
        return (prefix(by_id[n.parent]) if n.parent is not None else ()) + n.tokens
    leaves = {prefix(n) for n in nodes if not any(m.parent == n.id for m in nodes)}
    assert leaves == {tuple(a), tuple(b)}
    assert all(len(prefix(by_id[n.parent])) == n.depth for n in nodes if n.parent is not None)
    assert sum(len(n.tokens) for n in nodes) == ctx.cache.stats()["cells_used"]


def test_export_and_import_between_contexts(stories, ctx):
    a = stories.tokenize(STORY)
    ctx.sequence(0).sync(a)
    image = ctx.cache.export(a)
    other = tokenkv.Context(stories, n_cells=256, n_seq_max=2, n_threads=1)
    with pytest.raises(tokenkv.InvalidArgument):
        other.cache.import_image(a[:-1], image)  # not the tokens the image holds
    other.cache.import_image(a, image)
    assert other.cache.match(a) == len(a)
    nxt = stories.tokenize(" The end.", add_special=False)
    reused, logits = other.sequence(0).sync(a + nxt, return_logits=True)
    assert reused == len(a) and logits.tobytes() == _fresh_logits(stories, a + nxt).tobytes()
    with pytest.raises(tokenkv.FormatError):
        other.cache.import_image(a, image[:-10])
