"""Contexts: a KV cache that knows its tokens, sequences over it, and the cache's own API."""
import collections
import threading
import weakref

from ._core import Handle, check, error, ffi, lib, logits_copy, sized_tokens, tokens_in

KV_TYPES = {"f16": lib.TKV_TYPE_F16, "f32": lib.TKV_TYPE_F32, "q8_0": lib.TKV_TYPE_Q8_0, "q5_1": lib.TKV_TYPE_Q5_1,
            "q5_0": lib.TKV_TYPE_Q5_0, "q4_1": lib.TKV_TYPE_Q4_1, "q4_0": lib.TKV_TYPE_Q4_0,
            "iq4_nl": lib.TKV_TYPE_IQ4_NL}

CacheEvent = collections.namedtuple("CacheEvent", "kind ns tokens start end")
CacheEvent.__doc__ = """A change of what the cache holds: kind "stored", "removed" or "cleared";
positions start..end-1 of the prefix tokens (a tuple of end ids) in namespace ns."""
_EVENT_KINDS = {lib.TKV_CACHE_EVENT_STORED: "stored", lib.TKV_CACHE_EVENT_REMOVED: "removed",
                lib.TKV_CACHE_EVENT_CLEARED: "cleared"}


@ffi.def_extern()
def tkvpy_on_cache_event(_ctx, ev, user):
    # runs inside the call that changes the cache, on its thread: copy and return
    ffi.from_handle(user).append(CacheEvent(_EVENT_KINDS.get(ev.kind, ev.kind), ev.ns,
                                            tuple(ffi.unpack(ev.tokens, ev.end)) if ev.end else (),
                                            getattr(ev, "from"), ev.end))


CacheNode = collections.namedtuple("CacheNode", "id parent ns depth tokens refs pins hits last_use")
CacheNode.__doc__ = """A node of the prefix index: its run of tokens extends the parent's prefix
(parent None for a namespace's root) from position depth."""


@ffi.def_extern()
def tkvpy_on_cache_node(node, user):
    ffi.from_handle(user).append((node.id, node.parent, node.ns, node.depth, node.n_tokens, node.refs, node.pins,
                                  node.hits, node.last_use))


