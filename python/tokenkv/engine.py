"""An engine for services: one owner thread batches every live session into one
decode per step (continuous batching, as `tokenkv serve` does), with an asyncio API.

    engine = Engine(model)
    alice = engine.session("alice", tenant="acme")
    async with contextlib.aclosing(engine.generate(alice, prompt, max_tokens=32)) as gen:
        async for tok in gen:
            print(tok.text, end="")

Sessions map to sequences of the engine's context and tenants to namespaces,
so prefixes are shared within a tenant and never across tenants. Every row is
sampled through tkv_seq_accept_draft, so the cache records each choice with
its sampler's state, and a request first takes the tokens a sampler in its
sampler's state chose after the same text before (tkv_seq_follow_known,
docs/library.md): a greedy retry, or one with the same seed, is answered
from the cache without a step, the same tokens. Closing the
iterator (aclosing() does so when the consuming task is cancelled; without it
Python closes an abandoned async generator only when it is collected) stops
the request at the next step; a step that holds only cancelled requests is cut short through the
context's abort flag.
"""
import asyncio
import collections
import queue
import threading
import time

from ._core import TokenkvError, error, ffi, lib
from .context import Context
from .sampling import Sampler

Token = collections.namedtuple("Token", "id text")
Token.__doc__ = "A generated token and the text it completes (whole UTF-8 characters; may be '')."

_DONE = object()


class Session:
    """A conversation: a sequence of the engine's context, in its tenant's namespace."""

    def __init__(self, engine, name, ns, seq):
        self.engine, self.name, self.ns, self.seq = engine, name, ns, seq
        self.busy = False
        self.last = {}  # the last request's prompt_tokens, cached_tokens, completion_tokens, cancel_ms


class _Request:
    def __init__(self, session, prompt, max_tokens, sampler, loop, out):
        self.session, self.prompt, self.max_tokens, self.sampler = session, list(prompt), max_tokens, sampler
        self.loop, self.out = loop, out
        self.pending = None  # prompt tokens left to decode; None until admitted
        self.next_token = None  # the sampled token to decode next
        self.generated = 0
        self.cancelled_at = None
        self.gone = threading.Event()  # set by the owner when it has let go of the request
        self.leader, self.upto = None, 0  # parked: wait until leader's sequence holds upto tokens
        self.detok = session.engine.model.detokenizer(continues=True)

    def send(self, item):
        self.loop.call_soon_threadsafe(self.out.put_nowait, item)


def _common(a, b):
    """Length of the common prefix of two token lists."""
    n, end = 0, min(len(a), len(b))
    while n < end and a[n] == b[n]:
        n += 1
    return n


def _progress(r):
    """Prompt tokens a request's sequence holds so far (0 before admission)."""
    return 0 if r.pending is None else len(r.prompt) - len(r.pending)


