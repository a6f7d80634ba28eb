"""Sampling: Sampler, Grammar (GBNF) and JSON Schema to grammar."""
import json
import threading
import weakref

import numpy as np

from ._core import Handle, check, error, ffi, lib

_PARAMS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed",
           "presence_penalty", "frequency_penalty")


class Grammar:
    """A compiled GBNF grammar over a model's vocabulary (immutable; shareable)."""

    def __init__(self, model, gbnf, root=None):
        data = gbnf.encode()
        out = ffi.new("tkv_grammar **")
        check(lib.tkv_grammar_create(model.ptr, data, len(data), root.encode() if root else ffi.NULL, out))
        self.n_vocab = model.n_vocab
        self._h = Handle(out[0], lib.tkv_grammar_free)
        self._closer = weakref.finalize(self, self._h.release)

    @classmethod
    def from_json_schema(cls, model, schema):
        return cls(model, json_schema_to_gbnf(schema))


def json_schema_to_gbnf(schema):
    """The GBNF grammar of a JSON Schema (dict or JSON text); Unsupported names a keyword
    that is not enforced."""
    text = (schema if isinstance(schema, str) else json.dumps(schema)).encode()
    out = ffi.new("char **")
    check(lib.tkv_json_schema_to_gbnf(text, len(text), out))
    try:
        return ffi.string(out[0]).decode()
    finally:
        lib.tkv_free(out[0])


class Sampler:
    """tkv_sampler: the next token from a logits row. Parameters as tkv_sampler_params
    (temperature <= 0: greedy); logit_bias {token: bias}; grammar a Grammar."""

    def __init__(self, n_vocab, *, grammar=None, logit_bias=None, **params):
        unknown = set(params) - set(_PARAMS)
        if unknown:
            raise TypeError(f"tokenkv.Sampler: unknown parameter {', '.join(sorted(unknown))}")
        p = ffi.new("tkv_sampler_params *")
        check(lib.tkv_sampler_params_init(p, ffi.sizeof("tkv_sampler_params")))
        for k, v in params.items():
            if v is not None:
                setattr(p, k, v)
        if logit_bias:
            self._bias = ffi.new("tkv_logit_bias[]", [{"token": int(t), "bias": float(b)} for t, b in logit_bias.items()])
            p.logit_bias, p.n_logit_bias = self._bias, len(logit_bias)
        out = ffi.new("tkv_sampler **")
        check(lib.tkv_sampler_create(p, n_vocab, out))
        self.n_vocab = n_vocab
        held = self._held = []  # grammar handles this sampler has used: freed only after it

        def free(ptr):
            lib.tkv_sampler_free(ptr)
            for g in held:
                g.release()
        self._h = Handle(out[0], free)
        self._closer = weakref.finalize(self, self._h.release)
        self._lock = threading.Lock()
        self._grammar = None
        if grammar is not None:
            self.set_grammar(grammar)

    def set_grammar(self, grammar):
        """Constrain to a Grammar (restarted at its start rule); None removes it."""
        with self._lock:
            if grammar is not None and grammar._h not in self._held:
                grammar._h.retain()  # whatever order the collector frees them in
                self._held.append(grammar._h)
            check(lib.tkv_sampler_set_grammar(self._h.ptr, grammar._h.ptr if grammar else ffi.NULL))
            self._grammar = grammar

    def sample(self, logits):
        """The chosen token for a logits row (numpy float32 of n_vocab)."""
        row = np.ascontiguousarray(logits, dtype=np.float32)
        if row.shape != (self.n_vocab,):
            raise error(lib.TKV_ERR_INVALID, f"logits of shape {row.shape}, the sampler needs ({self.n_vocab},)")
        with self._lock:
            return lib.tkv_sampler_sample(self._h.ptr, ffi.from_buffer("float[]", row))

    def accept(self, token):
        """Record a token as seen (the prompt's) for the repetition penalty."""
        with self._lock:
            lib.tkv_sampler_accept(self._h.ptr, token)
