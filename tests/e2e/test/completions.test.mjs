// /v1/completions through the official openai client: text against the CLI
// and the reference, usage and cached_tokens, streaming, cache_salt;
// /tokenize, /detokenize and /v1/models.
import assert from 'node:assert/strict';
import {
  MODEL_ID, OpenAI, cliIds, cliText, commonPrefix, continuation, get, post, reference, serverSuite, tokenize,
} from '../lib/server.mjs';

const PROMPT = 'Once upon a time';
// The reference (llama.cpp) greedy continuation of PROMPT on stories260K
// begins with these words (../shared/reference/stories260K.generate.jsonl,
// its "greedy" ids detokenized).
const REFERENCE_START = ', there was a little girl named Lily';

serverSuite('completions', [], (s) => {
  // Runs first on a fresh server: nothing is cached yet.
  s.test('same text as `tokenkv run`, usage and cached_tokens', async (server) => {
    const ref = reference('stories260K', PROMPT);
    const [oracleText, oracleIds] = await Promise.all([cliText(PROMPT, 32), cliIds(PROMPT, 32)]);
    assert.deepEqual(oracleIds, ref.greedy, 'the CLI oracle itself matches the reference greedy ids');
    assert.ok(oracleText.startsWith(REFERENCE_START), oracleText);

    const promptIds = await tokenize(server, PROMPT);
    assert.deepEqual(promptIds, ref.tokens, '/tokenize gives the reference tokenization (with BOS)');

    // the client exactly as an OpenAI user writes it
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-anything' });
    const first = await client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 32, temperature: 0 });
    assert.equal(first.object, 'text_completion');
    assert.equal(first.model, MODEL_ID);
    assert.match(first.id, /^cmpl-/);
    assert.equal(first.choices.length, 1);
    assert.equal(first.choices[0].index, 0);
    assert.equal(first.choices[0].text, oracleText);
    assert.ok(first.choices[0].text.startsWith(REFERENCE_START));
    assert.equal(first.choices[0].finish_reason, 'length');
    const detok = await post(server, '/detokenize', { tokens: ref.greedy });
    assert.equal(detok.status, 200);
    assert.equal(first.choices[0].text, detok.json.content, 'text = the reference ids detokenized');
    assert.equal(first.choices[0].text, await continuation(server, PROMPT, 32));

    const u = first.usage;
    assert.equal(u.prompt_tokens, promptIds.length);
    assert.equal(u.completion_tokens, 32);
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
    assert.equal(u.prompt_tokens_details.cached_tokens, 0, 'a fresh server has nothing cached');

    // the same prompt again: all but the last prompt token (recomputed for its logits)
    const second = await client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 32, temperature: 0 });
    assert.equal(second.choices[0].text, oracleText, 'reuse does not change the output');
    assert.equal(second.usage.prompt_tokens, promptIds.length);
    assert.equal(second.usage.prompt_tokens_details.cached_tokens, promptIds.length - 1);

    // a longer prompt extending the first: cached = the common token prefix with
    // what is cached (the prompt and its generated continuation), less the last token
    const longer = `${PROMPT} in a land far away, a small frog lived in a pond.`;
    const longerIds = await tokenize(server, longer);
    const cachedRun = [...promptIds, ...oracleIds];
    const expected = Math.min(commonPrefix(longerIds, cachedRun), longerIds.length - 1);
    assert.ok(expected >= promptIds.length - 1, `the longer prompt shares the first one's tokens (${expected})`);
    const third = await client.completions.create({ model: MODEL_ID, prompt: longer, max_tokens: 8, temperature: 0 });
    assert.equal(third.usage.prompt_tokens, longerIds.length);
    assert.equal(third.usage.prompt_tokens_details.cached_tokens, expected);
    assert.equal(third.usage.completion_tokens, 8);
    assert.equal(third.choices[0].text, await continuation(server, longer, 8));

    // a prompt of token ids is the same request as its text
    const byIds = await client.completions.create({ model: MODEL_ID, prompt: promptIds, max_tokens: 32, temperature: 0 });
    assert.equal(byIds.choices[0].text, oracleText);
    assert.equal(byIds.usage.prompt_tokens_details.cached_tokens, promptIds.length - 1);
  });

  s.test('streaming gives the same text as a plain request', async (server) => {
    const client = server.client();
    const prompt = 'The little dog was very happy because';
    const plain = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 40, temperature: 0 });
    const stream = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 40, temperature: 0, stream: true });
    let text = '';
    const chunks = [];
    for await (const chunk of stream) { // the client consumes "data: [DONE]"
      chunks.push(chunk);
      assert.equal(chunk.object, 'text_completion');
      assert.equal(chunk.choices.length, 1);
      text += chunk.choices[0].text;
    }
    assert.ok(chunks.length >= 2, `${chunks.length} chunks`);
    assert.equal(text, plain.choices[0].text);
    assert.equal(text, await continuation(server, prompt, 40));
    const last = chunks[chunks.length - 1];
    assert.equal(last.choices[0].finish_reason, plain.choices[0].finish_reason);
    for (const c of chunks.slice(0, -1)) assert.equal(c.choices[0].finish_reason, null);
    assert.ok(chunks.every((c) => c.id === chunks[0].id), 'one id for the whole stream');
    assert.equal(last.usage ?? null, null, 'no usage without stream_options.include_usage');

    // include_usage: one more chunk, no choices, the usage
    const withUsage = await client.completions.create({
      model: MODEL_ID, prompt, max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    const all = [];
    for await (const chunk of withUsage) all.push(chunk);
    const final = all[all.length - 1];
    assert.deepEqual(final.choices, []);
    const promptIds = await tokenize(server, prompt);
    assert.equal(final.usage.prompt_tokens, promptIds.length);
    assert.equal(final.usage.completion_tokens, plain.usage.completion_tokens);
    assert.equal(final.usage.total_tokens, final.usage.prompt_tokens + final.usage.completion_tokens);
    assert.equal(final.usage.prompt_tokens_details.cached_tokens, promptIds.length - 1);
    assert.equal(all.slice(0, -1).map((c) => c.choices[0].text).join(''), plain.choices[0].text);
  });

  s.test('stop strings end the text before them, streamed or not', async (server) => {
    const client = server.client();
    const oracle = await continuation(server, PROMPT, 32);
    for (const stop of [' girl', 'Lily.', ['zzz', 'park'], 'e']) {
      const first = Math.min(...[stop].flat().map((x) => oracle.indexOf(x)).filter((i) => i >= 0));
      const expected = oracle.slice(0, first);
      const req = { model: MODEL_ID, prompt: PROMPT, max_tokens: 32, temperature: 0, stop };
      const plain = await client.completions.create(req);
      assert.equal(plain.choices[0].text, expected, JSON.stringify(stop));
      assert.equal(plain.choices[0].finish_reason, 'stop');
      assert.ok(plain.usage.completion_tokens < 32);
      let text = '';
      let reason = null;
      for await (const c of await client.completions.create({ ...req, stream: true })) {
        text += c.choices[0].text;
        reason = c.choices[0].finish_reason ?? reason;
      }
      assert.equal(text, expected, `streamed, ${JSON.stringify(stop)}`);
      assert.equal(reason, 'stop');
    }
    // a stop string that never appears changes nothing
    const none = await client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 32, temperature: 0, stop: 'xyzzy' });
    assert.equal(none.choices[0].text, oracle);
    assert.equal(none.choices[0].finish_reason, 'length');
  });

  s.test('cache_salt isolates the cache', async (server) => {
    const client = server.client();
    const prompt = 'One day, a boy named Tim went to the beach with his mom.';
    const n = (await tokenize(server, prompt)).length;
    const ask = (extra) => client.completions.create({ model: MODEL_ID, prompt, max_tokens: 4, temperature: 0, ...extra });
    // the client sends unknown parameters through as they are
    const a1 = await ask({ cache_salt: 'a' });
    assert.equal(a1.usage.prompt_tokens_details.cached_tokens, 0);
    const b = await ask({ cache_salt: 'b' });
    assert.equal(b.usage.prompt_tokens_details.cached_tokens, 0, "salt 'b' does not see salt 'a'");
    // the unsalted namespace may hold the earlier tests' prompts, which
    // share at most BOS with this one
    const unsalted = await ask({});
    assert.ok(unsalted.usage.prompt_tokens_details.cached_tokens <= 1, "no salt does not see salt 'a' or 'b'");
    const a2 = await ask({ cache_salt: 'a' });
    assert.equal(a2.usage.prompt_tokens_details.cached_tokens, n - 1);
    assert.ok(a2.usage.prompt_tokens_details.cached_tokens > 0);
    // also through the request options' extra body
    const b2 = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 4, temperature: 0 },
                                               { body: { model: MODEL_ID, prompt, max_tokens: 4, temperature: 0, cache_salt: 'b' } });
    assert.equal(b2.usage.prompt_tokens_details.cached_tokens, n - 1);
    // the salt changes where the cache is, never the output
    for (const r of [b, unsalted, a2, b2]) assert.equal(r.choices[0].text, a1.choices[0].text);
  });

  s.test('/tokenize and /detokenize round trip', async (server) => {
    const text = 'Lily and Ben found a shiny red ball under the tree. They were very happy!';
    const withBos = await tokenize(server, text);
    const bare = await tokenize(server, text, { add_special: false });
    assert.equal(withBos[0], 1, 'BOS first');
    assert.deepEqual(withBos.slice(1), bare);
    assert.ok(bare.every((t) => Number.isInteger(t) && t >= 0 && t < 512));
    const back = await post(server, '/detokenize', { tokens: bare });
    assert.equal(back.status, 200);
    assert.equal(back.json.content, text);
    const empty = await post(server, '/detokenize', { tokens: [] });
    assert.equal(empty.status, 200);
    assert.equal(empty.json.content, '');
    const bad = await post(server, '/detokenize', { tokens: [5, 512] });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'tokens');
  });

  s.test('/v1/models lists the model; client.models works', async (server) => {
    const r = await get(server, '/v1/models');
    assert.equal(r.status, 200);
    assert.equal(r.json.object, 'list');
    assert.deepEqual(r.json.data.map((m) => m.id), [MODEL_ID]);
    assert.equal(r.json.data[0].object, 'model');
    const client = server.client();
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids, [MODEL_ID]);
    const one = await client.models.retrieve(MODEL_ID);
    assert.equal(one.id, MODEL_ID);
    await assert.rejects(client.models.retrieve('gpt-4o'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  });
});
