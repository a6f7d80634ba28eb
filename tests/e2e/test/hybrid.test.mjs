// A gated delta-net hybrid (models/arch/qwen35.gguf and qwen35moe.gguf: delta-net layers with a
// recurrent state, and gated attention) under load. Its prefix is reusable
// only up to a checkpoint of that state (src/kv/kvstate.h), so the server must
// (1) answer 8 concurrent clients (chat and completions, streaming too,
// different and shared-prefix prompts) exactly as a server that reuses
// nothing answers them one at a time, and (2) report as cached the tokens it
// did not compute, never the attention-only common length: cached_tokens,
// /v1/cache and /metrics agree with the tokens the context decoded.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SHARED, commonPrefix, get, startServer, stopAndCheck, tail, tokenize } from '../lib/server.mjs';

// the dense file and the MoE one (qwen35moe: the same delta net and attention, with a MoE FFN)
const MODELS = ['qwen35', 'qwen35moe'];
const MAX_TOKENS = 10;
const K = 32; // the default state_interval: a checkpoint after every 32nd token of a prompt

const SYSTEM = 'You are a careful assistant. Answer in one short sentence, and name the garden bird you like best '
  + 'before you answer the question about the weather, the trees or the river.';
const QUESTIONS = ['Why is the sky blue?', 'What is a robin?', 'Will it rain today?', 'Where does the river go?'];
const OTHERS = ['Tom had a blue car and', 'The sun was hot and the dog', 'A little bird flew to the top of'];

// Every request ignores end-of-text, so each generates MAX_TOKENS and decodes all but its last one: the tokens a
// request computes are its prompt less its cached tokens, plus MAX_TOKENS - 1.
const chat = (content, extra = {}) => ({ kind: 'chat', body: { model: 'qwen35', messages: [{ role: 'system', content: SYSTEM },
  { role: 'user', content }], max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true, ...extra } });
const completion = (prompt, extra = {}) => ({ kind: 'completion', body: { model: 'qwen35', prompt, max_tokens: MAX_TOKENS,
  temperature: 0, ignore_eos: true, ...extra } });
const stream = { stream: true, stream_options: { include_usage: true } };

// Eight requests at once: four chats sharing the system prompt (two streamed), three unrelated completions (one
// streamed) and one completion that shares the system prompt's text.
const WAVE = [
  chat(QUESTIONS[0]), chat(QUESTIONS[1], stream), chat(QUESTIONS[2]), chat(QUESTIONS[3], stream),
  completion(OTHERS[0]), completion(OTHERS[1], stream), completion(OTHERS[2]), completion(`${SYSTEM} The robin`),
];

// One request's text, finish reason and usage, streamed or not.
async function send(server, req) {
  const client = server.client({ maxRetries: 0 });
  const api = req.kind === 'chat' ? client.chat.completions : client.completions;
  const r = await api.create(req.body);
  if (!req.body.stream) {
    const c = r.choices[0];
    return { text: req.kind === 'chat' ? c.message.content : c.text, finish: c.finish_reason, usage: r.usage };
  }
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of r) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += (req.kind === 'chat' ? c.delta?.content : c.text) ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage };
}

async function counters(server) {
  const cache = (await get(server, '/v1/cache?check=1')).json;
  const metrics = (await get(server, '/metrics')).body;
  const metric = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(metrics)?.[1]);
  return { cache, computed: cache.tokens_computed, reused: cache.tokens_reused,
           mComputed: metric('tokenkv_cache_tokens_computed_total'), mReused: metric('tokenkv_cache_tokens_reused_total') };
}

