// Hardening, round 3 (issue 38): each finding of the adversarial round as a
// regression test (the disk tier's and the Redis store's have their own
// files). Request bombs: a body of 20,000 tools is checked in one linear
// pass (its duplicate found, its unique names all accepted), so it answers
// within a generous bound that the old quadratic check (about a minute per
// body) missed by far. Auth traps: empty keys and an admin key alone are
// refused at start. Small leaks: /props and /slots.
import assert from 'node:assert/strict';
import http from 'node:http';
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

// Issue 38, item 3: a client's share of the slots and of the queue. Clients
// are told apart by their address here (no --api-key): 127.0.0.1 and 127.0.0.2.

// A POST from localAddress; resolves {status, json}; abort() ends it (the server cancels the request).
function postFrom(server, localAddress, body) {
  let req;
  const done = new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    req = http.request({ host: '127.0.0.1', port: server.port, path: '/v1/completions', method: 'POST', localAddress,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      let out = '';
      res.on('data', (d) => { out += d; });
      res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(out) }));
    });
    req.on('error', (e) => (e.code === 'ECONNRESET' ? resolve({ status: 0 }) : reject(e)));
    req.end(data);
  });
  return { done, abort: () => req.destroy() };
}

async function metric(server, name) {
  const m = await get(server, '/metrics');
  return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(m.body)[1]);
}

async function until(server, name, atLeast) {
  for (let i = 0; i < 600; i++) {
    if (await metric(server, name) >= atLeast) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`${name} never reached ${atLeast}`);
}

serverSuite('a client\'s share of the slots', ['-np', '4'], (s) => {
  s.test('one client\'s n = 8 requests fill every slot; another client\'s probe runs before any of their choices ends',
    async (server) => {
      const long = { max_tokens: 900, n: 8, ignore_eos: true, temperature: 0 };
      const big = [0, 1].map((i) => postFrom(server, '127.0.0.1', { prompt: `Once upon a time ${i}`, ...long }));
      await until(server, 'tokenkv_running_requests', 4); // every slot holds one of its choices
      await until(server, 'tokenkv_cache_tokens_computed_total', 100); // and they generate
      const before = await metric(server, 'tokenkv_generated_tokens_total');
      const probe = await postFrom(server, '127.0.0.2', { prompt: 'The cat', max_tokens: 4 }).done;
      assert.equal(probe.status, 200);
      // a choice ends after 900 tokens; the generated count grows at the end of each: only the probe's
      const after = await metric(server, 'tokenkv_generated_tokens_total');
      assert.equal(after - before, probe.json.usage.completion_tokens, 'a choice of the big requests ended first');
      assert.ok(await metric(server, 'tokenkv_preemptions_total') >= 1);
      for (const b of big) b.abort();
      await Promise.all(big.map((b) => b.done));
    });
});

serverSuite('a client\'s share of the queue', ['-np', '1', '--max-queue', '4'], (s) => {
  s.test('one client holds half the queue at most; another still gets in', async (server) => {
    const long = { prompt: 'Once upon a time', max_tokens: 900, ignore_eos: true };
    const running = postFrom(server, '127.0.0.1', long);
    await until(server, 'tokenkv_running_requests', 1);
    const queued = [postFrom(server, '127.0.0.1', long), postFrom(server, '127.0.0.1', long)];
    await until(server, 'tokenkv_queue_depth', 2);
    const third = await postFrom(server, '127.0.0.1', long).done; // its share (2 of 4) is full
    assert.equal(third.status, 429);
    assertErrorBody(third.json, { type: 'rate_limit_error', code: 'queue_full' });
    const other = postFrom(server, '127.0.0.2', { prompt: 'The cat', max_tokens: 2 });
    await until(server, 'tokenkv_queue_depth', 3); // the other client is queued, not refused
    for (const r of [running, ...queued]) r.abort();
    assert.equal((await other.done).status, 200);
    await Promise.all([running, ...queued].map((r) => r.done));
  });
});

// Issue 38, item 4: a grammar whose parses multiply is refused when the request comes (a 400 naming the limit),
// instead of costing tens of milliseconds a token for as long as it runs.
serverSuite('grammars too ambiguous to run', [], (s) => {
  s.test('the issue\'s nested repetition is a 400 naming the limit; its one-repetition form runs', async (server) => {
    const r = await post(server, '/v1/completions',
      { prompt: 'Once', max_tokens: 4, grammar: 'root ::= (([a-z ]{0,50}){0,50}){0,40}' });
    assert.equal(r.status, 400, r.body);
    assertErrorBody(r.json, { param: 'grammar', code: 'invalid_value' });
    assert.match(r.json.error.message, /too ambiguous.*over the limit of 64/);
    const ok = await post(server, '/v1/completions', { prompt: 'Once', max_tokens: 4, grammar: 'root ::= [a-z ]{0,2000}' });
    assert.equal(ok.status, 200, ok.body);
    assert.match(ok.json.choices[0].text, /^[a-z ]*$/);
  });
});