class Context:
    """A KV cache, a thread pool and scratch over one model (tkv_context).

    Every call takes the context's lock, so two Python threads never enter one context (the
    library would refuse the second with Busy); the lock is released while C runs only to
    other contexts' users. The context keeps its model alive."""

    def __init__(self, model, *, n_cells=4096, n_seq_max=256, n_batch=512, n_threads=None, kv_type="f16",
                 kv_type_v=None, batch_invariant=True, events=False):
        p = ffi.new("tkv_context_params *")
        check(lib.tkv_context_params_init(p, ffi.sizeof("tkv_context_params")))
        p.n_cells, p.n_seq_max, p.n_batch = n_cells, n_seq_max, n_batch
        if n_threads is not None:
            p.n_threads = n_threads
        for field, name in (("kv_type", kv_type), ("kv_type_v", kv_type_v)):
            if name is not None:
                if name not in KV_TYPES:
                    raise ValueError(f"tokenkv: {field} '{name}' is not one of {', '.join(KV_TYPES)}")
                setattr(p, field, KV_TYPES[name])
        p.batch_invariant = batch_invariant
        self._abort = ffi.new("tkvpy_abort *", {"flag": 0, "after": -1})
        p.abort_cb = ffi.addressof(lib, "tkvpy_should_abort")
        p.abort_user = self._abort
        self._events = collections.deque()
        if events:
            self._events_handle = ffi.new_handle(self._events)
            p.on_cache_event = ffi.addressof(lib, "tkvpy_on_cache_event")
            p.cache_event_user = self._events_handle
        out = ffi.new("tkv_context **")
        st = lib.tkv_context_create(model.ptr, p, out)
        if st != lib.TKV_OK:
            raise error(st)
        self.model = model
        self.n_cells, self.n_seq_max, self.n_vocab = n_cells, n_seq_max, model.n_vocab
        self._h = Handle(out[0], lib.tkv_context_free, deps=(model._h,))
        self._closer = weakref.finalize(self, self._h.release)
        self._lock = threading.RLock()  # reentrant: a Sequence's call may make several context calls
        self._free_ids = list(range(n_seq_max - 1, -1, -1))
        self._ids_lock = threading.Lock()
        self.cache = Cache(self)

    def close(self):
        """Free the context now (its model once nothing else holds it)."""
        with self._lock:
            self._closer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, fn, *args):
        """fn(ctx_ptr, *args) under the lock; raises on failure."""
        with self._lock:
            ptr = self._ptr()
            check(fn(ptr, *args))

    def _ptr(self):
        if self._h.ptr == ffi.NULL:
            raise ValueError("tokenkv: the context is closed")
        return self._h.ptr

    # ---- cancellation ----------------------------------------------------
    def cancel(self):
        """Make the running decode (and every later one until uncancel()) fail with Aborted;
        any thread may call it, without waiting for the context."""
        self._abort.flag = 1

    def uncancel(self):
        self._abort.flag = 0

    def abort_after_layers(self, n):
        """Abort the decode that reaches its n-th layer check from now (tests; -1: never)."""
        self._abort.after = n

    # ---- sequences -------------------------------------------------------
    def sequence(self, seq_id=None):
        """Sequence seq_id, or (None) a free id of the context's own pool, given back by
        release(). An id asked for by number leaves the pool for good."""
        if seq_id is None:
            with self._ids_lock:
                if not self._free_ids:
                    raise error(lib.TKV_ERR_FULL, f"all {self.n_seq_max} sequences are in use")
                return Sequence(self, self._free_ids.pop(), pooled=True)
        if not 0 <= seq_id < self.n_seq_max:
            raise error(lib.TKV_ERR_INVALID, f"sequence {seq_id} is outside 0..{self.n_seq_max - 1}")
        with self._ids_lock:  # an id chosen by the caller is no longer the pool's to give
            if seq_id in self._free_ids:
                self._free_ids.remove(seq_id)
        return Sequence(self, seq_id)

    def decode(self, seqs, tokens, *, positions=None, logits=None):
        """One forward pass over tokens[i] appended to sequence seqs[i] (Sequence or id), at
        positions (default: where each sequence ends, counting earlier tokens of the batch);
        logits: which tokens get logits (default: the last only). Read them with logits(i)."""
        n = len(tokens)
        if len(seqs) != n or (positions is not None and len(positions) != n) or (logits is not None and len(logits) != n):
            raise ValueError("tokenkv: decode needs seqs, tokens (and positions, logits) of one length")
        ids = [s.id if isinstance(s, Sequence) else s for s in seqs]
        with self._lock:
            ptr = self._ptr()
            if positions is None:
                nxt, positions = {}, []
                for s in ids:
                    if s not in nxt:
                        nxt[s] = lib.tkv_seq_len(ptr, s)
                    positions.append(nxt[s])
                    nxt[s] += 1
            b = ffi.new("tkv_batch *")
            tok, pos, sq = ffi.new("tkv_token[]", list(tokens)), ffi.new("tkv_pos[]", positions), ffi.new("tkv_seq[]", ids)
            lg = ffi.new("bool[]", [bool(x) for x in logits]) if logits is not None else ffi.NULL
            b.n, b.token, b.pos, b.seq, b.logits = n, tok, pos, sq, lg
            check(lib.tkv_decode(ptr, b))

    def logits(self, i=None):
        """A copy (numpy float32, its own memory) of the logits of token i of the last decode or
        sync (None: its last token); None when that token has no logits."""
        with self._lock:
            ptr = self._ptr()
            row = lib.tkv_get_logits_last(ptr) if i is None else lib.tkv_get_logits(ptr, i)
            return logits_copy(row, self.n_vocab)

    @property
    def error_message(self):
        """The message of the context's last failing call."""
        with self._lock:
            return ffi.string(lib.tkv_context_error(self._ptr())).decode("utf-8", "replace")


