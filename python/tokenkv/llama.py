"""tokenkv.Llama: llama-cpp-python's Llama interface over a tokenkv context.

Where llama-cpp-python keeps one sequence and a Python list of the tokens it
believes are cached, each call here takes a sequence of the context and
syncs it to the prompt: the longest prefix any earlier call computed (this
one's last turn, another thread's shared system prompt) is reused, and
usage.prompt_tokens_details.cached_tokens says how much. docs/python.md
lists what differs.
"""
import os
import random
import sys
import time
import uuid
import warnings

import numpy as np

from ._core import InvalidArgument, lib
from .context import Context
from .model import ChatTemplate, Model
from .sampling import Grammar, Sampler, json_schema_to_gbnf

# Constructor arguments of llama-cpp-python that mean nothing on a CPU-only
# library with a mapped model: accepted with a warning that names them.
_NO_EFFECT_ARGS = {"n_gpu_layers", "main_gpu", "tensor_split", "split_mode", "use_mmap", "use_mlock",
                   "offload_kqv", "flash_attn", "logits_all", "embedding", "last_n_tokens_size", "numa"}
_DEFAULT_SEED = 0xFFFFFFFF  # llama-cpp-python's LLAMA_DEFAULT_SEED: a random seed


def _refuse(name, value, default=None):
    if value is not default and value != default:
        raise NotImplementedError(f"tokenkv.Llama: '{name}' is not implemented (got {value!r})")


class LlamaGrammar:
    """llama-cpp-python's LlamaGrammar: a GBNF text, compiled for the model that uses it."""

    def __init__(self, gbnf, root=None):
        self.gbnf, self.root = gbnf, root

    @classmethod
    def from_string(cls, grammar, verbose=True):
        return cls(grammar)

    @classmethod
    def from_json_schema(cls, json_schema, verbose=True):
        return cls(json_schema_to_gbnf(json_schema))


class _StopScan:
    """Finds stop strings in the growing text and says how much of it is safe to emit (not
    possibly the start of a stop string)."""

    def __init__(self, stop):
        self.stop = [s for s in ([stop] if isinstance(stop, str) else (stop or [])) if s]

    def find(self, text):
        hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        return min(hits) if hits else -1

    def safe_len(self, text):
        hold = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        return len(text) - hold


