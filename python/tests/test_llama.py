"""tokenkv.Llama against llama-cpp-python's documented return shapes and behaviour."""
import json
import subprocess

import pytest

import tokenkv
from conftest import STORIES, TINY_LLAMA2, TKV_BIN

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def llm():
    return tokenkv.Llama(model_path=STORIES, n_ctx=512, n_threads=2, seed=7, verbose=False, chat_template=CHATML)


def _greedy_cli(prompt, n):
    out = subprocess.run([TKV_BIN, "run", "-m", STORIES, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1"],
                         capture_output=True, check=True)
    return out.stdout.decode().removesuffix("\n")  # the CLI ends its output with a newline


def test_completion_shape_and_text(llm):
    r = llm("Once upon a time", max_tokens=20, temperature=0)
    assert set(r) == {"id", "object", "created", "model", "choices", "usage"}
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-") and isinstance(r["created"], int)
    assert r["model"] == STORIES
    (choice,) = r["choices"]
    assert set(choice) == {"text", "index", "logprobs", "finish_reason"} and choice["index"] == 0
    assert choice["finish_reason"] == "length" and choice["logprobs"] is None
    assert choice["text"] == _greedy_cli("Once upon a time", 20)
    u = r["usage"]
    assert u["prompt_tokens"] == len(llm.tokenize(b"Once upon a time")) and u["completion_tokens"] == 20
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]


def test_cached_tokens_are_what_the_cache_held(llm):
    prompt = "The little cat looked at the moon and"
    llm(prompt, max_tokens=4, temperature=0)
    n_shared = len(llm.tokenize(prompt.encode()))
    full = llm.tokenize((prompt + " smiled").encode())
    # the ideal: what the cache holds of the new prompt (the shared one, and any of the answer)
    ideal = llm.context.cache.match(full)
    again = llm(prompt + " smiled", max_tokens=4, temperature=0)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= n_shared
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == min(ideal, len(full) - 1)


def test_stop_strings(llm):
    full = llm("Once upon a time", max_tokens=30, temperature=0)["choices"][0]["text"]
    word = full.split()[4]
    r = llm("Once upon a time", max_tokens=30, temperature=0, stop=[word, "zzzz"])
    assert r["choices"][0]["text"] == full[:full.find(word)] and r["choices"][0]["finish_reason"] == "stop"
    streamed = "".join(c["choices"][0]["text"] for c in llm("Once upon a time", max_tokens=30, temperature=0,
                                                          stop=word, stream=True))
    assert streamed == full[:full.find(word)]