class Sequence:
    """One sequence of a context: what it holds is read from the cache, never mirrored."""

    def __init__(self, ctx, seq_id, pooled=False):
        self.ctx, self.id, self._pooled = ctx, seq_id, pooled

    def __repr__(self):
        return f"<tokenkv.Sequence {self.id} of {len(self)} tokens>"

    def __len__(self):
        with self.ctx._lock:
            return lib.tkv_seq_len(self.ctx._ptr(), self.id)

    @property
    def tokens(self):
        """The tokens the sequence holds, read from the cache."""
        with self.ctx._lock:
            ptr = self.ctx._ptr()
            return sized_tokens(lambda buf, cap, n: lib.tkv_seq_tokens(ptr, self.id, buf, cap, n))

    @property
    def namespace(self):
        ns = ffi.new("uint64_t *")
        self.ctx._call(lib.tkv_seq_namespace, self.id, ns)
        return ns[0]

    def sync(self, tokens, ns=0, *, return_logits=False):
        """Hold exactly tokens in namespace ns, reusing the longest cached prefix (any
        sequence's) and decoding the rest; returns how many tokens came from the cache, and
        with return_logits, (that, a copy of the last token's logits) read in the same hold of
        the context (another thread's decode cannot come between)."""
        arr, n, _keep = tokens_in(tokens)
        reused = ffi.new("size_t *")
        with self.ctx._lock:
            self.ctx._call(lib.tkv_seq_sync, self.id, ns, arr, n, reused)
            return (reused[0], self.ctx.logits()) if return_logits else reused[0]

    def attach(self, tokens, ns=0):
        """Hold the longest cached prefix of tokens (at most all but the last); decode nothing.
        Returns its length: decode tokens[that:] next."""
        arr, n, _keep = tokens_in(tokens)
        reused = ffi.new("size_t *")
        self.ctx._call(lib.tkv_seq_attach, self.id, ns, arr, n, reused)
        return reused[0]

    def decode(self, tokens):
        """Append tokens (one pass, split by n_batch) and return the last one's logits (a copy)."""
        tokens = list(tokens)
        with self.ctx._lock:
            self.ctx.decode([self.id] * len(tokens), tokens)
            return self.ctx.logits()

    def truncate(self, n):
        self.ctx._call(lib.tkv_seq_truncate, self.id, n)

    def clear(self):
        self.ctx._call(lib.tkv_seq_clear, self.id)

    def fork(self, dst=None):
        """A sequence (dst, a Sequence or id; None: one from the pool) holding what this one
        holds, sharing its cells."""
        dst = self.ctx.sequence(dst) if not isinstance(dst, Sequence) else dst
        try:
            self.ctx._call(lib.tkv_seq_fork, self.id, dst.id)
        except BaseException:
            dst.release()
            raise
        return dst

    def save(self, path):
        """Write the sequence's tokens and their K/V to one checksummed file."""
        self.ctx._call(lib.tkv_seq_save, self.id, str(path).encode())

    def load(self, path):
        """Replace what the sequence holds with a file of save() (validated whole first)."""
        self.ctx._call(lib.tkv_seq_load, self.id, str(path).encode())

    def release(self):
        """Empty the sequence (its tokens stay cached) and give a pooled id back."""
        if self.id is None:
            return
        self.clear()
        if self._pooled:
            with self.ctx._ids_lock:
                self.ctx._free_ids.append(self.id)
        self.id = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class Pin:
    """A pinned prefix (tkv_cache_pin): kept resident until unpin()."""

    def __init__(self, cache, handle, length):
        self._cache, self.handle, self.length = cache, handle, length

    def unpin(self):
        if self.handle:
            self._cache._ctx._call(lib.tkv_cache_unpin, self.handle)
            self.handle = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.unpin()


