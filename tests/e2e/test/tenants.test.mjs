// Tenants: cache_salt namespaces are keyed with a secret of the server's
// own (kept in the cache directory, mode 0600), so a namespace id tells
// nobody which salt it came from, and two servers give one salt different
// ids; /v1/cache shows a caller only the namespace of the cache_salt it
// names, every namespace only with --admin-key; /metrics needs the API key
// unless --metrics-public.
import assert from 'node:assert/strict';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { post, startServer, stopAndCheck, tail } from '../lib/server.mjs';

const KEY = 'tenant-key';
const ADMIN = 'admin-key';
const A = 'Once upon a time, there was a little girl named Lily. She loved to play outside';
const B = 'Tom had a blue car. He liked to drive it fast down the hill to the old mill';

async function getWith(server, route, key) {
  const r = await fetch(`${server.url}${route}`, { headers: key ? { Authorization: `Bearer ${key}` } : {} });
  const body = await r.text();
  let json;
  try {
    json = JSON.parse(body);
  } catch { /* not JSON (metrics) */ }
  return { status: r.status, body, json };
}

const complete = (server, prompt, salt) =>
  post(server, '/v1/completions', { prompt, max_tokens: 4, temperature: 0, cache_salt: salt },
       { Authorization: `Bearer ${KEY}` });
const texts = (view) => view.tree.map((n) => n.text ?? '').join('|');
const namespaces = (view) => [...new Set(view.tree.map((n) => n.namespace))];

describe('tenants', () => {
  const dirs = [];
  const servers = [];
  const start = async (dir, extra = []) => {
    const s = await startServer(['--api-key', KEY, '--admin-key', ADMIN, '--cache-dir', dir, '--save-interval', '0',
                                 ...extra]);
    servers.push(s);
    return s;
  };
  const stop = async (s) => {
    servers.splice(servers.indexOf(s), 1);
    await stopAndCheck(s);
  };
  before(async () => {
    for (let i = 0; i < 2; i++) dirs.push(await mkdtemp(path.join(os.tmpdir(), 'tkv-tenants-')));
  });
  after(async () => {
    for (const s of servers) await stopAndCheck(s);
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('a tenant sees its own prompts only; the admin key sees all', async () => {
    const s = await start(dirs[0]);
    try {
      assert.equal((await complete(s, A, 'alice')).status, 200);
      assert.equal((await complete(s, B, 'bob')).status, 200);
      const alice = (await getWith(s, '/v1/cache?detail=1&cache_salt=alice', KEY)).json;
      assert.ok(texts(alice).includes('Lily') && !texts(alice).includes('Tom'), texts(alice));
      assert.equal(namespaces(alice).length, 1);
      const bob = (await getWith(s, '/v1/cache?detail=1&cache_salt=bob', KEY)).json;
      assert.ok(texts(bob).includes('Tom') && !texts(bob).includes('Lily'), texts(bob));
      assert.notDeepEqual(namespaces(alice), namespaces(bob));
      const none = (await getWith(s, '/v1/cache?detail=1', KEY)).json;
      assert.equal(none.tree.length, 0, 'the default namespace holds neither');
      const all = (await getWith(s, '/v1/cache?detail=1', ADMIN)).json;
      assert.ok(texts(all).includes('Lily') && texts(all).includes('Tom'));
      // the admin key does what the API key does
      assert.equal((await post(s, '/v1/completions', { prompt: 'x', max_tokens: 1 },
                               { Authorization: `Bearer ${ADMIN}` })).status, 200);
      // /metrics needs a key here
      assert.equal((await getWith(s, '/metrics')).status, 401);
      assert.equal((await getWith(s, '/metrics', KEY)).status, 200);
      assert.equal((await getWith(s, '/health')).status, 200);
      // the key is the server's own, kept with the cache
      assert.equal((await stat(path.join(dirs[0], 'secret'))).mode & 0o777, 0o600);
      // a restart on the same directory keeps the ids (and reuses the saved prefix)
      const before = namespaces(alice)[0];
      await stop(s);
      const again = await start(dirs[0]);
      const r = await complete(again, A, 'alice');
      assert.ok(r.json.usage.prompt_tokens_details.cached_tokens > 0, 'alice\'s prefix came back from the disk');
      assert.deepEqual(namespaces((await getWith(again, '/v1/cache?cache_salt=alice', KEY)).json), [before]);
      // another server (another directory, another key) gives the same salt another id
      const other = await start(dirs[1]);
      await complete(other, A, 'alice');
      const id2 = namespaces((await getWith(other, '/v1/cache?cache_salt=alice', KEY)).json);
      assert.equal(id2.length, 1);
      assert.notEqual(id2[0], before);
    } catch (e) {
      e.message = `${e.message}\n--- server stderr ---\n${tail(servers.map((x) => x.log()).join('\n---\n'))}`;
      throw e;
    }
  });

  it('--metrics-public opens /metrics, nothing else', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'tkv-tenants-'));
    dirs.push(dir);
    const s = await start(dir, ['--metrics-public']);
    assert.equal((await getWith(s, '/metrics')).status, 200);
    assert.equal((await getWith(s, '/v1/cache')).status, 401);
    await stop(s);
  });
});