// The answers' usage against what the context counted between `before` and `now`.
function checkAccounting(answers, before, now, what) {
  const cached = answers.reduce((a, r) => a + r.usage.prompt_tokens_details.cached_tokens, 0);
  const computed = answers.reduce((a, r) => a + r.usage.prompt_tokens - r.usage.prompt_tokens_details.cached_tokens
    + r.usage.completion_tokens - 1, 0);
  assert.equal(now.cache.check, 'ok', `${what}: tkv_cache_check`);
  assert.deepEqual(now.cache.sequences, [], `${what}: every request ended`);
  assert.equal(now.computed - before.computed, computed, `${what}: tokens computed = prompts less cached, plus decodes`);
  assert.equal(now.reused - before.reused, cached, `${what}: tokens reused = the cached tokens reported`);
  assert.equal(now.mComputed, now.computed, `${what}: /metrics tokens computed`);
  assert.equal(now.mReused, now.reused, `${what}: /metrics tokens reused`);
}

for (const name of MODELS) describe(`delta-net hybrid (${name}) under load`, () => {
  const MODEL = path.join(SHARED, 'models', 'arch', `${name}.gguf`);
  let cached = null;
  let solo = null;
  before(async () => {
    [cached, solo] = await Promise.all([startServer(['--parallel', '8'], { model: MODEL }),
                                        startServer(['--parallel', '1', '--no-prefix-cache'], { model: MODEL })]);
  });
  after(async () => {
    for (const s of [cached, solo]) if (s) await stopAndCheck(s);
  });

  const withLogs = (fn) => async () => {
    try {
      await fn();
    } catch (e) {
      e.message = `${e.message}\n--- server stderr ---\n${tail(cached.log())}`;
      throw e;
    }
  };

  it('8 concurrent clients get what each gets alone, and cached tokens are the tokens not computed', withLogs(async () => {
    // the expected answers: one at a time, nothing reused
    const alone = [];
    for (const req of WAVE) alone.push(await send(solo, req));
    assert.ok(new Set(alone.map((r) => r.text)).size > 4, 'different prompts, different answers');
    for (const r of alone) assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);

    // two waves of all eight at once: the second finds everything the first left
    for (let wave = 0; wave < 2; wave++) {
      const c0 = await counters(cached);
      const together = await Promise.all(WAVE.map((req) => send(cached, req)));
      const c1 = await counters(cached);
      together.forEach((r, i) => {
        assert.equal(r.text, alone[i].text, `wave ${wave}, request ${i}: ${JSON.stringify(WAVE[i].body)}`);
        assert.equal(r.finish, 'length');
        assert.equal(r.usage.completion_tokens, MAX_TOKENS);
        assert.equal(r.usage.prompt_tokens, alone[i].usage.prompt_tokens);
      });
      checkAccounting(together, c0, c1, `wave ${wave}`);
      if (wave === 1) // a repeated prompt is reused to its last token (decoded again for its logits)
        together.forEach((r, i) => assert.equal(r.usage.prompt_tokens_details.cached_tokens, r.usage.prompt_tokens - 1,
                                                 `wave 1, request ${i}: a repeated prompt`));
    }
  }));

  it('reuse ends at a checkpoint, a branch point is reused exactly, the next turn entirely', withLogs(async () => {
    // token-id prompts, so that where they diverge is exact; the attention K/V of 50 tokens is cached for B, but
    // its recurrent state only after 32 of them
    const base = await tokenize(cached, 'Once upon a time, there was a little girl named Lily. She loved to play '
      + 'outside in the park with her friends. One day, she saw a big red ball under a tree and a small cat.');
    assert.ok(base.length >= 60, `a base prompt of ${base.length} tokens`);
    const A = base.slice(0, 60);
    const D = 50; // B and C diverge from A here
    const tailOf = (seed) => Array.from({ length: 20 }, (_, i) => 3 + ((seed * 131 + i * 37) % 400));
    const B = [...A.slice(0, D), ...tailOf(1)];
    const C = [...A.slice(0, D), ...tailOf(2)];
    assert.equal(commonPrefix(B, A), D);
    assert.equal(commonPrefix(C, B), D);
    const steps = [
      { prompt: A, expect: null },                 // whatever an earlier test left of it
      { prompt: B, expect: Math.floor(D / K) * K }, // back to the deepest checkpoint, not the common 50
      { prompt: C, expect: D },                    // B left a checkpoint where it diverged
      { prompt: A, expect: A.length - 1 },         // repeated: all but the last token
    ];
    let held = null;
    for (const [i, s] of steps.entries()) {
      const c0 = await counters(cached);
      const req = completion(s.prompt, { return_tokens: true });
      const [r, ref] = [await cached.client({ maxRetries: 0 }).completions.create(req.body), await send(solo, req)];
      const c1 = await counters(cached);
      const got = r.usage.prompt_tokens_details.cached_tokens;
      assert.equal(r.choices[0].text, ref.text, `step ${i}: the answer`);
      if (s.expect !== null) assert.equal(got, s.expect, `step ${i}: cached tokens`);
      checkAccounting([{ usage: r.usage }], c0, c1, `step ${i}`);
      held = [...s.prompt, ...r.choices[0].tokens.slice(0, -1)];
    }
    // the next turn: the last prompt, its answer and more; everything the cache holds of it is reused
    const next = [...held, 1, ...tailOf(3)];
    const c0 = await counters(cached);
    const r = await send(cached, completion(next));
    const ref = await send(solo, completion(next));
    assert.equal(r.text, ref.text, 'the next turn: the answer');
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, held.length, 'the next turn reuses the whole of the last');
    checkAccounting([r], c0, await counters(cached), 'the next turn');

    // four requests at once, each diverging from A at its own point: each leaves a checkpoint there (the server
    // may attach all four before one decode), so four more diverging at the same points are reused exactly
    const points = [36, 41, 46, 55];
    for (const [wave, expectExact] of [[4, false], [5, true]]) {
      const prompts = points.map((d, i) => [...A.slice(0, d), ...tailOf(wave * 10 + i)]);
      const b0 = await counters(cached);
      const got = await Promise.all(prompts.map((p) => send(cached, completion(p))));
      checkAccounting(got, b0, await counters(cached), `branch wave ${wave}`);
      for (const [i, p] of prompts.entries()) {
        const ref = await send(solo, completion(p));
        assert.equal(got[i].text, ref.text, `branch wave ${wave}, point ${points[i]}: the answer`);
        const c = got[i].usage.prompt_tokens_details.cached_tokens;
        if (expectExact) assert.equal(c, points[i], `branch wave ${wave}: diverging at ${points[i]}, cached tokens`);
        else assert.ok(c >= K && c <= points[i], `branch wave ${wave}: diverging at ${points[i]}, cached ${c}`);
      }
    }
  }));

  it('under cache pressure, preempted requests resume from a checkpoint and answer what they answer alone',
     withLogs(async () => {
    // 4 requests of ~15 prompt tokens and 40 generated each need ~220 cells; with 96 the youngest generating
    // request gives way, and resumes from the deepest checkpoint of what is still cached. The four overlap only
    // as the machine schedules them, so the pressure that must happen comes from one request with n = 4 sampled
    // choices: four sequences that start in one step and share only the prompt
    const reqs = OTHERS.map((p) => completion(p, { max_tokens: 40 })).concat([completion('The cat sat on', { max_tokens: 40 })]);
    const four = { model: 'qwen35', prompt: 'The cat sat on', max_tokens: 40, ignore_eos: true, temperature: 1, seed: 7, n: 4 };
    const texts = (r) => r.choices.map((c) => c.text);
    const alone = [];
    for (const req of reqs) alone.push(await send(solo, req));
    const fourAlone = texts(await solo.client({ maxRetries: 0 }).completions.create(four));
    assert.equal(new Set(fourAlone).size, 4, 'four sampled choices differ');
    const small = await startServer(['--parallel', '4', '--ctx', '96'], { model: MODEL });
    try {
      const together = await Promise.all(reqs.map((req) => send(small, req)));
      together.forEach((r, i) => {
        // the count first: a request ended early (once by a policy that took a resuming one for a generating
        // one) shows as a shorter text, not as another answer
        assert.equal(r.usage.completion_tokens, 40, `request ${i}: finished ${r.finish}`);
        assert.equal(r.text, alone[i].text, `request ${i}: ${JSON.stringify(reqs[i].body.prompt)}`);
      });
      assert.deepEqual(texts(await small.client({ maxRetries: 0 }).completions.create(four)), fourAlone);
      const cache = (await get(small, '/v1/cache?check=1')).json;
      assert.equal(cache.check, 'ok');
      assert.deepEqual(cache.sequences, []);
      const m = /^tokenkv_preemptions_total (\d+)/m.exec((await get(small, '/metrics')).body);
      assert.ok(m && Number(m[1]) >= 1, `preemptions: ${m?.[1]}`);
    } catch (e) {
      e.message = `${e.message}\n--- small server stderr ---\n${tail(small.log())}`;
      throw e;
    } finally {
      await stopAndCheck(small);
    }
  }));

  it('with a 1 MiB checkpoint budget, checkpoints are evicted, answers unchanged, the memory within the budget',
     withLogs(async () => {
    const alone = [];
    for (const req of WAVE) alone.push(await send(solo, req));
    const tight = await startServer(['--parallel', '4', '--state-cache', '1'], { model: MODEL });
    try {
      for (let wave = 0; wave < 2; wave++) {
        const together = await Promise.all(WAVE.map((req) => send(tight, req)));
        together.forEach((r, i) => assert.equal(r.text, alone[i].text, `wave ${wave}, request ${i}`));
      }
      const cache = (await get(tight, '/v1/cache?check=1')).json;
      const metrics = (await get(tight, '/metrics')).body;
      const metric = (name) => Number(new RegExp(`^tokenkv_cache_${name} (\\S+)$`, 'm').exec(metrics)?.[1]);
      const k = cache.checkpoints;
      assert.equal(cache.check, 'ok');
      // the budget: whole states, at most the MiB asked for (which holds more than --parallel + 2 of them)
      assert.ok(k.budget_bytes > 0 && k.budget_bytes <= 1 << 20, `budget ${k.budget_bytes}`);
      assert.ok(k.bytes <= k.budget_bytes, `${k.bytes} bytes of checkpoints, budget ${k.budget_bytes}`);
      assert.ok(k.held >= 1, `held ${k.held}`);
      assert.ok(k.evictions > 0, 'sixteen prompts leave more checkpoints than the budget holds');
      assert.deepEqual([metric('checkpoints'), metric('checkpoint_bytes'), metric('checkpoint_budget_bytes'),
                        metric('checkpoint_evictions_total'), metric('state_scratch_bytes')],
                       [k.held, k.bytes, k.budget_bytes, k.evictions, k.scratch_bytes], '/metrics and /v1/cache agree');
    } catch (e) {
      e.message = `${e.message}\n--- tight server stderr ---\n${tail(tight.log())}`;
      throw e;
    } finally {
      await stopAndCheck(tight);
    }
  }));

  it('restarted on its --cache-dir, it reports as cached only what it does not compute', withLogs(async () => {
    // the files hold K/V; whatever of a prefix they make reusable, cached_tokens must be the tokens skipped
    const dir = await mkdtemp(path.join(tmpdir(), 'tkv-hybrid-'));
    const req = completion(`${SYSTEM} The robin`);
    const ref = await send(solo, req);
    try {
      for (let round = 0; round < 2; round++) {
        const s = await startServer(['--cache-dir', dir], { model: MODEL });
        try {
          const c0 = await counters(s);
          const r = await send(s, req);
          assert.equal(r.text, ref.text, `round ${round}: the answer`);
          checkAccounting([r], c0, await counters(s), `round ${round}`);
        } finally {
          await stopAndCheck(s);
        }
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }));
});
