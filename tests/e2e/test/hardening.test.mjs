// Hardening, round 3 (issue 38): each finding of the adversarial round as a
// regression test. Request bombs: a body of 20,000 tools is checked in one
// linear pass (its duplicate found, its unique names all accepted), so it
// answers within a generous bound that the old quadratic check (about a
// minute per body) missed by far.
import assert from 'node:assert/strict';
import { assertErrorBody, post, serverSuite } from '../lib/server.mjs';

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
