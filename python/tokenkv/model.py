"""Models: load, tokenizer, metadata, chat templates, fingerprint."""
import json
import threading
import weakref

from ._core import Handle, check, error, ffi, lib, tokens_in

TOKENIZE_ADD_SPECIAL = lib.TKV_TOKENIZE_ADD_SPECIAL
TOKENIZE_PARSE_SPECIAL = lib.TKV_TOKENIZE_PARSE_SPECIAL
DETOKENIZE_SPECIAL = lib.TKV_DETOKENIZE_SPECIAL
DETOKENIZE_CONTINUE = lib.TKV_DETOKENIZE_CONTINUE

_INT_TYPES = {lib.TKV_META_U8, lib.TKV_META_I8, lib.TKV_META_U16, lib.TKV_META_I16, lib.TKV_META_U32,
              lib.TKV_META_I32, lib.TKV_META_U64, lib.TKV_META_I64}
_FLOAT_TYPES = {lib.TKV_META_F32, lib.TKV_META_F64}


def _token_or_none(t):
    return None if t == lib.TKV_TOKEN_NULL else t


class Model:
    """A loaded GGUF model (tkv_model_load): immutable, shared by any number of contexts and
    threads. Freed when closed (or collected) and no context or detokenizer over it is left."""

    def __init__(self, path, *, vocab_only=False, repack=True, huge_pages=True, _image=None):
        params = ffi.new("tkv_model_params *")
        check(lib.tkv_model_params_init(params, ffi.sizeof("tkv_model_params")))
        params.vocab_only, params.repack, params.huge_pages = vocab_only, repack, huge_pages
        out = ffi.new("tkv_model **")
        if _image is not None:
            self._image = _image  # the library reads it in place for the model's life
            buf = ffi.from_buffer(_image)
            st = lib.tkv_model_load_from_memory(buf, len(_image), params, out)
        else:
            st = lib.tkv_model_load(str(path).encode(), params, out)
        if st != lib.TKV_OK:
            raise error(st)
        self.path = None if _image is not None else str(path)
        self._h = Handle(out[0], lib.tkv_model_free)
        self._closer = weakref.finalize(self, self._h.release)
        self._template = None
        self._template_lock = threading.Lock()

    @classmethod
    def from_bytes(cls, data, *, vocab_only=False, repack=True, huge_pages=True):
        """Load a GGUF image held in memory (kept referenced by the model)."""
        return cls(None, vocab_only=vocab_only, repack=repack, huge_pages=huge_pages, _image=bytes(data))

    @property
    def ptr(self):
        if self._h.ptr == ffi.NULL:
            raise ValueError("tokenkv: the model is closed")
        return self._h.ptr

    def close(self):
        """Release the model; it is freed once every context over it is freed too."""
        self._closer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- facts -----------------------------------------------------------
    @property
    def n_vocab(self):
        return lib.tkv_vocab_size(self.ptr)

    def hparams(self):
        """The hyperparameters (tkv_model_hparams) as a dict."""
        hp = ffi.new("tkv_hparams *")
        check(lib.tkv_model_hparams(self.ptr, hp))
        out = {}
        for name, _ in ffi.typeof("tkv_hparams").fields:
            v = getattr(hp, name)
            out[name] = ffi.string(v).decode() if isinstance(v, ffi.CData) else v
        return out

    def fingerprint(self):
        """The 128-bit fingerprint cache files carry, as 32 hex digits (low half first)."""
        out = ffi.new("uint64_t[2]")
        check(lib.tkv_model_fingerprint(self.ptr, out))
        return f"{out[0]:016x}{out[1]:016x}"

    # ---- metadata --------------------------------------------------------
    def meta_keys(self):
        key = ffi.new("const char **")
        keys = []
        for i in range(lib.tkv_model_meta_count(self.ptr)):
            check(lib.tkv_model_meta_at(self.ptr, i, key, ffi.NULL))
            keys.append(ffi.string(key[0]).decode("utf-8", "replace"))
        return keys

    def meta(self, key, default=None):
        """The value of a metadata key (arrays as lists), or default when absent."""
        k = key.encode()
        t = ffi.new("tkv_meta_type *")
        if lib.tkv_model_meta_find(self.ptr, k, t) != lib.TKV_OK:
            return default
        t = t[0]
        if t == lib.TKV_META_ARRAY:
            et, n = ffi.new("tkv_meta_type *"), ffi.new("size_t *")
            check(lib.tkv_model_meta_array(self.ptr, k, et, n))
            return [self._elem(k, et[0], i) for i in range(n[0])]
        return self._scalar(k, t)

    def _scalar(self, k, t):
        if t in _INT_TYPES:
            v = ffi.new("int64_t *")
            check(lib.tkv_model_meta_int(self.ptr, k, v))
            return v[0]
        if t in _FLOAT_TYPES:
            v = ffi.new("double *")
            check(lib.tkv_model_meta_float(self.ptr, k, v))
            return v[0]
        if t == lib.TKV_META_BOOL:
            v = ffi.new("bool *")
            check(lib.tkv_model_meta_bool(self.ptr, k, v))
            return bool(v[0])
        s, n = ffi.new("const char **"), ffi.new("size_t *")
        check(lib.tkv_model_meta_str(self.ptr, k, s, n))
        return ffi.unpack(s[0], n[0]).decode("utf-8", "replace")

    def _elem(self, k, t, i):
        if t in _INT_TYPES or t == lib.TKV_META_BOOL:
            v = ffi.new("int64_t *")
            check(lib.tkv_model_meta_arr_int(self.ptr, k, i, v))
            return bool(v[0]) if t == lib.TKV_META_BOOL else v[0]
        if t in _FLOAT_TYPES:
            v = ffi.new("double *")
            check(lib.tkv_model_meta_arr_float(self.ptr, k, i, v))
            return v[0]
        s, n = ffi.new("const char **"), ffi.new("size_t *")
        check(lib.tkv_model_meta_arr_str(self.ptr, k, i, s, n))
        return ffi.unpack(s[0], n[0]).decode("utf-8", "replace")

    @property
    def metadata(self):
        """Every scalar metadata pair as a dict (arrays, such as the vocabulary, through meta())."""
        out = {}
        t = ffi.new("tkv_meta_type *")
        for key in self.meta_keys():
            k = key.encode()
            if lib.tkv_model_meta_find(self.ptr, k, t) == lib.TKV_OK and t[0] != lib.TKV_META_ARRAY:
                out[key] = self._scalar(k, t[0])
        return out

    # ---- tokenizer -------------------------------------------------------
    def tokenize(self, text, *, add_special=True, parse_special=False):
        """Token ids of text (str or bytes)."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        flags = (TOKENIZE_ADD_SPECIAL if add_special else 0) | (TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        n = ffi.new("size_t *")
        st = lib.tkv_tokenize(self.ptr, data, len(data), flags, ffi.NULL, 0, n)
        if st == lib.TKV_OK:
            return []
        if st != lib.TKV_ERR_FULL:
            raise error(st)
        buf = ffi.new("tkv_token[]", n[0])
        check(lib.tkv_tokenize(self.ptr, data, len(data), flags, buf, n[0], n))
        return list(ffi.unpack(buf, n[0]))

    def detokenize_bytes(self, tokens, *, special=False):
        """The bytes of a token list (tkv_detokenize: the space-prefix rule applies)."""
        arr, count, _keep = tokens_in(tokens)
        flags = DETOKENIZE_SPECIAL if special else 0
        n = ffi.new("size_t *")
        st = lib.tkv_detokenize(self.ptr, arr, count, flags, ffi.NULL, 0, n)
        if st == lib.TKV_OK:
            return b""
        if st != lib.TKV_ERR_FULL:
            raise error(st)
        buf = ffi.new("char[]", n[0] + 1)
        check(lib.tkv_detokenize(self.ptr, arr, count, flags, buf, n[0] + 1, n))
        return ffi.unpack(buf, n[0])

    def detokenize(self, tokens, *, special=False):
        """The text of a token list (invalid UTF-8 replaced)."""
        return self.detokenize_bytes(tokens, special=special).decode("utf-8", "replace")

    def token_to_piece(self, token, *, special=False):
        """The bytes of one token (may be part of a UTF-8 character)."""
        n = ffi.new("size_t *")
        flags = DETOKENIZE_SPECIAL if special else 0
        st = lib.tkv_token_to_piece(self.ptr, token, flags, ffi.NULL, 0, n)
        if st not in (lib.TKV_OK, lib.TKV_ERR_FULL):
            raise error(st)
        buf = ffi.new("char[]", n[0] + 1)
        check(lib.tkv_token_to_piece(self.ptr, token, flags, buf, n[0] + 1, n))
        return ffi.unpack(buf, n[0])

    def token_text(self, token):
        """The raw vocabulary text of a token ("▁the", "<s>"), None out of range."""
        s = lib.tkv_token_text(self.ptr, token)
        return None if s == ffi.NULL else ffi.string(s).decode("utf-8", "replace")

    @property
    def bos(self):
        return _token_or_none(lib.tkv_token_bos(self.ptr))

    @property
    def eos(self):
        return _token_or_none(lib.tkv_token_eos(self.ptr))

    @property
    def eot(self):
        return _token_or_none(lib.tkv_token_eot(self.ptr))

    def is_eog(self, token):
        return bool(lib.tkv_token_is_eog(self.ptr, token))

    @property
    def adds_bos(self):
        return bool(lib.tkv_tokenizer_adds_bos(self.ptr))

    def detokenizer(self, *, special=False, continues=False):
        """A streaming detokenizer giving whole UTF-8 characters (tkv_detok)."""
        return Detokenizer(self, special=special, continues=continues)

    # ---- chat template ---------------------------------------------------
    @property
    def chat_template(self):
        """The model's own template (parsed once), or None when it has none."""
        with self._template_lock:
            if self._template is None:
                out = ffi.new("tkv_chat_template **")
                st = lib.tkv_chat_template_from_model(self.ptr, out)
                if st == lib.TKV_ERR_UNSUPPORTED:
                    return None
                if st != lib.TKV_OK:
                    raise error(st)
                self._template = ChatTemplate._wrap(out[0])
            return self._template

    def apply_chat_template(self, messages, *, add_generation_prompt=True, template=None, now=None, **extra):
        """Render messages (OpenAI-style dicts) with the model's template (or `template`, a
        ChatTemplate or its source text); bos_token and eos_token come from the vocabulary."""
        if isinstance(template, str):
            template = ChatTemplate(template)
        t = template or self.chat_template
        if t is None:
            raise error(lib.TKV_ERR_UNSUPPORTED, "the model has no chat template (tokenizer.chat_template)")
        vars_ = {"messages": messages, "add_generation_prompt": add_generation_prompt,
                 "bos_token": self.token_text(self.bos) if self.bos is not None else "",
                 "eos_token": self.token_text(self.eos) if self.eos is not None else ""}
        vars_.update(extra)
        return t.render(vars_, now=now)


