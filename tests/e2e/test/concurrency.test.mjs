// 16 clients at once against --parallel 4: every answer is the answer the
// same request gets alone, and the same again with the prefix cache off.
import assert from 'node:assert/strict';
import { MODEL_ID, get, post, startServer, stopAndCheck, tail, tokenize } from '../lib/server.mjs';
import { describe, it } from 'node:test';

// A long shared beginning (a "system prompt" or a document) for half the
// requests, and unrelated prompts for the other half.
const SHARED = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park '
  + 'with her friends. One day, she saw a big red ball under a tree. She wanted to play with it, so she ran '
  + 'to the tree and';
const ENDINGS = [' picked it up.', ' looked at it.', ' said hello.', ' was very happy.', ' saw a cat.',
                 ' called her mom.', ' sat down.', ' smiled.'];
const OTHERS = ['Tom had a blue car', 'The sun was hot and', 'A little bird flew to', 'Sam and Mia went to the shop',
                'The dog barked at', 'Once there was a big bear who', 'Ben liked to eat', 'It was a rainy day and'];
const PROMPTS = [...ENDINGS.map((e) => SHARED + e), ...OTHERS];
const MAX_TOKENS = 24;

function ask(client, prompt) {
  return client.completions.create({ model: MODEL_ID, prompt, max_tokens: MAX_TOKENS, temperature: 0 });
}

async function withServer(args, fn) {
  const server = await startServer(args);
  try {
    await fn(server);
  } catch (e) {
    await server.stop(); // the test's own failure is the one to report
    if (e && typeof e === 'object') e.message += `\n--- server stderr (${server.argv.join(' ')}) ---\n${tail(server.log())}`;
    throw e;
  }
  await stopAndCheck(server);
}

// Every generating request is checked: its usage is consistent, and it
// generated the whole budget or stopped at end-of-text.
function checkUsage(r, promptLen) {
  assert.equal(r.usage.prompt_tokens, promptLen);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, MAX_TOKENS);
  else assert.equal(r.choices[0].finish_reason, 'stop');
}

