// Constrained generation through the server: the `grammar` field (GBNF, as
// llama-server takes it) and --grammar-file. Whatever the model would say,
// the text follows the grammar, and a complete sentence ends the answer with
// finish_reason "stop"; a bad grammar is a 400 that says where.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { assertErrorBody, post, serverSuite, startServer, stopAndCheck } from '../lib/server.mjs';

const YES_NO = 'root ::= "yes" | "no"';
// a small JSON object: {"n": <digits>, "ok": true|false}, spaces bounded
const OBJ = String.raw`root ::= "{" ws "\"n\":" ws num "," ws "\"ok\":" ws bool ws "}"
num ::= [1-9] [0-9]{0,5}
bool ::= "true" | "false"
ws ::= " "?`;

serverSuite('grammars', [], (s) => {
  s.test('completions and chat follow the grammar, greedy and sampled', async (server) => {
    for (const temperature of [0, 1.0]) {
      for (let i = 0; i < 3; i++) {
        const r = await post(server, '/v1/completions', { prompt: `Once upon a time ${i}`, max_tokens: 40, temperature,
                                                          seed: i, grammar: YES_NO });
        assert.equal(r.status, 200, r.body);
        assert.ok(['yes', 'no'].includes(r.json.choices[0].text), JSON.stringify(r.json.choices[0].text));
        assert.equal(r.json.choices[0].finish_reason, 'stop');
        const o = await post(server, '/v1/chat/completions', { messages: [{ role: 'user', content: `Tell me ${i}` }],
                                                                max_tokens: 60, temperature, seed: i, grammar: OBJ });
        assert.equal(o.status, 200, o.body);
        const text = o.json.choices[0].message.content;
        const v = JSON.parse(text);
        assert.deepEqual(Object.keys(v), ['n', 'ok']);
        assert.ok(Number.isInteger(v.n) && v.n >= 1 && v.n < 1e6, text);
        assert.equal(typeof v.ok, 'boolean');
        assert.equal(o.json.choices[0].finish_reason, 'stop');
      }
    }
  });

  s.test('logit_bias and OpenAI penalties steer the sampler', async (server) => {
    // +100 on one token: every generated token is it (greedy); -100 on the greedy choice: never it
    const forced = await post(server, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 6, temperature: 0,
                                                           return_tokens: true, logit_bias: { 300: 100 }, ignore_eos: true });
    assert.equal(forced.status, 200, forced.body);
    assert.deepEqual(forced.json.choices[0].tokens, [300, 300, 300, 300, 300, 300]);
    const free = await post(server, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 1, temperature: 0,
                                                         return_tokens: true });
    const first = free.json.choices[0].tokens[0];
    const banned = await post(server, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 1, temperature: 0,
                                                           return_tokens: true, logit_bias: { [first]: -100 } });
    assert.notEqual(banned.json.choices[0].tokens[0], first);
    // a frequency penalty of 2 keeps greedy generation from repeating one token 6 times running
    const rep = await post(server, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 6, temperature: 0,
                                                        return_tokens: true, logit_bias: { 300: 5 },
                                                        frequency_penalty: 2, ignore_eos: true });
    assert.ok(new Set(rep.json.choices[0].tokens).size > 1, JSON.stringify(rep.json.choices[0].tokens));
  });

  s.test('a malformed grammar or undefined rule is a 400 that says where', async (server) => {
    for (const grammar of ['root ::= "unterminated', 'root ::= missing-rule', 'root ::= ( "a" ', 42]) {
      const r = await post(server, '/v1/completions', { prompt: 'x', max_tokens: 2, grammar });
      assert.equal(r.status, 400, r.body);
      assertErrorBody(r.json, { param: 'grammar' });
      if (typeof grammar === 'string') assert.match(r.json.error.message, /line \d+ column \d+/);
    }
  });
});

describe('--grammar-file', () => {
  let dir = null;
  let server = null;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'tkv-grammar-'));
    await writeFile(path.join(dir, 'g.gbnf'), `${YES_NO}\n`);
    server = await startServer(['--grammar-file', path.join(dir, 'g.gbnf')]);
  });
  after(async () => {
    if (server) await stopAndCheck(server);
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  it('holds requests without a grammar of their own', async () => {
    const r = await post(server, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 20, temperature: 0 });
    assert.ok(['yes', 'no'].includes(r.json.choices[0].text), r.body);
    const own = await post(server, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 20, temperature: 0,
                                                        grammar: 'root ::= "maybe"' });
    assert.equal(own.json.choices[0].text, 'maybe');
  });
});