class ChatTemplate:
    """A parsed Jinja chat template; rendered by any number of threads at once."""

    def __init__(self, source):
        data = source.encode()
        out = ffi.new("tkv_chat_template **")
        check(lib.tkv_chat_template_parse(data, len(data), out))
        self._ptr = ffi.gc(out[0], lib.tkv_chat_template_free)

    @classmethod
    def _wrap(cls, ptr):
        self = cls.__new__(cls)
        self._ptr = ffi.gc(ptr, lib.tkv_chat_template_free)
        return self

    def render(self, variables, *, now=None):
        """The text for a dict of template variables; now: "YYYY-MM-DD" for strftime_now."""
        out, n = ffi.new("char **"), ffi.new("size_t *")
        check(lib.tkv_chat_template_render(self._ptr, json.dumps(variables).encode(),
                                           now.encode() if now else ffi.NULL, out, n))
        try:
            return ffi.unpack(out[0], n[0]).decode("utf-8", "replace")
        finally:
            lib.tkv_free(out[0])


class Detokenizer:
    """tkv_detok: push tokens, get back whole UTF-8 characters only."""

    def __init__(self, model, *, special=False, continues=False):
        flags = (DETOKENIZE_SPECIAL if special else 0) | (DETOKENIZE_CONTINUE if continues else 0)
        out = ffi.new("tkv_detok **")
        check(lib.tkv_detok_create(model.ptr, flags, out))
        self._h = Handle(out[0], lib.tkv_detok_free, deps=(model._h,))
        self._closer = weakref.finalize(self, self._h.release)
        self._text, self._len = ffi.new("const char **"), ffi.new("size_t *")

    def push(self, token):
        """The bytes now complete (possibly b"")."""
        check(lib.tkv_detok_push(self._h.ptr, token, self._text, self._len))
        return ffi.unpack(self._text[0], self._len[0]) if self._len[0] else b""

    def flush(self):
        """The held-back bytes, complete character or not."""
        check(lib.tkv_detok_flush(self._h.ptr, self._text, self._len))
        return ffi.unpack(self._text[0], self._len[0]) if self._len[0] else b""

    def reset(self):
        lib.tkv_detok_reset(self._h.ptr)
