"""The compiled binding, the status exceptions and the handles' lifetimes."""
import threading

import numpy as np

from ._tokenkv_cffi import ffi, lib


class TokenkvError(Exception):
    """A tokenkv call failed: `status` is the code's name ("TKV_ERR_FULL"), `code` its
    number, and the message is the library's own (tkv_last_error)."""

    def __init__(self, code, message):
        self.code = code
        self.status = ffi.string(lib.tkv_status_str(code)).decode()
        self.message = message
        super().__init__(f"{self.status}: {message}" if message else self.status)


class OutOfMemory(TokenkvError, MemoryError):
    """TKV_ERR_NOMEM: an allocation failed."""


class IOFailure(TokenkvError, OSError):
    """TKV_ERR_IO: open, read, mmap or write failed."""

    def __init__(self, code, message):  # OSError's own __init__ would take (errno, strerror)
        TokenkvError.__init__(self, code, message)


class FormatError(TokenkvError, ValueError):
    """TKV_ERR_FORMAT: a file (GGUF, cache file, template) is malformed or corrupt."""


class Unsupported(TokenkvError):
    """TKV_ERR_UNSUPPORTED: valid, but not something tokenkv handles."""


class InvalidArgument(TokenkvError, ValueError):
    """TKV_ERR_INVALID: a bad argument, or a missing or mistyped key."""


class CacheFull(TokenkvError):
    """TKV_ERR_FULL: the cache (or a buffer) has no room."""


class Aborted(TokenkvError):
    """TKV_ERR_ABORTED: the decode was cancelled; the cache is as it was before it."""


class Busy(TokenkvError):
    """TKV_ERR_BUSY: another call on the context was running; nothing changed."""


_BY_STATUS = {
    lib.TKV_ERR_NOMEM: OutOfMemory,
    lib.TKV_ERR_IO: IOFailure,
    lib.TKV_ERR_FORMAT: FormatError,
    lib.TKV_ERR_UNSUPPORTED: Unsupported,
    lib.TKV_ERR_INVALID: InvalidArgument,
    lib.TKV_ERR_FULL: CacheFull,
    lib.TKV_ERR_ABORTED: Aborted,
    lib.TKV_ERR_BUSY: Busy,
}


def error(code, message=None):
    """The exception for a status; the message defaults to this thread's last one (every
    call, on a context or not, records its failure in the calling thread's slot)."""
    if message is None:
        message = ffi.string(lib.tkv_last_error(ffi.NULL)).decode("utf-8", "replace")
    return _BY_STATUS.get(code, TokenkvError)(code, message)


def check(code):
    """Raise the status's exception unless it is TKV_OK."""
    if code != lib.TKV_OK:
        raise error(code)


class Handle:
    """A C handle and its free function, freed once nobody needs it: its Python owner
    (close() or garbage collection) and every dependent (a context over a model) release
    it, in any order, so a model is never freed before the contexts that run it."""

    __slots__ = ("ptr", "_free", "_refs", "_lock", "_deps")

    def __init__(self, ptr, free, deps=()):
        self.ptr, self._free, self._refs, self._lock = ptr, free, 1, threading.Lock()
        self._deps = tuple(deps)
        for d in self._deps:
            d.retain()

    def retain(self):
        with self._lock:
            if self._refs == 0:
                raise RuntimeError("tokenkv: the handle was freed")
            self._refs += 1

    def release(self):
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            ptr, self.ptr = self.ptr, ffi.NULL
            self._free(ptr)
            for d in self._deps:
                d.release()


def tokens_in(tokens):
    """A token list (list, tuple, numpy array) as a C array and its length; the array
    must stay referenced during the call."""
    if isinstance(tokens, np.ndarray):
        arr = np.ascontiguousarray(tokens, dtype=np.int32)
        return ffi.from_buffer("tkv_token[]", arr), len(arr), arr
    tokens = list(tokens)
    return ffi.new("tkv_token[]", tokens) if tokens else ffi.NULL, len(tokens), None


def sized_tokens(call):
    """Run a sizing call (cap 0 gives TKV_ERR_FULL and the size), then the real one;
    call(buf, cap, n_ptr) -> status."""
    n = ffi.new("size_t *")
    st = call(ffi.NULL, 0, n)
    if st == lib.TKV_OK:
        return []
    if st != lib.TKV_ERR_FULL:
        raise error(st)
    while True:
        cap = n[0]
        buf = ffi.new("tkv_token[]", cap)
        st = call(buf, cap, n)
        if st == lib.TKV_OK:
            return list(ffi.unpack(buf, n[0]))
        if st != lib.TKV_ERR_FULL:
            raise error(st)


def logits_copy(ptr, n_vocab):
    """The logits row at ptr as a numpy array owning its memory (the library's row dies at
    the next decode)."""
    if ptr == ffi.NULL:
        return None
    return np.frombuffer(ffi.buffer(ptr, 4 * n_vocab), dtype=np.float32).copy()
