// logprobs: chat's logprobs/top_logprobs and the completions' legacy
// logprobs N. A generated token's logprob is the log-softmax of the model's
// logits (checked against `tokenkv logits` for the first one), greedy picks
// the top alternative, alternatives come best first, and the tokens spell
// the text; streamed, the chunks' logprobs add up to the same.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { BIN, MODEL, MODEL_ID, assertErrorBody, post, serverSuite } from '../lib/server.mjs';

const PROMPT = 'Once upon a time, there was a little girl named';

function logSoftmax(row) {
  const mx = Math.max(...row);
  const lse = mx + Math.log(row.reduce((s, x) => s + Math.exp(x - mx), 0));
  return row.map((x) => x - lse);
}

serverSuite('logprobs', [], (s) => {
  s.test('chat: logprobs and top_logprobs', async (server) => {
    const r = await server.client().chat.completions.create({
      model: MODEL_ID, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 12, temperature: 0,
      logprobs: true, top_logprobs: 3 });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, r.usage.completion_tokens);
    for (const c of content) {
      assert.ok(c.logprob <= 0);
      assert.equal(c.top_logprobs.length, 3);
      assert.equal(c.top_logprobs[0].token, c.token, 'greedy takes the best');
      assert.ok(Math.abs(c.top_logprobs[0].logprob - c.logprob) < 1e-6);
      for (let k = 1; k < 3; k++) assert.ok(c.top_logprobs[k].logprob <= c.top_logprobs[k - 1].logprob);
      assert.ok(c.top_logprobs.reduce((s, t) => s + Math.exp(t.logprob), 0) <= 1 + 1e-5);
      assert.deepEqual(Buffer.from(c.bytes).toString('utf8'), c.token);
    }
    const joined = content.map((c) => c.token).join('');
    const text = r.choices[0].message.content;
    assert.ok(joined === text || joined === ` ${text}`, `${JSON.stringify(joined)} vs ${JSON.stringify(text)}`);
    // streamed: the chunks' logprobs put together are the same list
    const stream = await server.client().chat.completions.create({
      model: MODEL_ID, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 12, temperature: 0,
      logprobs: true, top_logprobs: 3, stream: true });
    const streamed = [];
    for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    assert.deepEqual(streamed, content);
  });

  s.test('completions: the legacy shape, and the first logprob from the model itself', async (server) => {
    const r = await post(server, '/v1/completions', { prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 2 });
    assert.equal(r.status, 200, r.body);
    const lp = r.json.choices[0].logprobs;
    assert.equal(lp.tokens.join(''), r.json.choices[0].text);
    assert.equal(lp.token_logprobs.length, lp.tokens.length);
    assert.equal(lp.text_offset[0], 0);
    for (let i = 1; i < lp.text_offset.length; i++)
      assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + lp.tokens[i - 1].length);
    for (const t of lp.top_logprobs) assert.ok(Object.keys(t).length >= 1 && Object.keys(t).length <= 2);
    // the oracle: the CLI's logits of the prompt's last position, log-softmaxed
    const { stdout } = await promisify(execFile)(BIN, ['logits', '-m', MODEL, '-p', PROMPT, '-t', '1'],
                                                 { maxBuffer: 1 << 26 });
    const rows = JSON.parse(stdout).logits;
    const ls = logSoftmax(rows[rows.length - 1]);
    const best = ls.indexOf(Math.max(...ls));
    assert.ok(Math.abs(lp.token_logprobs[0] - ls[best]) < 2e-3, `${lp.token_logprobs[0]} vs ${ls[best]}`);
  });

  s.test('streamed, and bad values', async (server) => {
    // completions streamed: the legacy columns, chunk by chunk, make the whole
    const whole = (await post(server, '/v1/completions', { prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 2 }))
      .json.choices[0].logprobs;
    const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 2, stream: true }) });
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: {'))
      .map((e) => JSON.parse(e.slice(6)).choices[0]?.logprobs).filter(Boolean);
    assert.deepEqual(events.flatMap((l) => l.tokens), whole.tokens);
    assert.deepEqual(events.flatMap((l) => l.token_logprobs), whole.token_logprobs);
    assert.deepEqual(events.flatMap((l) => l.text_offset), whole.text_offset);
    for (const [body, param] of [[{ prompt: 'x', logprobs: 6 }, 'logprobs'], [{ prompt: 'x', logprobs: -1 }, 'logprobs']]) {
      const r = await post(server, '/v1/completions', { max_tokens: 2, ...body });
      assert.equal(r.status, 400, r.body);
      assertErrorBody(r.json, { param });
    }
    for (const [extra, param] of [[{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
      [{ top_logprobs: 2 }, 'top_logprobs'], [{ logprobs: 'yes' }, 'logprobs']]) {
      const r = await post(server, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 2,
                                                             ...extra });
      assert.equal(r.status, 400, r.body);
      assertErrorBody(r.json, { param });
    }
  });
});