class Cache:
    """The context's token-aware cache: ask it what it holds."""

    def __init__(self, ctx):
        self._ctx = ctx

    def match(self, tokens, ns=0):
        """Length of the longest cached prefix of tokens in namespace ns (changes nothing)."""
        arr, n, _keep = tokens_in(tokens)
        out = ffi.new("size_t *")
        self._ctx._call(lib.tkv_cache_match, ns, arr, n, out)
        return out[0]

    def pin(self, tokens, ns=0):
        """Pin the longest cached prefix of tokens; a Pin (length 0: nothing was cached)."""
        arr, n, _keep = tokens_in(tokens)
        length, handle = ffi.new("size_t *"), ffi.new("tkv_pin *")
        self._ctx._call(lib.tkv_cache_pin, ns, arr, n, length, handle)
        return Pin(self, handle[0], length[0])

    def clear(self):
        """Drop every cached prefix no sequence holds and nobody pinned."""
        self._ctx._call(lib.tkv_cache_clear)

    def stats(self):
        """What the cache holds and did (tkv_stats) as a dict."""
        s = ffi.new("tkv_stats *")
        self._ctx._call(lib.tkv_cache_stats_ex, s, ffi.sizeof("tkv_stats"))
        return {name: getattr(s, name) for name, _ in ffi.typeof("tkv_stats").fields}

    def check(self):
        """Verify every invariant of the cache; FormatError naming the first violation."""
        self._ctx._call(lib.tkv_cache_check)

    def save(self, directory, max_bytes=0):
        """Save the cached prefixes to a directory (incremental, checksummed; tkv_cache_save)."""
        self._ctx._call(lib.tkv_cache_save, str(directory).encode(), max_bytes)

    def load(self, directory):
        """Load a directory of save(); a dict of what was loaded and skipped (and why)."""
        info = ffi.new("tkv_cache_load_info *")
        self._ctx._call(lib.tkv_cache_load_ex, str(directory).encode(), info)
        return {"files_loaded": info.files_loaded, "files_skipped": info.files_skipped,
                "tokens_loaded": info.tokens_loaded,
                "first_skip_reason": ffi.string(info.first_skip_reason).decode("utf-8", "replace")}

    def export(self, tokens, ns=0, kv_from=0):
        """The cache-file image (bytes) of a wholly cached prefix, with the K/V of positions
        kv_from.. (tkv_cache_export), for a shared store of prefixes."""
        arr, n, _keep = tokens_in(tokens)
        size = ffi.new("size_t *")
        with self._ctx._lock:
            ptr = self._ctx._ptr()
            st = lib.tkv_cache_export(ptr, ns, arr, n, kv_from, ffi.NULL, 0, size)
            while st == lib.TKV_ERR_FULL:
                buf = ffi.new("char[]", size[0])
                st = lib.tkv_cache_export(ptr, ns, arr, n, kv_from, buf, size[0], size)
                if st == lib.TKV_OK:
                    return ffi.unpack(buf, size[0])
            check(st)
            return b""

    def import_image(self, tokens, image, ns=0, kv_from=0):
        """Put an image of export() into the cache as a prefix nobody holds, after checking that
        it holds exactly tokens (tokens[:kv_from] must be cached already)."""
        arr, n, _keep = tokens_in(tokens)
        data = bytes(image)
        self._ctx._call(lib.tkv_cache_import, ns, arr, n, kv_from, data, len(data))

    def nodes(self):
        """The nodes of the prefix index (tkv_cache_walk), parents before children, each with
        its run's tokens."""
        found = []
        handle = ffi.new_handle(found)
        with self._ctx._lock:
            ptr = self._ctx._ptr()
            check(lib.tkv_cache_walk(ptr, ffi.addressof(lib, "tkvpy_on_cache_node"), handle))
            out = []
            for nid, parent, ns, depth, n, refs, pins, hits, last_use in found:
                toks = sized_tokens(lambda buf, cap, k, nid=nid: lib.tkv_cache_node_tokens(ptr, nid, buf, cap, k)) \
                    if n else []
                out.append(CacheNode(nid, None if parent == lib.TKV_CACHE_NODE_NONE else parent, ns, depth,
                                     tuple(toks), refs, pins, hits, last_use))
            return out

    def events(self):
        """Iterate over the cache events recorded so far (Context(events=True)), consuming them."""
        q = self._ctx._events
        while q:
            yield q.popleft()
