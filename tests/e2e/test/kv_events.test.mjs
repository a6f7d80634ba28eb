// --kv-events: a subscriber (lib/kv_events_sub.py: Debian's python3-zmq,
// python3-msgpack and python3-xxhash) replays the published events into the
// set of cached token blocks and, after traffic that evicts (a cache of 256
// cells), finds exactly the blocks GET /v1/cache?tokens=1 shows: the same
// hashes (computed by the subscriber from the nodes' namespaces and token
// ids as kv_events.h documents), the same tokens, no gap in the sequence
// numbers, no block stored twice or removed unstored. The token ids are
// published only where asked for (--kv-events-tokens, with an API key) and
// never for a cache_salt's namespace: an unauthenticated subscriber would
// read the prompts.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { it } from 'node:test';
import { get, post, startServer, stopAndCheck, tail } from '../lib/server.mjs';

const SUB = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'kv_events_sub.py');
const ADMIN = 'admin-key';
const KEY = 'api-key';
const BS = 4;

const STEMS = [
  'Once upon a time, there was a little girl named Lily. She loved to play outside',
  'Tom had a blue car. He liked to drive it fast down the hill to the old mill',
  'The sun was warm and the birds were singing in the tall green trees by the lake',
];
const ENDS = ['and then', 'one day she saw', 'but the dog', 'so they went home', 'with a big smile'];

/** A free TCP port on loopback (closed again: the server binds it). */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

function startSubscriber(endpoint) {
  const child = spawn('/usr/bin/python3', [SUB, endpoint, String(BS)], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { err += d; });
  const lines = [];
  let wake = null;
  child.stdout.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) {
      lines.push(out.slice(0, i));
      out = out.slice(i + 1);
      if (wake) wake();
    }
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const nextLine = async (ms) => {
    const until = Date.now() + ms;
    while (!lines.length) {
      if (Date.now() > until) throw new Error(`subscriber: no output within ${ms} ms; stderr:\n${err}`);
      await Promise.race([new Promise((r) => { wake = r; }), new Promise((r) => setTimeout(r, 100)), exited]);
    }
    return lines.shift();
  };
  return { child, nextLine, stderr: () => err };
}

/** Traffic in two namespaces (the second salted) that evicts, then the subscriber's report against /v1/cache. */
async function replay(extraArgs) {
  const port = await freePort();
  const endpoint = `tcp://127.0.0.1:${port}`;
  const server = await startServer(['--ctx', '256', '-np', '2', '--api-key', KEY, '--admin-key', ADMIN,
                                    '--kv-events', endpoint, '--kv-events-block-size', String(BS), ...extraArgs]);
  const sub = startSubscriber(endpoint);
  try {
    assert.equal(await sub.nextLine(10000), 'ready');
    // requests that share stems, in two namespaces, more than 256 cells in all
    let n = 0;
    for (let round = 0; round < 3; round++) {
      await Promise.all([0, 1].map(async (lane) => {
        for (let i = 0; i < ENDS.length; i++) {
          const prompt = `${STEMS[(i + lane + round) % STEMS.length]} ${ENDS[(i * 3 + round) % ENDS.length]}`;
          const r = await post(server, '/v1/completions', {
            prompt, max_tokens: 12, temperature: 0, ...(lane ? { cache_salt: 'tenant-b' } : {}),
          }, server.auth);
          assert.equal(r.status, 200, r.body);
          n++;
        }
      }));
    }
    const view = await get(server, '/v1/cache?tokens=1', { Authorization: `Bearer ${ADMIN}` });
    assert.equal(view.status, 200, view.body);
    assert.ok(view.json.evictions > 0, `no eviction after ${n} requests: ${view.body.slice(0, 400)}`);
    sub.child.stdin.write(`${JSON.stringify(view.json)}\n`);
    const report = JSON.parse(await sub.nextLine(20000));
    if (process.env.TKV_E2E_VERBOSE) console.log(report);
    assert.equal(report.n_errors, 0, JSON.stringify(report));
    assert.ok(report.removed > 0, JSON.stringify(report));
    assert.ok(report.cache_blocks > 10, JSON.stringify(report));
    assert.equal(report.missing, 0, JSON.stringify(report));
    assert.equal(report.extra, 0, JSON.stringify(report));
    assert.equal(report.wrong_tokens, 0, JSON.stringify(report));
    assert.equal(report.event_blocks, report.cache_blocks);
    assert.ok(report.salted_with_ids + report.salted_without_ids > 0, `no salted block: ${JSON.stringify(report)}`);
    assert.equal(report.salted_with_ids, 0, `a salted namespace's token ids were published: ${JSON.stringify(report)}`);
    return report;
  } catch (e) {
    e.message = `${e.message}\n--- subscriber stderr ---\n${sub.stderr()}\n--- server ---\n${tail(server.log())}`;
    throw e;
  } finally {
    sub.child.kill();
    await stopAndCheck(server);
  }
}

it('the published KV events rebuild the cached blocks /v1/cache shows (--kv-events-tokens: ids but salted ones)',
  async () => {
    const report = await replay(['--kv-events-tokens']);
    assert.ok(report.plain_with_ids > 0, JSON.stringify(report));
    assert.equal(report.plain_without_ids, 0, JSON.stringify(report));
  });

it('with an API key and no --kv-events-tokens, the events carry hashes only', async () => {
  const report = await replay([]);
  assert.ok(report.plain_without_ids > 0, JSON.stringify(report));
  assert.equal(report.plain_with_ids, 0, `token ids published to an unauthenticated subscriber: ${JSON.stringify(report)}`);
});
