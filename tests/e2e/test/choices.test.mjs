// n choices, echo and suffix with the official client on stories260K: the
// choices share the prompt (usage counts it once; /metrics shows the cells
// the other choices reused), greedy choices are identical, seeded sampled
// ones differ from each other and repeat with the same seed, a stream's
// chunks by index reassemble into the non-streamed choices; echo puts the
// prompt's text before the completion; suffix needs fill-in-the-middle
// tokens, which this model lacks (a 400 naming it).
import assert from 'node:assert/strict';
import { MODEL_ID, OpenAI, assertErrorBody, get, post, serverSuite, tokenize } from '../lib/server.mjs';

const PROMPT = 'Once upon a time, a little fox found a shiny red ball in the garden and';

async function cachedTotal(server) {
  const m = await get(server, '/metrics');
  return Number(/^tokenkv_cached_prompt_tokens_total (\d+)/m.exec(m.body)[1]);
}

serverSuite('n, echo and suffix', [], (s) => {
  s.test('n = 3 greedy: three identical choices, the prompt counted once and computed once', async (server) => {
    const client = server.client();
    const prompt = `${PROMPT} ran`;
    const before = await cachedTotal(server);
    const r = await client.completions.create({ model: MODEL_ID, prompt, n: 3, max_tokens: 12, temperature: 0 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    assert.equal(new Set(r.choices.map((c) => c.text)).size, 1);
    const one = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 12, temperature: 0 });
    assert.equal(r.choices[0].text, one.choices[0].text);
    const ids = await tokenize(server, prompt);
    assert.equal(r.usage.prompt_tokens, ids.length);
    assert.equal(r.usage.completion_tokens, 36);
    assert.equal(r.usage.total_tokens, ids.length + 36);
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0); // a new prompt: nothing was cached on arrival
    // the two other choices found the first one's prompt cells (all but the last token, which gives their logits)
    const after = await cachedTotal(server);
    assert.ok(after - before >= 2 * (ids.length - 1) + (ids.length - 1), `cached ${after - before}`);
  });

  s.test('n = 3 sampled with a seed: the choices differ, and repeat with the seed', async (server) => {
    const client = server.client();
    const body = { model: MODEL_ID, prompt: PROMPT, n: 3, max_tokens: 16, temperature: 1, seed: 42 };
    const a = await client.completions.create(body);
    const b = await client.completions.create(body);
    assert.equal(a.choices.length, 3);
    assert.ok(new Set(a.choices.map((c) => c.text)).size >= 2, JSON.stringify(a.choices));
    assert.deepEqual(b.choices.map((c) => c.text), a.choices.map((c) => c.text));
    const chat = await client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: PROMPT }],
      n: 2, max_tokens: 8, seed: 1 });
    assert.deepEqual(chat.choices.map((c) => c.index), [0, 1]);
    for (const c of chat.choices) assert.equal(c.message.role, 'assistant');
  });

  s.test('streamed n = 3: the chunks by index reassemble into the non-streamed choices', async (server) => {
    const client = server.client();
    for (const chat of [false, true]) {
      const body = chat
        ? { model: MODEL_ID, messages: [{ role: 'user', content: PROMPT }], n: 3, max_tokens: 10, seed: 9 }
        : { model: MODEL_ID, prompt: PROMPT, n: 3, max_tokens: 10, seed: 9 };
      const create = (x) => (chat ? client.chat.completions.create(x) : client.completions.create(x));
      const whole = await create(body);
      const texts = [];
      const reasons = [];
      let usage = null;
      for await (const chunk of await create({ ...body, stream: true, stream_options: { include_usage: true } })) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
          texts[c.index] = (texts[c.index] ?? '') + ((chat ? c.delta.content : c.text) ?? '');
          if (c.finish_reason) reasons[c.index] = c.finish_reason;
        }
      }
      assert.deepEqual(texts, whole.choices.map((c) => (chat ? c.message.content : c.text)));
      assert.deepEqual(reasons, whole.choices.map((c) => c.finish_reason));
      assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
      assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
    }
  });

  s.test('echo: the prompt, then the completion (streamed too)', async (server) => {
    const client = server.client();
    const plain = await client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 8, temperature: 0 });
    const echoed = await client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 8, temperature: 0,
      echo: true });
    assert.equal(echoed.choices[0].text, PROMPT + plain.choices[0].text);
    let streamed = '';
    for await (const c of await client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 8,
      temperature: 0, echo: true, stream: true })) streamed += c.choices[0]?.text ?? '';
    assert.equal(streamed, echoed.choices[0].text);
    // a prompt of token ids echoes their text
    const ids = await tokenize(server, PROMPT);
    const byIds = await client.completions.create({ model: MODEL_ID, prompt: ids, max_tokens: 8, temperature: 0,
      echo: true });
    assert.equal(byIds.choices[0].text, echoed.choices[0].text);
    // echo: false is the plain completion
    const off = await client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 8, temperature: 0,
      echo: false });
    assert.equal(off.choices[0].text, plain.choices[0].text);
  });

  s.test('suffix on a model without fill-in-the-middle tokens: a 400 naming suffix', async (server) => {
    const r = await post(server, '/v1/completions', { prompt: PROMPT, suffix: ' The end.', max_tokens: 4 });
    assert.equal(r.status, 400, r.body);
    assertErrorBody(r.json, { param: 'suffix' });
    assert.match(r.json.error.message, /fill-in-the-middle/);
    await assert.rejects(server.client().completions.create({ model: MODEL_ID, prompt: PROMPT, suffix: 'x' }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'suffix');
    // an empty suffix asks for nothing
    const ok = await post(server, '/v1/completions', { prompt: PROMPT, suffix: '', max_tokens: 2 });
    assert.equal(ok.status, 200, ok.body);
  });
});