describe('16 concurrent clients', () => {
  it('get what each gets alone, with and without the prefix cache', async () => {
    // one by one on a fresh server: the expected outputs
    const alone = [];
    let promptLens;
    await withServer(['--parallel', '4'], async (server) => {
      promptLens = await Promise.all(PROMPTS.map(async (p) => (await tokenize(server, p)).length));
      const client = server.client({ maxRetries: 0 });
      for (const p of PROMPTS) alone.push(await ask(client, p));
    });
    alone.forEach((r, i) => checkUsage(r, promptLens[i]));
    assert.ok(alone.every((r) => r.choices[0].text.length > 0));
    assert.ok(new Set(alone.map((r) => r.choices[0].text)).size > 8, 'different prompts, different answers');

    // all at once (and with two threads: how work is split does not matter either)
    await withServer(['--parallel', '4', '-t', '2'], async (server) => {
      const client = server.client({ maxRetries: 0 });
      const together = await Promise.all(PROMPTS.map((p) => ask(client, p)));
      together.forEach((r, i) => {
        checkUsage(r, promptLens[i]);
        assert.equal(r.choices[0].text, alone[i].choices[0].text, `prompt ${i}: ${JSON.stringify(PROMPTS[i])}`);
        assert.equal(r.choices[0].finish_reason, alone[i].choices[0].finish_reason);
      });
      // the shared beginning was computed once and reused by the others
      const sharedCached = together.slice(0, ENDINGS.length).map((r) => r.usage.prompt_tokens_details.cached_tokens);
      const sharedLen = (await tokenize(server, SHARED)).length;
      assert.ok(sharedCached.filter((c) => c >= sharedLen - 2).length >= ENDINGS.length - 1,
                `cached tokens of the shared-prefix requests: ${sharedCached} (prefix ${sharedLen})`);
      const cache = await get(server, '/v1/cache?check=1');
      assert.equal(cache.json.check, 'ok');
      assert.deepEqual(cache.json.sequences, []);
      assert.ok(cache.json.tokens_reused > 0);
    });

    // all at once, nothing reused
    await withServer(['--parallel', '4', '--no-prefix-cache'], async (server) => {
      const client = server.client({ maxRetries: 0 });
      const together = await Promise.all(PROMPTS.map((p) => ask(client, p)));
      together.forEach((r, i) => {
        checkUsage(r, promptLens[i]);
        assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
        assert.equal(r.choices[0].text, alone[i].choices[0].text, `prompt ${i}: ${JSON.stringify(PROMPTS[i])}`);
      });
      const again = await ask(client, PROMPTS[0]);
      assert.equal(again.usage.prompt_tokens_details.cached_tokens, 0, '--no-prefix-cache reuses nothing');
      assert.equal(again.choices[0].text, alone[0].choices[0].text);
      const cache = await get(server, '/v1/cache?check=1');
      assert.equal(cache.json.check, 'ok');
      assert.equal(cache.json.tokens_reused, 0);
    });
  });

  it('under cache pressure, preempted requests resume and answer what they answer alone', async () => {
    // 4 requests of ~11-16 prompt tokens and 30 generated each need ~170 cells; the server has 64: prompts wait,
    // the youngest generating request is preempted and resumes from what is still cached. Four clients overlap
    // only as the machine schedules them (on a fast one each may end before the next arrives), so the pressure
    // that must happen comes from one request with n = 4 sampled choices: its four sequences start in one step
    // and share only the prompt (greedy choices would share every cell: the same tokens at the same positions)
    const prompts = OTHERS.slice(0, 4);
    const ask30 = (client, prompt) =>
      client.completions.create({ model: MODEL_ID, prompt, max_tokens: 30, temperature: 0 });
    const four = (client) => client.completions.create({ model: MODEL_ID, prompt: prompts[0], max_tokens: 30,
                                                         temperature: 1, seed: 7, n: 4 });
    const alone = [];
    let fourAlone;
    await withServer([], async (server) => {
      const client = server.client({ maxRetries: 0 });
      for (const p of prompts) alone.push(await ask30(client, p));
      fourAlone = await four(client);
    });
    assert.equal(new Set(fourAlone.choices.map((c) => c.text)).size, 4, 'four sampled choices differ');
    await withServer(['--parallel', '4', '--ctx', '64'], async (server) => {
      const client = server.client({ maxRetries: 0 });
      const together = await Promise.all(prompts.map((p) => ask30(client, p)));
      together.forEach((r, i) => {
        assert.equal(r.choices[0].text, alone[i].choices[0].text, `prompt ${i}: ${JSON.stringify(prompts[i])}`);
        assert.equal(r.usage.completion_tokens, alone[i].usage.completion_tokens);
      });
      const pressed = await four(client);
      assert.deepEqual(pressed.choices.map((c) => c.text), fourAlone.choices.map((c) => c.text));
      assert.equal(pressed.usage.completion_tokens, fourAlone.usage.completion_tokens);
      const cache = await get(server, '/v1/cache?check=1');
      assert.equal(cache.json.check, 'ok');
      assert.deepEqual(cache.json.sequences, []);
      // the pressure did what it is here for: at least one request was preempted (and resumed, above)
      const metrics = (await get(server, '/metrics')).body;
      const m = /^tokenkv_preemptions_total (\d+)/m.exec(metrics);
      assert.ok(m, 'tokenkv_preemptions_total in /metrics');
      assert.ok(Number(m[1]) >= 1, `preemptions: ${m[1]}`);
    });
  });
  it('a small cache answers two requests released together that fit one at a time (no spurious 503)', async () => {
    // --ctx 64 --parallel 2: two ~40-token prompts cannot run together, but each fits alone, so neither may be
    // refused as "cache full" (a waiting request's reference to a shared node once kept the other's tokens)
    const a = 'Lily went to the park with her mom. She saw a big tree and a small bird. The bird sang a song and Lily '
      + 'was happy.';
    const b = 'Tom had a red ball. He threw it to his dog Max, and Max ran fast to get it. Then they went home to eat '
      + 'lunch.';
    await withServer(['--parallel', '2', '--ctx', '64'], async (server) => {
      for (let round = 0; round < 10; round++) {
        const rs = await Promise.all([a, b].map((prompt) => post(server, '/v1/completions',
          { prompt: `${prompt} ${round}`, max_tokens: 8, temperature: 0 })));
        rs.forEach((r, i) => assert.equal(r.status, 200, `round ${round}, request ${i}: ${r.body}`));
      }
      const cache = await get(server, '/v1/cache?check=1');
      assert.equal(cache.json.check, 'ok');
    });
  });
});
