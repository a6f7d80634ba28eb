#!/usr/bin/python3
"""A KV-event subscriber for tests/e2e/test/kv_events.test.mjs.

Usage: kv_events_sub.py ENDPOINT BLOCK_SIZE

Subscribes to ENDPOINT (ZeroMQ SUB), prints "ready" once connected, and
replays every KVEventBatch (vLLM's format: msgpack arrays, tagged events)
into the set of cached blocks, checking as it goes that the sequence
numbers have no gap, that a block is never stored twice or removed unstored,
and that a stored block's parent is cached. When a line arrives on stdin
(the JSON of GET /v1/cache?tokens=1 with the admin key) it waits for the
events to go quiet, computes the blocks that the cache's nodes hold, hashing
them as kv_events.h documents (independently of the server's code), and
prints one JSON line comparing the two. A BlockStored event may withhold
its token ids (an empty array: a salted namespace always, every namespace
when the server has an API key and no --kv-events-tokens): the report
counts the blocks published with ids per kind of namespace.
"""
import json
import select
import sys
import time

import msgpack
import xxhash
import zmq


def ns_seed(ns):
    return xxhash.xxh3_64_intdigest(ns.to_bytes(8, "little"))


def block_hash(parent, tokens):
    data = b"".join(t.to_bytes(4, "little", signed=True) for t in tokens)
    return xxhash.xxh3_64_intdigest(data, seed=parent)


def expected_blocks(view, bs):
    """hash -> (tokens, namespace) of every full block the cache's nodes hold."""
    nodes = {n["id"]: n for n in view["tree"]}
    out = {}
    for n in view["tree"]:
        chain = []
        a = n
        while a is not None:
            chain.append(a)
            a = nodes[a["parent"]] if a["parent"] is not None else None
        path = [t for a in reversed(chain) for t in a["token_ids"]]
        assert len(path) == n["depth"] + n["tokens"], "a node's path has the wrong length"
        ns = int(n["namespace"], 16)
        h = ns_seed(ns)
        for k in range((n["depth"] + n["tokens"]) // bs):
            h = block_hash(h, path[k * bs:(k + 1) * bs])
            if (k + 1) * bs > n["depth"]:  # the block ends in this node's run
                out[h] = (path[k * bs:(k + 1) * bs], ns)
    return out


def main():
    endpoint, bs = sys.argv[1], int(sys.argv[2])
    sock = zmq.Context().socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)
    time.sleep(0.5)  # a PUB drops what it sends before the subscription arrives
    print("ready", flush=True)
    blocks = {}  # hash -> (parent, tokens)
    counts = {"batches": 0, "stored": 0, "removed": 0, "cleared": 0}
    errors = []
    next_seq = 0
    view = None
    quiet_since = None
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while True:
        ready = dict(poller.poll(100))
        if sock in ready:
            topic, seq, payload = sock.recv_multipart()
            seq = int.from_bytes(seq, "big")
            if seq != next_seq:
                errors.append(f"sequence {seq}, expected {next_seq}")
            next_seq = seq + 1
            ts, events = msgpack.unpackb(payload, raw=False)
            assert isinstance(ts, float)
            counts["batches"] += 1
            for ev in events:
                tag = ev[0]
                if tag == "BlockStored":
                    _, hashes, parent, token_ids, size, lora_id, medium = ev
                    assert size == bs and len(token_ids) in (0, bs * len(hashes)) and lora_id is None
                    assert medium == "CPU"
                    for i, h in enumerate(hashes):
                        p = parent if i == 0 else hashes[i - 1]
                        if h in blocks:
                            errors.append(f"block {h:x} stored twice")
                        if p is not None and p not in blocks:
                            errors.append(f"block {h:x} stored after parent {p:x}, which is not cached")
                        blocks[h] = (p, token_ids[i * bs:(i + 1) * bs] if token_ids else None)
                    counts["stored"] += len(hashes)
                elif tag == "BlockRemoved":
                    _, hashes, medium = ev
                    for h in hashes:
                        if blocks.pop(h, None) is None:
                            errors.append(f"block {h:x} removed, never stored")
                    counts["removed"] += len(hashes)
                elif tag == "AllBlocksCleared":
                    blocks.clear()
                    counts["cleared"] += 1
                else:
                    errors.append(f"unknown event {tag}")
            quiet_since = time.time()
        if view is None and select.select([sys.stdin], [], [], 0)[0]:
            line = sys.stdin.readline()
            if not line:
                return
            view = json.loads(line)
            quiet_since = time.time()
        if view is not None and time.time() - quiet_since > 0.5:
            break
    want = expected_blocks(view, bs)
    missing = [h for h in want if h not in blocks]
    extra = [h for h in blocks if h not in want]
    present = [h for h in want if h in blocks]
    # ids published that are not the block's; blocks of the default namespace (0) and of salted ones by
    # whether their ids were published
    wrong_tokens = [h for h in present if blocks[h][1] is not None and blocks[h][1] != want[h][0]]
    kinds = {"plain_with_ids": 0, "plain_without_ids": 0, "salted_with_ids": 0, "salted_without_ids": 0}
    for h in present:
        kinds[("plain" if want[h][1] == 0 else "salted") + ("_with_ids" if blocks[h][1] is not None else "_without_ids")] += 1
    print(json.dumps({**counts, **kinds, "errors": errors[:20], "n_errors": len(errors), "event_blocks": len(blocks),
                      "cache_blocks": len(want), "missing": len(missing), "extra": len(extra),
                      "wrong_tokens": len(wrong_tokens)}), flush=True)


if __name__ == "__main__":
    main()