def test_stream_chunks(llm):
    chunks = list(llm.create_completion("Once upon a time", max_tokens=12, temperature=0, stream=True))
    assert all(c["object"] == "text_completion" and len(c["choices"]) == 1 for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == llm("Once upon a time", max_tokens=12, temperature=0)["choices"][0]["text"]


def test_stream_gives_whole_utf8_characters():
    big = tokenkv.Llama(model_path=TINY_LLAMA2, n_ctx=256, n_threads=1, verbose=False)
    m = big.model
    byte_ids = {i: 100.0 for i in range(m.n_vocab) if m.token_text(i) in ("<0xE2>", "<0x82>", "<0xAC>")}
    assert len(byte_ids) == 3
    g = tokenkv.LlamaGrammar.from_string('root ::= "€€"')  # "€" = E2 82 AC: three byte tokens each
    r = big("Hello", max_tokens=10, temperature=0, grammar=g, logit_bias=byte_ids)
    assert r["choices"][0]["text"] == "€€" and r["usage"]["completion_tokens"] == 6
    chunks = [c["choices"][0]["text"] for c in big("Hello", max_tokens=10, temperature=0, grammar=g,
                                                   logit_bias=byte_ids, stream=True)]
    assert [c for c in chunks if c] == ["€", "€"]


def test_chat_completion_shape(llm):
    msgs = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "A story"}]
    r = llm.create_chat_completion(msgs, max_tokens=8, temperature=0)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    (choice,) = r["choices"]
    assert set(choice) == {"index", "message", "logprobs", "finish_reason"}
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    # the prompt is the template's text, tokenized with special tokens parsed
    text = llm.model.apply_chat_template(msgs, template=tokenkv.ChatTemplate(CHATML))
    assert r["usage"]["prompt_tokens"] == len(llm.model.tokenize(text, add_special=False, parse_special=True))
    chunks = list(llm.create_chat_completion(msgs, max_tokens=8, temperature=0, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == choice["message"]["content"]


def test_json_response_format(llm):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    r = llm.create_chat_completion([{"role": "user", "content": "a number"}], max_tokens=40, temperature=0,
                                   response_format={"type": "json_object", "schema": schema})
    if r["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(r["choices"][0]["message"]["content"])["n"], int)
    else:  # cut by max_tokens: still a prefix of the grammar's language
        assert r["choices"][0]["message"]["content"].startswith("{")


def test_unimplemented_is_refused_by_name(llm):
    with pytest.raises(NotImplementedError, match="logprobs"):
        llm("hi", logprobs=3, stream=True)
    with pytest.raises(NotImplementedError, match="tools"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], tools=[{"type": "function"}])
    with pytest.raises(TypeError, match="rope_freq_base"):
        tokenkv.Llama(model_path=STORIES, rope_freq_base=1.0, verbose=False)
    with pytest.warns(UserWarning, match="n_gpu_layers"):
        tokenkv.Llama(model_path=STORIES, n_gpu_layers=-1, verbose=False)
    with pytest.raises(ValueError, match="exceed context window"):
        tokenkv.Llama(model_path=STORIES, n_ctx=8, verbose=False)("Once upon a time there was a dog")


def test_tokenize_detokenize(llm):
    ids = llm.tokenize(b"Once upon a time")
    assert ids[0] == llm.token_bos() and llm.detokenize(ids) == b"Once upon a time"
    assert llm.tokenize(b"Once upon a time", add_bos=False) == ids[1:]
    assert llm.detokenize(ids[3:], prev_tokens=ids[:3]) == b" a time"
    assert llm.n_ctx() == 512 and llm.n_vocab() == 512
    assert llm.metadata["general.architecture"] == "llama"


def test_same_seed_same_sample(llm):
    a = llm("Once upon a time", max_tokens=16, temperature=1.0, seed=3)["choices"][0]["text"]
    b = llm("Once upon a time", max_tokens=16, temperature=1.0, seed=3)["choices"][0]["text"]
    assert a == b


def _log_softmax_reference(llm, prompt_tokens):
    import numpy as np
    c = tokenkv.Context(llm.model, n_cells=512, n_seq_max=1, n_threads=1)
    _, logits = c.sequence(0).sync(prompt_tokens, return_logits=True)
    row = logits.astype(np.float64)
    return row - np.log(np.exp(row - row.max()).sum()) - row.max()


def test_completion_logprobs(llm):
    r = llm("Once upon a time", max_tokens=6, temperature=0, logprobs=3)
    lp = r["choices"][0]["logprobs"]
    assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert len(lp["tokens"]) == 6 and "".join(lp["tokens"]) == r["choices"][0]["text"]
    assert lp["text_offset"][0] == 0 and lp["text_offset"][1] == len(lp["tokens"][0])
    ref = _log_softmax_reference(llm, llm.tokenize(b"Once upon a time"))
    first = int(ref.argmax())  # greedy: the first token is the most likely one
    assert lp["tokens"][0] == llm.model.token_to_piece(first).decode()
    assert abs(lp["token_logprobs"][0] - ref[first]) < 1e-5
    assert len(lp["top_logprobs"][0]) == 3 and max(lp["top_logprobs"][0].values()) == lp["token_logprobs"][0]


def test_chat_logprobs(llm):
    r = llm.create_chat_completion([{"role": "user", "content": "A story"}], max_tokens=4, temperature=0,
                                   logprobs=True, top_logprobs=2)
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == 4
    assert all(set(c) == {"token", "logprob", "bytes", "top_logprobs"} and len(c["top_logprobs"]) == 2
               for c in content)
    assert "".join(c["token"] for c in content) == r["choices"][0]["message"]["content"]
    assert content[0]["top_logprobs"][0]["logprob"] == content[0]["logprob"]  # greedy picks the best
