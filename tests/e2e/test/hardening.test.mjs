// Hardening, round 3 (issue 38): each finding of the adversarial round as a
// regression test (the disk tier's and the Redis store's have their own
// files). Request bombs: a body of 20,000 tools is checked in one linear
// pass (its duplicate found, its unique names all accepted), so it answers
// within a generous bound that the old quadratic check (about a minute per
// body) missed by far. Auth traps: empty keys and an admin key alone are
// refused at start. Small leaks: /props and /slots.
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';
import { MODEL, assertErrorBody, get, post, serverSuite, startServer } from '../lib/server.mjs';

const N_TOOLS = 20000;

// p, or a failure naming what did not answer within ms (a hang guard, far above the expected time)
function within(ms, what, p) {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, guard]).finally(() => clearTimeout(timer));
}

// n tools f0 .. f{n-1}, small enough that 20,000 fit the default 1 MiB body limit
function manyTools(n) {
  const tools = [];
  for (let i = 0; i < n; i++) tools.push({ type: 'function', function: { name: `f${i}` } });
  return tools;
}

serverSuite('request parts are checked in linear time', [], (s) => {
  const chat = (extra) => ({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, ...extra });

    // the hang guards are 50x what the linear check needs on a busy machine; the quadratic one took 10-60 s
  s.test('four bodies of 20,000 tools, the first repeated last: each a 400 naming the repeat', async (server) => {
    const tools = manyTools(N_TOOLS);
    tools.push({ type: 'function', function: { name: 'f0' } });
    const body = JSON.stringify(chat({ tools }));
    const rs = await within(30000, 'four 20,000-tool bodies',
      Promise.all([0, 1, 2, 3].map(() => post(server, '/v1/chat/completions', body))));
    for (const r of rs) {
      assert.equal(r.status, 400, r.body);
      assertErrorBody(r.json, { param: 'tools' });
      assert.equal(r.json.error.message, `tools[${N_TOOLS}]: the function 'f0' is defined twice`);
    }
  });

  s.test('20,000 distinct tools pass the check (tool_choice is then looked up among them)', 
    async (server) => {
      const r = await within(30000, 'the 20,000-tool body', post(server, '/v1/chat/completions',
        chat({ tools: manyTools(N_TOOLS), tool_choice: { type: 'function', function: { name: 'absent' } } })));
      assert.equal(r.status, 400, r.body);
      assertErrorBody(r.json, { param: 'tool_choice' });
      assert.match(r.json.error.message, /names the function 'absent', which is not in 'tools'/);
    });

  s.test('names are compared exactly: case and prefixes differ, a repeat in the middle is found', async (server) => {
    const tools = ['get', 'Get', 'get_x', 'ge', 'x', 'get_x', 'y'].map((name) => ({ type: 'function', function: { name } }));
    const r = await post(server, '/v1/chat/completions', chat({ tools }));
    assert.equal(r.status, 400, r.body);
    assert.equal(r.json.error.message, "tools[5]: the function 'get_x' is defined twice");
    const ok = await post(server, '/v1/chat/completions', chat({ tools: tools.slice(0, 5) }));
    assert.equal(ok.status, 200, ok.body);
  });
});

// Auth traps: an empty key would turn authentication off, an admin key without an API key would guard nothing
describe('keys that would leave the server open are refused at start', () => {
  it('--api-key "" and TOKENKV_API_KEY= (empty)', async () => {
    await assert.rejects(startServer(['--api-key', '']), /--api-key is empty: give a key/);
    process.env.TOKENKV_API_KEY = '';
    try {
      await assert.rejects(startServer([]), /TOKENKV_API_KEY is empty: give a key/);
    } finally {
      delete process.env.TOKENKV_API_KEY;
    }
    await assert.rejects(startServer(['--api-key', 'k', '--admin-key', '']), /--admin-key is empty/);
  });

  it('--admin-key without --api-key', async () => {
    await assert.rejects(startServer(['--admin-key', 'admin']), /--admin-key needs --api-key/);
  });
});

// Small leaks: /props names the model's file, not its path; /slots shows a caller its own namespace's requests
serverSuite('what a caller sees of the host and of other tenants', ['--api-key', 'k', '--admin-key', 'admin', '-np', '2'],
  (s) => {
    s.test('/props: the model file name, no directory', async (server) => {
      const r = await get(server, '/props', server.auth);
      assert.equal(r.status, 200, r.body);
      assert.equal(r.json.model_path, path.basename(MODEL));
      assert.ok(!r.json.model_path.includes('/'));
      assert.ok(!r.body.includes(path.dirname(MODEL)), r.body);
    });

    s.test('/v1/cache: tokens=1 and check=1 need the admin key when keys guard the server', async (server) => {
      for (const flag of ['tokens', 'check']) {
        const r = await get(server, `/v1/cache?${flag}=1`, server.auth);
        assert.equal(r.status, 403, r.body);
        assertErrorBody(r.json, { param: flag, code: 'admin_only' });
        assert.match(r.json.error.message, new RegExp(`'${flag}=1' needs the admin key`));
        const admin = await get(server, `/v1/cache?${flag}=1`, { Authorization: 'Bearer admin' });
        assert.equal(admin.status, 200, admin.body);
      }
      const plain = await get(server, '/v1/cache?detail=1', server.auth);
      assert.equal(plain.status, 200, plain.body);
    });

    s.test("/slots: another namespace's running request shows only as busy", async (server) => {
      // a long streamed request of tenant-a, held running while the views are read
      const ac = new AbortController();
      const res = await fetch(`${server.url}/v1/completions`, {
        method: 'POST', signal: ac.signal, headers: { 'Content-Type': 'application/json', ...server.auth },
        body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4000, stream: true, ignore_eos: true,
                               cache_salt: 'tenant-a' }),
      });
      assert.equal(res.status, 200);
      const reader = res.body.getReader();
      const first = new TextDecoder().decode((await reader.read()).value);
      const id = /"id":"([^"]+)"/.exec(first)[1];
      try {
        const busy = async (route, headers) => {
          const r = await get(server, route, headers);
          assert.equal(r.status, 200, r.body);
          return r;
        };
        const other = await busy('/slots', server.auth); // the default namespace's caller
        assert.ok(!other.body.includes(id), other.body);
        const running = other.json.filter((x) => x.is_processing);
        assert.equal(running.length, 1, other.body);
        assert.equal(running[0].request, null);
        assert.equal(running[0].n_prompt_tokens, undefined);
        assert.equal(running[0].params, undefined);
        const own = await busy('/slots?cache_salt=tenant-a', server.auth);
        assert.ok(own.json.some((x) => x.request === id), own.body);
        const admin = await busy('/slots', { Authorization: 'Bearer admin' });
        assert.ok(admin.json.some((x) => x.request === id && x.n_prompt_tokens > 0), admin.body);
      } finally {
        ac.abort();
        await reader.cancel().catch(() => {});
      }
    });
  });
