"""The binding itself: declarations from the header, version, Model, exceptions."""
import gc
import json
import os
import subprocess

import cffi
import numpy as np
import pytest

import tokenkv
import tokenkv_build
from conftest import REPO, SHARED, STORIES, TKV_BIN


def test_cdef_is_generated_from_the_header_and_parses():
    cdef = "\n".join(tokenkv_build.header_to_cdef(os.path.join(REPO, "include", h))
                     for h in ("tokenkv_types.h", "tokenkv.h"))
    ffi = cffi.FFI()
    ffi.cdef(cdef)  # pycparser takes it: no preprocessor line or inline body is left
    assert "static inline" not in cdef and "TKV_API" not in cdef and "#if" not in cdef
    # every function the header declares is bound (counted in the header's own text)
    with open(os.path.join(REPO, "include", "tokenkv.h")) as f:
        declared = {line.split("(")[0].split()[-1].lstrip("*") for line in f if line.startswith("TKV_API")}
    for name in declared:
        assert hasattr(tokenkv.lib, name), name


def test_a_new_conditional_fails_the_build_by_name(tmp_path):
    h = tmp_path / "h.h"
    h.write_text("#ifdef TKV_SOMETHING_NEW\nint x;\n#endif\n")
    with pytest.raises(RuntimeError, match="TKV_SOMETHING_NEW"):
        tokenkv_build.header_to_cdef(str(h))


def test_struct_layouts_are_the_compilers():
    # sizes from the compiler that built the extension equal what the library's own
    # _params_init accepts: it refuses a size it does not know with TKV_ERR_INVALID
    p = tokenkv.ffi.new("tkv_context_params *")
    assert tokenkv.lib.tkv_context_params_init(p, tokenkv.ffi.sizeof(p[0])) == 0
    assert p.size == tokenkv.ffi.sizeof("tkv_context_params")


def test_version_matches_the_library():
    v = tokenkv.lib.tkv_version()
    assert tokenkv.__version__ == f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def test_model_facts_agree_with_the_metadata(stories):
    hp = stories.hparams()
    assert hp["n_layer"] == stories.meta("llama.block_count") == 5
    assert hp["n_embd"] == stories.meta("llama.embedding_length")
    assert stories.bos == stories.meta("tokenizer.ggml.bos_token_id")
    assert stories.eos == stories.meta("tokenizer.ggml.eos_token_id")
    vocab = stories.meta("tokenizer.ggml.tokens")
    assert len(vocab) == stories.n_vocab == 512
    assert stories.token_text(100) == vocab[100]
    assert stories.meta("no.such.key", "absent") == "absent"
    assert "tokenizer.ggml.tokens" not in stories.metadata and stories.metadata["general.architecture"] == "llama"
    assert len(stories.fingerprint()) == 32 and stories.fingerprint() == tokenkv.Model(STORIES).fingerprint()


def test_tokenize_matches_the_cli_and_round_trips(stories):
    text = "Once upon a time, a cat sat."
    cli = subprocess.run([TKV_BIN, "tokenize", "-m", STORIES, "-p", text, "--ids"], capture_output=True, text=True,
                         check=True)
    ids = stories.tokenize(text)
    assert json.loads(cli.stdout) == ids
    assert ids[0] == stories.bos
    assert stories.detokenize(ids) == text
    assert stories.tokenize(text, add_special=False) == ids[1:]
    detok = stories.detokenizer()
    assert b"".join(detok.push(t) for t in ids) + detok.flush() == text.encode()


def test_greedy_generation_equals_the_c_cli(stories, ctx):
    cli = subprocess.run([TKV_BIN, "run", "-m", STORIES, "-p", "Once upon a time", "-n", "24", "--temp", "0",
                          "-t", "1", "--ids"], capture_output=True, text=True, check=True)
    expect = json.loads(cli.stdout)
    seq = ctx.sequence()
    sampler = tokenkv.Sampler(stories.n_vocab, temperature=0)
    _, logits = seq.sync(stories.tokenize("Once upon a time"), return_logits=True)
    got = []
    while len(got) < len(expect):
        t = sampler.sample(logits)
        got.append(t)
        logits = seq.decode([t])
    assert got == expect


def test_logits_are_copies_that_survive_the_next_decode(stories, ctx):
    seq = ctx.sequence()
    reused, first = seq.sync(stories.tokenize("Once upon a time"), return_logits=True)
    kept = first.copy()
    assert first.flags.owndata and first.dtype == np.float32 and first.shape == (stories.n_vocab,)
    seq.decode([int(np.argmax(first))])
    assert np.array_equal(first, kept) and not np.array_equal(ctx.logits(), first)


def test_bad_path_raises_io_error_naming_it():
    with pytest.raises(tokenkv.IOFailure, match="/no/such/model.gguf") as e:
        tokenkv.Model("/no/such/model.gguf")
    assert e.value.status == "TKV_ERR_IO" and isinstance(e.value, OSError)