class Engine:
    """Continuous batching over one context, owned by one thread."""

    def __init__(self, model, *, n_cells=4096, n_seq_max=64, n_batch=512, n_threads=None):
        self.model = model
        self.ctx = Context(model, n_cells=n_cells, n_seq_max=n_seq_max, n_batch=n_batch, n_threads=n_threads)
        self.n_batch = n_batch
        self._inbox = queue.SimpleQueue()
        self._tenants = {None: 0}  # tenant -> namespace
        self._lock = threading.Lock()
        self._closed = False
        self.steps = 0  # decodes run (a measure of batching)
        self.steps_aborted = 0  # decodes cut short for cancelled requests
        self._thread = threading.Thread(target=self._run, name="tokenkv-engine", daemon=True)
        self._thread.start()

    # ---- sessions --------------------------------------------------------
    def session(self, name, tenant=None):
        """A new session (a sequence of the context) in tenant's namespace."""
        with self._lock:
            ns = self._tenants.setdefault(tenant, len(self._tenants))
        return Session(self, name, ns, self.ctx.sequence())

    def close_session(self, session):
        """Give the session's sequence back; its tokens stay cached until evicted."""
        self._inbox.put(("close", session))

    def close(self):
        """Stop the owner thread (after the requests in flight are dropped)."""
        self._closed = True
        self._inbox.put(("stop", None))
        self._thread.join()

    # ---- generation ------------------------------------------------------
    async def generate(self, session, prompt, *, max_tokens=16, temperature=0.0, seed=0, **sampling):
        """Yield the Tokens generated after prompt (token ids, or text tokenized with the
        vocabulary's BOS); the session then holds the prompt and the answer. Raises the
        status exception of a failed decode."""
        if session.busy:
            raise error(lib.TKV_ERR_BUSY, f"session {session.name!r} already has a request running")
        if self._closed:
            raise RuntimeError("tokenkv.Engine: closed")
        tokens = self.model.tokenize(prompt) if isinstance(prompt, (str, bytes)) else list(prompt)
        if not tokens:
            raise error(lib.TKV_ERR_INVALID, "the prompt has no tokens")
        sampler = Sampler(self.model.n_vocab, temperature=temperature, seed=seed, **sampling)
        out = asyncio.Queue()
        req = _Request(session, tokens, max_tokens, sampler, asyncio.get_running_loop(), out)
        session.busy = True
        session.last = {"prompt_tokens": len(tokens), "cached_tokens": 0, "completion_tokens": 0}
        self._inbox.put(("generate", req))
        ended = False
        try:
            while True:
                item = await out.get()
                if item is _DONE or isinstance(item, BaseException):
                    ended = True
                    if item is _DONE:
                        return
                    raise item
                yield item
        finally:
            if not ended:  # the consumer left (cancelled, closed): stop at the next step
                req.cancelled_at = time.monotonic()
                if self._only_cancelled_running():
                    self.ctx.cancel()  # cut the running step short; a live one caught by it is redone
                while not req.gone.is_set():
                    await asyncio.sleep(0.001)

    def _only_cancelled_running(self):
        running = self._running
        return bool(running) and all(r.cancelled_at is not None for r in running)

    # ---- the owner thread --------------------------------------------------
    _running = ()

    def _run(self):
        live = []
        self._parked = []  # requests waiting for a leader (see _admit)
        try:
            self._loop(live)
        except BaseException as e:  # a bug must not leave consumers waiting forever
            for r in live + self._parked:
                self._finish(r, e)
            self._closed = True
            self._drain(e)
            raise

    def _drain(self, exc):
        """Finish the requests still queued (the engine stops)."""
        while True:
            try:
                cmd, arg = self._inbox.get(block=False)
            except queue.Empty:
                return
            if cmd == "generate":
                self._finish(arg, exc)

    def _loop(self, live):
        parked = self._parked
        while True:
            # wait for work only when there is nothing to decode
            while True:
                try:
                    cmd, arg = self._inbox.get(block=not live and not parked)
                except queue.Empty:
                    break
                if cmd == "stop":
                    closed = error(lib.TKV_ERR_ABORTED, "the engine was closed")
                    for r in live + parked:
                        self._finish(r, closed)
                    self._drain(closed)
                    return
                if cmd == "close":
                    arg.seq.release()
                elif cmd == "generate":
                    self._admit(arg, live, parked)
            # a parked request goes on once its leader has decoded what they share
            for r in [r for r in parked if r.leader.gone.is_set() or _progress(r.leader) >= r.upto]:
                parked.remove(r)
                self._admit(r, live, parked)
            parked[:] = [r for r in parked if not self._drop_if_cancelled(r)]
            live = [r for r in live if not self._drop_if_cancelled(r)]
            if live:
                self._step(live)
                live = [r for r in live if r.session.busy]

    def _admit(self, req, live, parked):
        try:
            reused = req.session.seq.attach(req.prompt, ns=req.session.ns)
        except TokenkvError as e:
            self._finish(req, e)
            return
        # A request that shares more with a prompt still being decoded (or waiting) than the
        # cache holds waits for it, so a shared prefix is computed once: the ideal reuse.
        best, leader = reused, None
        for r in live + parked:
            if r.session.ns == req.session.ns:
                c = min(_common(r.prompt, req.prompt), len(req.prompt) - 1)
                if c > best and _progress(r) < c:
                    best, leader = c, r
        if leader is not None:
            req.leader, req.upto = leader, best
            parked.append(req)
            return
        req.session.last["cached_tokens"] = reused
        req.pending = req.prompt[reused:]
        for t in req.prompt:
            req.sampler.accept(t)
        if len(req.pending) == 1:  # the prompt is cached but its last token: its answer may be known too
            known = self._known(req, req.pending[0])
            if known:
                req.pending = []
                req.session.last["cached_tokens"] = len(req.prompt)
                if not self._hand_all(req, known):
                    return
        live.append(req)

    def _drop_if_cancelled(self, req):
        if req.cancelled_at is None:
            return False
        req.session.last["cancel_ms"] = (time.monotonic() - req.cancelled_at) * 1e3
        self._finish(req, None)
        return True

    def _known(self, req, pending):
        """The tokens known to follow req's sequence and pending (tkv_seq_follow_known: what a sampler
        in the state of req's chose after the same text before, recorded in the cache), at most those req may
        still generate; the sequence then holds pending and all of them but the last."""
        cap = req.max_tokens - req.generated
        if cap < 1:
            return []
        out, n = ffi.new("tkv_token[]", cap), ffi.new("size_t *")
        try:
            with req.sampler._lock:
                self.ctx._call(lib.tkv_seq_follow_known, req.session.seq.id, pending, req.sampler._h.ptr, cap, out, n)
        except TokenkvError:
            return []  # nothing changed (out of memory): the request decodes pending as usual
        return list(out[0:n[0]])

    def _hand(self, req, t):
        """Hand req its next token t (sampled or known); False when that finished it."""
        if self.model.is_eog(t):
            self._finish(req, None)
            return False
        req.generated += 1
        req.session.last["completion_tokens"] = req.generated
        req.send(Token(t, req.detok.push(t).decode("utf-8", "replace")))
        if req.generated >= req.max_tokens:
            self._finish(req, None)  # the last token is not decoded: nobody needs its logits
            return False
        req.next_token = t
        return True

    def _hand_all(self, req, tokens):
        return all(self._hand(req, t) for t in tokens)

    def _step(self, live):
        for r in live:  # generating requests take what is known first (no step)
            if r.next_token is not None and r.session.busy:
                known = self._known(r, r.next_token)
                if known:
                    self._hand_all(r, known)
        live = [r for r in live if r.session.busy]
        if not live:
            return
        seqs, toks, want, owners, chunks = [], [], [], [], {}
        budget = self.n_batch
        for r in live:  # generating sessions first: one token each
            if r.next_token is not None and budget:
                seqs.append(r.session.seq.id), toks.append(r.next_token), want.append(True), owners.append(r)
                budget -= 1
        for r in live:  # then prompts, in chunks within the batch
            if r.next_token is None and r.pending and budget:
                chunk = r.pending[:budget]
                chunks[r] = len(chunk)
                budget -= len(chunk)
                done = len(chunk) == len(r.pending)
                for k, t in enumerate(chunk):
                    last = done and k == len(chunk) - 1
                    seqs.append(r.session.seq.id), toks.append(t), want.append(last)
                    owners.append(r if last else None)
        # clear the abort flag before publishing the step, then look at the cancellations
        # again: a consumer leaving after this point sees the step and sets the flag
        self.ctx.uncancel()
        self._running = live
        if all(r.cancelled_at is not None for r in live):
            self._running = ()
            return
        try:
            self.ctx.decode(seqs, toks, logits=want)
        except TokenkvError as e:
            # the decode undid itself: an abort meant for cancelled requests is redone for the
            # others at the next step; any other failure ends every request of the batch
            if e.code == lib.TKV_ERR_ABORTED:
                self.steps_aborted += 1
            else:
                in_batch = set(seqs)
                for r in live:
                    if r.session.seq.id in in_batch:
                        self._finish(r, None if r.cancelled_at is not None else e)
            return
        finally:
            self._running = ()
        self.steps += 1
        for r, n in chunks.items():  # the prompt chunks decoded
            r.pending = r.pending[n:]
        out, n = ffi.new("tkv_token[1]"), ffi.new("size_t *")
        for i, r in enumerate(owners):
            if r is None:
                continue
            # sampled through the draft call (no drafts): the cache records the choice and the sampler's state
            with r.sampler._lock:
                self.ctx._call(lib.tkv_seq_accept_draft, r.session.seq.id, i, ffi.NULL, 0, r.sampler._h.ptr, 1,
                               ffi.NULL, ffi.NULL, out, n)
            r.next_token = None
            self._hand(r, out[0])

    def _finish(self, req, exc):
        req.session.busy = False
        req.gone.set()
        req.send(exc if exc is not None else _DONE)
