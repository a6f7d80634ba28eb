#!/usr/bin/env python3
"""prefix_service.py: examples/prefix_service.c in Python, the same protocol.

A service that answers the prompts of many sessions and lets the KV cache,
not the program, remember what has been computed.
  prefix_service.py [-m MODEL] [-t THREADS] < requests.jsonl
A request per line: {"session": "alice", "prompt": "...", "max_tokens": 16}
("tokens": [ids] may replace "prompt"; "abort_after_layers": N cancels it
through the abort callback after N layer checks). Its answer, a line:
{"session", "text", "prompt_tokens", "reused_tokens", "ms"}, or on failure
{"session", "error", "cached_tokens"}. At the end of input, a line
{"summary": ...} says what each session holds, asking the cache.
"""
import argparse
import json
import sys
import time

import tokenkv

MAX_SESSIONS = 64


class Service:
    # The whole state: the model, the context (the cache) and the sessions'
    # names. No list of the tokens each session has seen: the cache knows them.
    def __init__(self, model_path, n_threads):
        self.model = tokenkv.Model(model_path)
        # batch_invariant (the default): a greedy answer never depends on what other sessions asked
        self.ctx = tokenkv.Context(self.model, n_seq_max=MAX_SESSIONS, n_threads=n_threads)
        self.greedy = tokenkv.Sampler(self.model.n_vocab, temperature=0)
        self.sessions = []  # session i is sequence i

    def session_seq(self, name):
        if name in self.sessions:
            return self.ctx.sequence(self.sessions.index(name))
        if len(self.sessions) == MAX_SESSIONS:
            return None
        self.sessions.append(name)
        return self.ctx.sequence(len(self.sessions) - 1)

    def answer(self, req, reply):
        session, max_tokens = req.get("session"), req.get("max_tokens", 16)
        if not isinstance(session, str) or not isinstance(max_tokens, int) or isinstance(max_tokens, bool) \
                or max_tokens < 0:
            return fail(reply, "TKV_ERR_INVALID", 'need a "session" and an integer max_tokens >= 0')
        seq = self.session_seq(session)
        if seq is None:
            return fail(reply, "TKV_ERR_FULL", "too many sessions")
        if isinstance(req.get("prompt"), str):
            prompt = self.model.tokenize(req["prompt"])
        else:
            prompt = [t if isinstance(t, int) else 0 for t in req.get("tokens") or []]
        if not prompt:
            return fail(reply, "TKV_ERR_INVALID", 'need a "prompt" or "tokens"')
        t0 = time.monotonic()
        after = req.get("abort_after_layers")
        self.ctx.abort_after_layers(after if isinstance(after, int) else -1)
        detok = self.model.detokenizer(continues=True)
        text = b""
        try:
            # The one call that matters: seq now holds exactly the prompt, reusing the longest
            # prefix any sequence computed before, decoding only the rest.
            reused, logits = seq.sync(prompt, return_logits=True)
            for i in range(max_tokens):
                t = self.greedy.sample(logits)
                if self.model.is_eog(t):
                    break
                text += detok.push(t)
                if i + 1 == max_tokens:
                    break  # the last token is never decoded: no one needs its logits
                logits = seq.decode([t])
        except tokenkv.TokenkvError as e:
            # A failed decode undid only itself; ask the cache what a retry would reuse.
            fail(reply, e.status, e.message)
            reply["cached_tokens"] = self.ctx.cache.match(prompt)
            return reply
        reply.update(text=text.decode("utf-8", "replace"), prompt_tokens=len(prompt), reused_tokens=reused,
                     ms=(time.monotonic() - t0) * 1e3)
        return reply

    def summary(self):
        sessions = []
        for i, name in enumerate(self.sessions):
            toks = self.ctx.sequence(i).tokens
            sessions.append({"session": name, "cached_tokens": len(toks), "text": self.model.detokenize(toks)})
        stats = self.ctx.cache.stats()
        try:
            self.ctx.cache.check()
            check = "TKV_OK"
        except tokenkv.TokenkvError as e:
            check = e.status
        return {"summary": {"sessions": sessions, "tokens_reused": stats["tokens_reused"],
                            "tokens_computed": stats["tokens_computed"], "check": check}}


def fail(reply, status, why):
    reply["error"] = f"{status}: {why}"
    return reply


def emit(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", default="../shared/models/stories260K.gguf", help="the model")
    ap.add_argument("-t", type=int, default=None, help="threads")
    args = ap.parse_args()
    try:
        sv = Service(args.m, args.t)
    except tokenkv.TokenkvError as e:
        sys.exit(str(e))
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except json.JSONDecodeError as e:
            emit(fail({}, "TKV_ERR_INVALID", str(e)))
            continue
        reply = {"session": req["session"]} if isinstance(req, dict) and "session" in req else {}
        emit(sv.answer(req, reply) if isinstance(req, dict) else fail(reply, "TKV_ERR_INVALID", "not an object"))
    emit(sv.summary())


if __name__ == "__main__":
    main()
