// Bad requests get OpenAI-style errors (raw fetch, then the client), API keys
// are enforced, and the server goes on answering correctly afterwards.
import assert from 'node:assert/strict';
import {
  MODEL_ID, OpenAI, assertErrorBody, continuation, get, post, serverSuite,
} from '../lib/server.mjs';

const PROMPT = 'Once upon a time';
const MAX_TOKENS = 64; // the server's --max-tokens

serverSuite('bad requests', ['--max-tokens', String(MAX_TOKENS)], (s) => {
  const ok = { prompt: PROMPT, max_tokens: 16, temperature: 0 };
  let before;

  s.test('a valid request, for comparison', async (server) => {
    const r = await post(server, '/v1/completions', ok);
    assert.equal(r.status, 200, r.body);
    before = r.json.choices[0].text;
    assert.equal(before, await continuation(server, PROMPT, 16));
  });

  s.test('broken JSON -> 400', async (server) => {
    for (const body of ['{"prompt": "x", ', 'not json', '', '[1, 2', '{"prompt": "a"} trailing']) {
      const r = await post(server, '/v1/completions', body);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.body}`);
      assert.match(r.headers.get('content-type'), /^application\/json/);
      assertErrorBody(r.json);
    }
    const notObject = await post(server, '/v1/completions', '[1, 2]');
    assert.equal(notObject.status, 400);
    assertErrorBody(notObject.json);
  });

  s.test('wrong types -> 400 naming the parameter', async (server) => {
    const cases = [
      [{ max_tokens: 'x' }, 'max_tokens'],
      [{ max_tokens: 1.5 }, 'max_tokens'],
      [{ temperature: 'hot' }, 'temperature'],
      [{ top_p: [] }, 'top_p'],
      [{ prompt: 42 }, 'prompt'],
      [{ prompt: { text: 'x' } }, 'prompt'],
      [{ prompt: [1, 'two'] }, 'prompt'],
      [{ stream: 'yes' }, 'stream'],
      [{ stop: 7 }, 'stop'],
      [{ seed: 'abc' }, 'seed'],
      [{ model: 3 }, 'model'],
      [{ cache_salt: 5 }, 'cache_salt'],
      [{ ignore_eos: 'yes' }, 'ignore_eos'],
    ];
    for (const [patch, param] of cases) {
      const r = await post(server, '/v1/completions', { ...ok, ...patch });
      assert.equal(r.status, 400, `${JSON.stringify(patch)}: ${r.body}`);
      assertErrorBody(r.json, { param });
      assert.match(r.json.error.message, new RegExp(param), `the message names ${param}: ${r.json.error.message}`);
    }
  });

  s.test('invalid values -> 400', async (server) => {
    const cases = [
      [{ prompt: '' }, 'prompt'],
      [{ prompt: [] }, 'prompt'],
      [{ prompt: undefined }, 'prompt'],
      [{ prompt: [1, 999999] }, 'prompt'],
      [{ prompt: [1, -1] }, 'prompt'],
      [{ max_tokens: 0 }, 'max_tokens'],
      [{ max_tokens: -5 }, 'max_tokens'],
      [{ max_tokens: MAX_TOKENS + 1 }, 'max_tokens'],
      [{ n: 17 }, 'n'], // at most 16 choices
      [{ n: 16, max_tokens: MAX_TOKENS }, 'n'], // n * max_tokens bounded
      [{ temperature: 2.5 }, 'temperature'],
      [{ temperature: -1 }, 'temperature'],
      [{ top_p: 1.5 }, 'top_p'],
      [{ stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
      [{ stop: [''] }, 'stop'],
      [{ stop: ['x'.repeat(600), 'y'.repeat(600)] }, 'stop'], // 1200 bytes: over the 1024 of all stop strings
      [{ top_k: 2.5 }, 'top_k'], // an integer field takes no fraction
      [{ presence_penalty: 3 }, 'presence_penalty'],
      [{ frequency_penalty: -2.5 }, 'frequency_penalty'],
      [{ logit_bias: { 999999: 1 } }, 'logit_bias'],
      [{ logit_bias: { 5: 101 } }, 'logit_bias'],
      [{ logit_bias: { abc: 'x' } }, 'logit_bias'], // a text key is llama-server's form; its bias must be a number
      [{ logit_bias: [[1]] }, 'logit_bias'],
      [{ logit_bias: [1, 2] }, 'logit_bias'],
      // documented OpenAI fields not implemented here: named, never silently dropped
      [{ echo: true, logprobs: 2 }, 'echo'], // the prompt's log-probabilities are not computed
      [{ suffix: 'The end.' }, 'suffix'], // this model has no fill-in-the-middle tokens
      [{ best_of: 3 }, 'best_of'],
      [{ seed: 1.5 }, 'seed'],
      [{ cache_salt: '' }, 'cache_salt'],
      [{ stream_options: { include_usage: true } }, 'stream_options'],
    ];
    for (const [patch, param] of cases) {
      const r = await post(server, '/v1/completions', { ...ok, ...patch });
      assert.equal(r.status, 400, `${JSON.stringify(patch)}: ${r.body}`);
      assertErrorBody(r.json, { param });
    }
    for (const [patch, param] of [[{ audio: { voice: 'alloy', format: 'wav' } }, 'audio'], [{ modalities: ['text', 'audio'] }, 'modalities'],
      [{ prediction: { type: 'content', content: 'x' } }, 'prediction'], [{ web_search_options: {} }, 'web_search_options']]) {
      const r = await post(server, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 2,
                                                             ...patch });
      assert.equal(r.status, 400, `${JSON.stringify(patch)}: ${r.body}`);
      assertErrorBody(r.json, { param, code: 'unsupported_parameter' });
    }
    // asking for nothing passes
    const none = await post(server, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 2,
                                                              logprobs: false, modalities: ['text'], tool_choice: 'auto' });
    assert.equal(none.status, 200, none.body);
    // the largest allowed max_tokens is fine
    const r = await post(server, '/v1/completions', { ...ok, max_tokens: MAX_TOKENS });
    assert.equal(r.status, 200, r.body);
    // chat: messages required, roles checked
    for (const body of [{}, { messages: [] }, { messages: 'hi' }, { messages: [{ role: 'wizard', content: 'x' }] },
                        { messages: [{ content: 'x' }] }]) {
      const c = await post(server, '/v1/chat/completions', { max_tokens: 4, ...body });
      assert.equal(c.status, 400, `${JSON.stringify(body)}: ${c.body}`);
      assertErrorBody(c.json, { param: 'messages' });
    }
  });

  s.test('a body over --max-body -> 413', async (server) => {
    // default --max-body is 1 MiB; send 12 MiB inside a valid JSON string. The 413 goes out before the body is
    // read, and the server drains up to 16 MiB of what still comes (server/http/linger.h, SRV_LINGER_BYTES) so
    // the client reads it; a larger upload is reset once the bound is met, and whether the client read the
    // answer before the reset is a race of the machine's scheduling
    const big = `{"prompt": "${'a'.repeat(12 * 1024 * 1024)}", "max_tokens": 4}`;
    const r = await post(server, '/v1/completions', big);
    assert.equal(r.status, 413, r.body.slice(0, 500));
    assertErrorBody(r.json);
    assert.match(r.json.error.message, /1048576/);
    // just under the limit is accepted as far as size goes (and then tokenized)
    const fits = await post(server, '/tokenize', { content: 'b '.repeat(200000) });
    assert.equal(fits.status, 200);
  });

  s.test('unknown route -> 404, wrong method -> 405', async (server) => {
    // (/ is the web page; webui.test.mjs has it, and its 404 with --no-webui)
    for (const route of ['/v1/nothing', '/v2/completions', '/index.htm', '/v1/completions/x']) {
      const r = await get(server, route);
      assert.equal(r.status, 404, route);
      assertErrorBody(r.json);
    }
    const r404 = await post(server, '/v1/embeddings', { input: 'x' });
    assert.equal(r404.status, 404);
    assertErrorBody(r404.json);
    const r405 = await get(server, '/v1/completions');
    assert.equal(r405.status, 405);
    assertErrorBody(r405.json);
    const r405b = await post(server, '/health', {});
    assert.equal(r405b.status, 405);
    assertErrorBody(r405b.json);
    const r405c = await get(server, '/v1/chat/completions');
    assert.equal(r405c.status, 405);
    const del = await fetch(`${server.url}/v1/models`, { method: 'DELETE' });
    assert.equal(del.status, 405);
    assertErrorBody(await del.json());
  });

  s.test('the openai client raises BadRequestError', async (server) => {
    const client = server.client({ maxRetries: 0 });
    await assert.rejects(
      client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 4, temperature: 7 }),
      (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, `${e?.constructor?.name}: ${e}`);
        assert.equal(e.status, 400);
        assert.equal(e.param, 'temperature');
        assert.equal(e.type, 'invalid_request_error');
        assert.equal(typeof e.error.message, 'string');
        return true;
      });
    await assert.rejects(
      client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], n: 17 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
    await assert.rejects(
      client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: MAX_TOKENS + 1 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
  });

  s.test('after all that, the same answer as before', async (server) => {
    const r = await post(server, '/v1/completions', ok);
    assert.equal(r.status, 200, r.body);
    assert.equal(r.json.choices[0].text, before);
    const client = server.client();
    const c = await client.completions.create({ model: MODEL_ID, ...ok });
    assert.equal(c.choices[0].text, before);
    const cache = await get(server, '/v1/cache?check=1');
    assert.equal(cache.json.check, 'ok');
    assert.deepEqual(cache.json.sequences, []);
  });
});

serverSuite('API key', ['--api-key', 'secret'], (s) => {
  s.test('a wrong or missing key -> 401, the right one works, /health is open', async (server) => {
    const wrong = server.client({ apiKey: 'not-the-secret', maxRetries: 0 });
    await assert.rejects(
      wrong.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 4 }),
      (e) => {
        assert.ok(e instanceof OpenAI.AuthenticationError, `${e?.constructor?.name}: ${e}`);
        assert.equal(e.status, 401);
        assert.deepEqual(Object.keys(e.error).sort(), ['code', 'message', 'param', 'type']);
        assert.equal(e.type, 'invalid_request_error');
        return true;
      });
    await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
    // keys that share a prefix with the right one, or extend it
    for (const key of ['secre', 'secret2', 'Secret', '']) {
      const r = await post(server, '/v1/completions', { prompt: PROMPT, max_tokens: 2 }, { Authorization: `Bearer ${key}` });
      assert.equal(r.status, 401, `key '${key}'`);
      assertErrorBody(r.json);
    }
    for (const headers of [{}, { Authorization: 'secret' }, { Authorization: 'Basic secret' }]) {
      const r = await post(server, '/v1/completions', { prompt: PROMPT, max_tokens: 2 }, headers);
      assert.equal(r.status, 401, JSON.stringify(headers));
      assertErrorBody(r.json);
    }
    for (const route of ['/v1/models', '/v1/cache']) {
      const noKey = await get(server, route);
      assert.equal(noKey.status, 401, route);
      assertErrorBody(noKey.json, { code: 'invalid_api_key' });
    }
    // a request that is both unauthorised and malformed: 401 first
    const both = await post(server, '/v1/completions', '{broken');
    assert.equal(both.status, 401);

    const right = server.client({ apiKey: 'secret' });
    const c = await right.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 16, temperature: 0 });
    assert.equal(c.choices[0].text, await continuation(server, PROMPT, 16));
    const ids = [];
    for await (const m of right.models.list()) ids.push(m.id);
    assert.deepEqual(ids, [MODEL_ID]);

    const health = await get(server, '/health');
    assert.equal(health.status, 200);
    assert.equal(health.json.status, 'ok');
  });
});

serverSuite('a full queue', ['--parallel', '1', '--max-queue', '1'], (s) => {
  s.test('-> 429 with an error body; the queued requests are answered', async (server) => {
    // one request runs, one waits, the others find the queue full
    const long = { prompt: PROMPT, max_tokens: 400, temperature: 0 };
    const rs = await Promise.all(Array.from({ length: 4 }, () => post(server, '/v1/completions', long)));
    const statuses = rs.map((r) => r.status).sort();
    assert.ok(statuses.filter((x) => x === 429).length >= 2, `statuses ${statuses}`);
    assert.ok(statuses.filter((x) => x === 200).length >= 1, `statuses ${statuses}`);
    for (const r of rs) {
      if (r.status === 429) assertErrorBody(r.json, { type: 'rate_limit_error', code: 'queue_full' });
      else assert.equal(r.status, 200, r.body);
    }
    const texts = new Set(rs.filter((r) => r.status === 200).map((r) => r.json.choices[0].text));
    assert.equal(texts.size, 1, 'the same request, the same answer');
  });
});