def test_garbage_file_raises_format_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 60)
    with pytest.raises(tokenkv.FormatError) as e:
        tokenkv.Model(str(bad))
    assert e.value.message  # the library's own explanation
    with pytest.raises(tokenkv.FormatError):
        tokenkv.Model.from_bytes(b"not a gguf image at all")


def test_invalid_arguments_raise_with_the_message(stories, ctx):
    with pytest.raises(tokenkv.InvalidArgument, match="sequence"):
        ctx.sequence(99)
    seq = ctx.sequence()
    with pytest.raises(tokenkv.InvalidArgument) as e:
        seq.sync([1, 5000])  # a token id outside the 512 of the vocabulary
    assert "5000" in e.value.message
    with pytest.raises(tokenkv.InvalidArgument):
        stories.token_to_piece(10 ** 6)
    with pytest.raises(tokenkv.InvalidArgument, match="grammar line 1"):
        tokenkv.Grammar(stories, "root ::= (")
    with pytest.raises(tokenkv.Unsupported, match="pattern"):
        tokenkv.json_schema_to_gbnf({"type": "string", "pattern": "a+"})
    with pytest.raises(ValueError, match="kv_type"):
        tokenkv.Context(stories, kv_type="q9")


def test_cache_full(stories):
    small = tokenkv.Context(stories, n_cells=16, n_seq_max=2, n_threads=1)
    with pytest.raises(tokenkv.CacheFull) as e:
        small.sequence(0).sync(list(range(3, 40)))
    assert e.value.status == "TKV_ERR_FULL"


def test_abort_leaves_the_cache_as_before(stories, ctx):
    seq = ctx.sequence()
    prompt = stories.tokenize("Once upon a time there was a dog")
    seq.sync(prompt[:4])
    before = ctx.cache.stats()["cells_used"]
    ctx.abort_after_layers(2)
    with pytest.raises(tokenkv.Aborted):
        seq.decode(prompt[4:])
    assert seq.tokens == prompt[:4] and ctx.cache.stats()["cells_used"] == before
    ctx.cache.check()
    ctx.cancel()
    with pytest.raises(tokenkv.Aborted):
        seq.decode(prompt[4:])
    ctx.uncancel()
    seq.decode(prompt[4:])
    assert seq.tokens == prompt


def test_a_context_keeps_its_model_alive_whatever_the_free_order():
    m = tokenkv.Model(STORIES)
    c = tokenkv.Context(m, n_cells=64, n_seq_max=2, n_threads=1)
    d = m.detokenizer()
    m.close()  # released by its owner, but the context and the detokenizer still run it
    del m
    gc.collect()
    assert c.sequence(0).sync([1, 403, 407]) == 0
    assert d.push(403)
    c2 = tokenkv.Context(c.model, n_cells=64, n_seq_max=2, n_threads=1)
    del c, d
    gc.collect()
    assert c2.sequence(0).sync([1, 403]) == 0


def test_chat_template_renders(stories):
    t = tokenkv.ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                             "{% if add_generation_prompt %}<assistant>{% endif %}")
    text = stories.apply_chat_template([{"role": "user", "content": "hi"}], template=t)
    assert text == "<user>hi<assistant>"
    assert stories.chat_template is None  # stories260K has no tokenizer.chat_template
    with pytest.raises(tokenkv.Unsupported):
        stories.apply_chat_template([{"role": "user", "content": "hi"}])
    with pytest.raises(tokenkv.FormatError, match="line 1"):
        tokenkv.ChatTemplate("{% for %}")


def test_a_sampler_keeps_its_grammar_alive(stories):
    g = tokenkv.Grammar(stories, 'root ::= " yes" | " no"')
    s = tokenkv.Sampler(stories.n_vocab, temperature=0, grammar=g)
    g._closer()  # the grammar's owner lets go: the sampler still holds it
    del g
    gc.collect()
    ctx = tokenkv.Context(stories, n_cells=64, n_seq_max=1, n_threads=1)
    seq = ctx.sequence(0)
    _, logits = seq.sync(stories.tokenize("Once upon a time"), return_logits=True)
    out = []
    while len(out) < 8:
        t = s.sample(logits)
        if stories.is_eog(t):
            break
        out.append(t)
        logits = seq.decode([t])
    assert stories.detokenize([1] + out) in ("yes", "no")


def test_huge_pages_is_a_load_option_that_changes_no_token():
    # tkv_model_params.huge_pages reaches the load (a packed model, where it places the packed copy) and, being
    # only where the weights live, changes no token
    path = os.path.join(SHARED, "models", "parity", "parity-Q4_0.gguf")
    outs = []
    for huge in (True, False):
        m = tokenkv.Model(path, huge_pages=huge)
        c = tokenkv.Context(m, n_cells=256, n_seq_max=1, n_threads=2)
        seq = c.sequence()
        sampler = tokenkv.Sampler(m.n_vocab, temperature=0)
        _, logits = seq.sync(m.tokenize("The cache knows its tokens"), return_logits=True)
        got = []
        for _ in range(12):
            t = sampler.sample(logits)
            got.append(t)
            logits = seq.decode([t])
        outs.append(got)
        c.close()
    assert outs[0] == outs[1]