class Llama:
    """llama-cpp-python's Llama (model_path, n_ctx, n_threads, n_batch, seed, verbose);
    tokenkv additions: n_seq_max (concurrent calls), chat_template (Jinja source used when
    the model has none), kv_type."""

    def __init__(self, model_path, *, n_ctx=512, n_batch=512, n_threads=None, n_threads_batch=None, seed=_DEFAULT_SEED,
                 verbose=True, chat_format=None, chat_handler=None, n_seq_max=16, chat_template=None, kv_type="f16",
                 vocab_only=False, **kwargs):
        unknown = set(kwargs) - _NO_EFFECT_ARGS
        if unknown:
            raise TypeError(f"tokenkv.Llama: unknown or unimplemented argument(s) {', '.join(sorted(unknown))}")
        if kwargs:
            warnings.warn(f"tokenkv.Llama: {', '.join(sorted(kwargs))} have no effect (CPU only, the model is mapped)",
                          stacklevel=2)
        _refuse("chat_handler", chat_handler)
        _refuse("chat_format", chat_format)
        if n_threads_batch is not None and n_threads_batch != n_threads:
            raise NotImplementedError("tokenkv.Llama: 'n_threads_batch' other than n_threads is not implemented")
        t0 = time.monotonic()
        self.model_path = model_path
        self.verbose = verbose
        self._model = Model(model_path, vocab_only=vocab_only)
        hp = None if vocab_only else self._model.hparams()
        self._n_ctx = n_ctx if n_ctx > 0 else (hp["n_ctx_train"] if hp else 512)
        self._ctx = None if vocab_only else Context(self._model, n_cells=self._n_ctx, n_seq_max=n_seq_max,
                                                    n_batch=n_batch, n_threads=n_threads, kv_type=kv_type)
        self._rng = random.Random(int.from_bytes(os.urandom(8), "little") if seed in (None, -1, _DEFAULT_SEED) else seed)
        self._template = ChatTemplate(chat_template) if chat_template else None
        self.metadata = {k: str(v) for k, v in self._model.metadata.items()}
        if verbose:
            print(f"tokenkv.Llama: loaded {model_path} ({self._model.n_vocab} tokens, n_ctx {self._n_ctx}) in "
                  f"{time.monotonic() - t0:.2f} s", file=sys.stderr)

    # ---- facts and the tokenizer ----------------------------------------
    @property
    def model(self):
        """The tokenkv.Model."""
        return self._model

    @property
    def context(self):
        """The tokenkv.Context: its cache is the prompt cache."""
        return self._ctx

    def n_ctx(self):
        return self._n_ctx

    def n_vocab(self):
        return self._model.n_vocab

    def token_bos(self):
        return self._model.bos if self._model.bos is not None else -1

    def token_eos(self):
        return self._model.eos if self._model.eos is not None else -1

    def tokenize(self, text, add_bos=True, special=False):
        """Token ids of text (bytes, as llama-cpp-python; str accepted)."""
        return self._model.tokenize(text, add_special=add_bos, parse_special=special)

    def detokenize(self, tokens, prev_tokens=None, special=False):
        """The bytes of tokens; with prev_tokens, as the continuation of them."""
        if prev_tokens:
            whole = self._model.detokenize_bytes(list(prev_tokens) + list(tokens), special=special)
            return whole[len(self._model.detokenize_bytes(prev_tokens, special=special)):]
        return self._model.detokenize_bytes(tokens, special=special)

    def set_cache(self, cache):
        warnings.warn("tokenkv.Llama.set_cache: not needed, the context is the cache; nothing changed", stacklevel=2)

    def reset(self):
        """Nothing to reset: no call leaves state but the cache (which stays, for reuse)."""

    # ---- generation ------------------------------------------------------
    def _sampler(self, temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty, seed,
                 logit_bias, grammar):
        s = Sampler(self._model.n_vocab, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                    repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                    frequency_penalty=frequency_penalty,
                    seed=seed if seed is not None else self._rng.getrandbits(64),
                    logit_bias={int(k): v for k, v in (logit_bias or {}).items()})
        if grammar is not None:
            g = grammar if isinstance(grammar, Grammar) else Grammar(self._model, grammar.gbnf, grammar.root)
            s.set_grammar(g)
        return s

    def _generate(self, prompt, max_tokens, sampler, stop, info, n_logprobs=None):
        """Yield (text delta, finish_reason or None) for a prompt's tokens; info receives
        prompt_tokens, cached_tokens and completion_tokens, and with n_logprobs (an int >= 0)
        "logprobs": per generated token (id, logprob, [(id, logprob)] of the n_logprobs best)."""
        if self._ctx is None:
            raise InvalidArgument(lib.TKV_ERR_INVALID, "the model was loaded vocab_only: it cannot generate")
        n_prompt = len(prompt)
        info.update(prompt_tokens=n_prompt, cached_tokens=0, completion_tokens=0, logprobs=[])
        if n_prompt == 0:
            raise ValueError("tokenkv.Llama: the prompt has no tokens")
        if n_prompt >= self._n_ctx:
            raise ValueError(f"Requested tokens ({n_prompt}) exceed context window of {self._n_ctx}")
        limit = self._n_ctx - n_prompt
        if max_tokens is None or max_tokens <= 0:
            max_tokens = limit
        scan = _StopScan(stop)
        detok = self._model.detokenizer(continues=True)
        with self._ctx.sequence() as seq:
            reused, logits = seq.sync(prompt, return_logits=True)
            info["cached_tokens"] = reused
            for t in prompt:
                sampler.accept(t)
            text, emitted, finish = "", 0, "length"
            for i in range(max_tokens):
                if i >= limit:
                    break
                tok = sampler.sample(logits)
                if self._model.is_eog(tok):
                    finish = "stop"
                    break
                if n_logprobs is not None:
                    info["logprobs"].append(_logprobs(logits, tok, n_logprobs))
                info["completion_tokens"] += 1
                text += detok.push(tok).decode("utf-8", "replace")  # whole characters (invalid bytes: U+FFFD)
                cut = scan.find(text)
                if cut >= 0:
                    text, finish = text[:cut], "stop"
                    break
                safe = scan.safe_len(text)
                if safe > emitted:
                    yield text[emitted:safe], None
                    emitted = safe
                if i + 1 < max_tokens and i + 1 < limit:
                    logits = seq.decode([tok])
        # an incomplete last character (held back by the detokenizer) is left out
        yield text[emitted:], finish

    def create_completion(self, prompt, suffix=None, max_tokens=16, temperature=0.8, top_p=0.95, min_p=0.05,
                          typical_p=1.0, logprobs=None, echo=False, stop=None, frequency_penalty=0.0,
                          presence_penalty=0.0, repeat_penalty=1.0, top_k=40, stream=False, seed=None,
                          tfs_z=1.0, mirostat_mode=0, mirostat_tau=5.0, mirostat_eta=0.1, model=None,
                          stopping_criteria=None, logits_processor=None, grammar=None, logit_bias=None):
        """A text completion, as llama-cpp-python returns it (a dict, or with stream an iterator
        of chunk dicts whose texts are whole UTF-8 characters)."""
        _refuse("suffix", suffix)
        if logprobs is not None and (stream or logprobs < 0):
            raise NotImplementedError("tokenkv.Llama: 'logprobs' with stream, or below 0, is not implemented")
        _refuse("typical_p", typical_p, 1.0)
        _refuse("tfs_z", tfs_z, 1.0)
        _refuse("mirostat_mode", mirostat_mode, 0)
        _refuse("stopping_criteria", stopping_criteria)
        _refuse("logits_processor", logits_processor)
        tokens = prompt if isinstance(prompt, list) else self.tokenize(prompt.encode(), add_bos=True, special=True)
        prompt_text = prompt if isinstance(prompt, str) else self._model.detokenize(tokens)
        sampler = self._sampler(temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty,
                                seed, logit_bias, grammar)
        cid, created, name = f"cmpl-{uuid.uuid4()}", int(time.time()), model or self.model_path
        info = {}
        gen = self._generate(tokens, max_tokens, sampler, stop, info, logprobs)
        if stream:
            return self._stream_completion(gen, cid, created, name, prompt_text if echo else None)
        text, finish = "", None
        for delta, finish in gen:
            text += delta
        head = prompt_text if echo else ""
        lp = self._completion_logprobs(info["logprobs"], len(head), len(text)) if logprobs is not None else None
        return {"id": cid, "object": "text_completion", "created": created, "model": name,
                "choices": [{"text": head + text, "index": 0, "logprobs": lp, "finish_reason": finish}],
                "usage": _usage(info)}

    def _piece(self, token):
        return self._model.token_to_piece(token).decode("utf-8", "replace")

    def _completion_logprobs(self, records, offset, text_len):
        """llama-cpp-python's completion logprobs, for the tokens whose text is in the answer."""
        out = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        pos = 0
        for tok, lp, top in records:
            if pos >= text_len and out["tokens"]:
                break  # past a stop string
            piece = self._piece(tok)
            out["tokens"].append(piece)
            out["text_offset"].append(offset + pos)
            out["token_logprobs"].append(lp)
            best = {self._piece(t): v for t, v in top}
            best.setdefault(piece, lp)
            out["top_logprobs"].append(best)
            pos += len(piece)
        return out

    def _chat_logprobs(self, records, text_len):
        """OpenAI's chat logprobs ({"content": [...]}) for the tokens whose text is in the answer."""
        content, pos = [], 0
        for tok, lp, top in records:
            if pos >= text_len and content:
                break
            raw = self._model.token_to_piece(tok)
            content.append({"token": raw.decode("utf-8", "replace"), "logprob": lp, "bytes": list(raw),
                            "top_logprobs": [{"token": self._piece(t), "logprob": v,
                                              "bytes": list(self._model.token_to_piece(t))} for t, v in top]})
            pos += len(raw.decode("utf-8", "replace"))
        return {"content": content}

    @staticmethod
    def _stream_completion(gen, cid, created, name, echo_text):
        def chunk(text, finish):
            return {"id": cid, "object": "text_completion", "created": created, "model": name,
                    "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}
        if echo_text:
            yield chunk(echo_text, None)
        for delta, finish in gen:
            if delta and finish is None:
                yield chunk(delta, None)
            elif finish is not None:
                if delta:
                    yield chunk(delta, None)
                yield chunk("", finish)

    __call__ = create_completion

    def create_chat_completion(self, messages, functions=None, function_call=None, tools=None, tool_choice=None,
                               temperature=0.2, top_p=0.95, top_k=40, min_p=0.05, typical_p=1.0, stream=False,
                               stop=None, seed=None, response_format=None, max_tokens=None, presence_penalty=0.0,
                               frequency_penalty=0.0, repeat_penalty=1.0, tfs_z=1.0, mirostat_mode=0,
                               mirostat_tau=5.0, mirostat_eta=0.1, model=None, logits_processor=None, grammar=None,
                               logit_bias=None, logprobs=None, top_logprobs=None):
        """A chat completion with the model's own chat template (or Llama(chat_template=)), as
        llama-cpp-python returns it."""
        for name, value in (("functions", functions), ("function_call", function_call), ("tools", tools),
                            ("tool_choice", tool_choice), ("logits_processor", logits_processor)):
            _refuse(name, value)
        _refuse("typical_p", typical_p, 1.0)
        _refuse("tfs_z", tfs_z, 1.0)
        _refuse("mirostat_mode", mirostat_mode, 0)
        if response_format is not None:
            kind = response_format.get("type")
            if kind == "json_object":
                schema = response_format.get("schema", {"type": "object"})
                grammar = LlamaGrammar(json_schema_to_gbnf(schema))
            elif kind != "text":
                raise NotImplementedError(f"tokenkv.Llama: response_format type {kind!r} is not implemented")
        if (logprobs or top_logprobs) and stream:
            raise NotImplementedError("tokenkv.Llama: 'logprobs' with stream is not implemented")
        if top_logprobs and not logprobs:
            raise ValueError("tokenkv.Llama: top_logprobs needs logprobs=True")
        n_logprobs = (top_logprobs or 0) if logprobs else None
        text = self._model.apply_chat_template(messages, add_generation_prompt=True, template=self._template)
        # the template writes the BOS itself when the model wants one (bos_token)
        tokens = self._model.tokenize(text, add_special=False, parse_special=True)
        sampler = self._sampler(temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty,
                                seed, logit_bias, grammar)
        cid, created, name = f"chatcmpl-{uuid.uuid4()}", int(time.time()), model or self.model_path
        info = {}
        gen = self._generate(tokens, max_tokens, sampler, stop, info, n_logprobs)
        if stream:
            return self._stream_chat(gen, cid, created, name)
        content, finish = "", None
        for delta, finish in gen:
            content += delta
        lp = self._chat_logprobs(info["logprobs"], len(content)) if n_logprobs is not None else None
        return {"id": cid, "object": "chat.completion", "created": created, "model": name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": lp,
                             "finish_reason": finish}],
                "usage": _usage(info)}

    @staticmethod
    def _stream_chat(gen, cid, created, name):
        def chunk(delta, finish):
            return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        yield chunk({"role": "assistant"}, None)
        for delta, finish in gen:
            if delta:
                yield chunk({"content": delta}, None)
            if finish is not None:
                yield chunk({}, finish)


def _logprobs(logits, token, n_top):
    """(token, its log-probability, the n_top best (id, log-probability)) under the softmax of the
    raw logits (before penalties, temperature and the grammar, as llama-cpp-python reports)."""
    row = logits.astype(np.float64)
    lse = np.log(np.exp(row - row.max()).sum()) + row.max()
    top = np.argsort(-row, kind="stable")[:n_top] if n_top else []
    return int(token), float(row[token] - lse), [(int(t), float(row[t] - lse)) for t in top]


def _usage(info):
    return {"prompt_tokens": info["prompt_tokens"], "completion_tokens": info["completion_tokens"],
            "total_tokens": info["prompt_tokens"] + info["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": info["cached_tokens"]}}

