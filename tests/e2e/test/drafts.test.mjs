// Drafts from the cache in the server (--draft N, speculative.n_max): a
// generating request verifies up to N tokens the cache or its own text
// proposes in the step's batch, and keeps those its sampler would have chosen
// one token at a time. The answers must be those of a server without drafts,
// token for token: greedy and seeded sampling, streamed or not, with stop
// strings, logprobs and end-of-generation, for a retry (the same requests
// again: the second time every answer is in the prefix tree) and for 8
// concurrent clients, on a llama (stories260K) and a delta-net hybrid (qwen35,
// whose rejected drafts are recomputed from a checkpoint of its state). The
// retry is where drafts pay: /metrics and the timings show them accepted. A retry without logprobs or a grammar
// takes its answer's tokens from the tree as known tokens (tkv_seq_follow_known: what a sampler in the same state,
// greedy or with the same seed, chose after the same text), without a step (the hybrid as far as a saved state);
// one that lists logprobs or has a grammar verifies them. These servers carry every draft
// (--draft-always), so that what is verified does not depend on timing; a third server chooses the drafts worth
// their rows from the step's measured cost, as `tokenkv serve --draft N` does by default, and must answer the
// same whatever it chooses.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BIN, MODEL, SHARED, get, post, startServer, stopAndCheck, tail } from '../lib/server.mjs';

const MODELS = [
  { name: 'stories260K', file: MODEL, maxTokens: 48 },
  { name: 'qwen35', file: path.join(SHARED, 'models', 'arch', 'qwen35.gguf'), maxTokens: 16 },
];

const PROMPTS = ['Once upon a time, there was a little girl named Lily. She', 'Tom and his dog went to the park. Tom',
  'The sun was hot and the little bird', 'Lily said: "I like the red ball." Tom said: "I like the'];

// Ten requests: greedy and seeded, completions and chat, streamed or not, a stop string, logprobs, a grammar seeded
// and greedy, and some that stop at end-of-generation (no ignore_eos).
function requests(maxTokens, seedBase) {
  const c = (prompt, extra) => ({ kind: 'completion', body: { prompt, max_tokens: maxTokens, ...extra } });
  const chat = (content, extra) => ({ kind: 'chat', body: { messages: [{ role: 'user', content }], max_tokens: maxTokens,
    ...extra } });
  const seeded = (k) => ({ temperature: 0.8, top_k: 40, seed: seedBase + k });
  return [
    c(PROMPTS[0], { temperature: 0, ignore_eos: true }),
    c(PROMPTS[1], { temperature: 0, logprobs: 2 }),
    c(PROMPTS[2], { ...seeded(1), ignore_eos: true, stream: true }),
    c(PROMPTS[3], { ...seeded(2), stop: ['.', ' saw', 'ar'] }),
    c(PROMPTS[0], { ...seeded(3), logprobs: 1, ignore_eos: true }),
    chat(PROMPTS[1], { temperature: 0, stream: true }),
    chat(PROMPTS[2], { ...seeded(4), repeat_penalty: 1.2 }),
    c(PROMPTS[3], { temperature: 0, ignore_eos: true, stream: true }),
    c(PROMPTS[2], { ...seeded(5), grammar: 'root ::= ([a-z ]+ ".")+', ignore_eos: true }),
    // a prompt of its own: a cell holds one record, and a plain greedy answer's (request 1's) would keep it
    c('A big cat sat on the mat and', { temperature: 0, grammar: 'root ::= ([a-z ]+ ".")+', ignore_eos: true }),
  ];
}

// One request's text, finish reason, token count and logprobs (tokens and values), streamed or not.
async function send(server, req) {
  const client = server.client({ maxRetries: 0 });
  const chat = req.kind === 'chat';
  const api = chat ? client.chat.completions : client.completions;
  const body = chat && req.body.logprobs ? { ...req.body, logprobs: true, top_logprobs: req.body.logprobs } : req.body;
  const r = await api.create({ model: 'm', ...body, ...(body.stream ? { stream_options: { include_usage: true } } : {}) });
  if (!body.stream) {
    const ch = r.choices[0];
    return { text: chat ? ch.message.content : ch.text, finish: ch.finish_reason, n: r.usage.completion_tokens,
             logprobs: ch.logprobs ? JSON.stringify(ch.logprobs) : null };
  }
  let text = '';
  let finish = null;
  let n = null;
  for await (const chunk of r) {
    if (chunk.usage) n = chunk.usage.completion_tokens;
    for (const ch of chunk.choices) {
      text += (chat ? ch.delta?.content : ch.text) ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, n, logprobs: null };
}

async function draftCounters(server) {
  const m = (await get(server, '/metrics')).body;
  const metric = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(m)?.[1]);
  return { drafted: metric('tokenkv_draft_tokens_total'), accepted: metric('tokenkv_draft_accepted_tokens_total'),
           known: metric('tokenkv_draft_known_tokens_total') };
}

for (const model of MODELS) describe(`drafts from the cache (${model.name})`, () => {
  let off = null;
  let on = null;
  let costed = null;
  before(async () => {
    [off, on, costed] = await Promise.all([
      startServer(['--parallel', '9', '--draft-always'], { model: model.file }),
      startServer(['--parallel', '9', '--draft', '8', '--draft-always'], { model: model.file }),
      startServer(['--parallel', '9', '--draft', '8'], { model: model.file })]);
  });
  after(async () => {
    for (const s of [off, on, costed]) if (s) await stopAndCheck(s);
  });
  const withLogs = (fn) => async () => {
    try {
      await fn();
    } catch (e) {
      e.message = `${e.message}\n--- server stderr (--draft 8) ---\n${tail(on.log())}`;
      throw e;
    }
  };
  const same = (got, want, what) => {
    assert.equal(got.text, want.text, `${what}: text`);
    assert.equal(got.finish, want.finish, `${what}: finish_reason`);
    assert.equal(got.n, want.n, `${what}: completion_tokens`);
    assert.equal(got.logprobs, want.logprobs, `${what}: logprobs`);
  };

  it('a retry answers as without drafts, and the second time its drafts are accepted', withLogs(async () => {
    const reqs = requests(model.maxTokens, 10);
    const want = [];
    for (const r of reqs) want.push(await send(off, r));
    assert.ok(want.some((w) => w.finish === 'stop'), `some answers stop before max_tokens: ${JSON.stringify(want)}`);
    const c0 = await draftCounters(on);
    for (const [i, r] of reqs.entries()) {
      same(await send(on, r), want[i], `first, request ${i}`);
      const c1 = await draftCounters(on);
      same(await send(on, r), want[i], `retry, request ${i}`);
      const c2 = await draftCounters(on);
      assert.ok(c2.accepted - c1.accepted <= c2.drafted - c1.drafted, 'accepted <= drafted');
      // a retry of an answer of more than one token finds all of it in the prefix tree: one without logprobs
      // takes it as known tokens, greedy or seeded alike (the same seed: its sampler's state is the first run's at
      // every step; all of it, the first from the prompt's last row, recorded by the first run; the hybrid as far
      // as a state its first run left), with a grammar when greedy (the grammar is part of the key; at a
      // temperature its rejection may draw twice: not keyed); any other verifies it as drafts and accepts them
      const keyed = !r.body.logprobs && !(r.body.grammar && r.body.temperature > 0);
      const hybrid = model.name === 'qwen35';
      if (want[i].n > 2 && keyed) assert.ok(c2.known - c1.known >= (hybrid ? 1 : want[i].n), `retry, request ${i}: known tokens ${c2.known - c1.known} of ${want[i].n}`);
      else if (want[i].n > 2) assert.ok(c2.accepted > c1.accepted, `retry, request ${i}: drafts accepted`);
      if (!keyed) assert.equal(c2.known, c1.known, `request ${i}: no known tokens`);
    }
    const c3 = await draftCounters(on);
    assert.ok(c3.accepted > c0.accepted && c3.drafted >= c3.accepted);
    const offCounters = await draftCounters(off);
    assert.equal(offCounters.drafted, 0, 'no drafts without --draft');
    assert.equal(offCounters.known, 0, 'no known tokens without --draft');
  }));

  it('9 concurrent clients answer as without drafts (drafts right and wrong)', withLogs(async () => {
    for (const seedBase of [10, 500]) { // 10: the retry's requests (cached answers); 500: other seeds
      const reqs = requests(model.maxTokens, seedBase);
      const want = [];
      for (const r of reqs) want.push(await send(off, r));
      const got = await Promise.all(reqs.map((r) => send(on, r)));
      got.forEach((g, i) => same(g, want[i], `seeds ${seedBase}, request ${i}`));
      for (let round = 0; round < 2; round++) { // the second round's answers are in its prefix tree
        const chosen = await Promise.all(reqs.map((r) => send(costed, r)));
        chosen.forEach((g, i) => same(g, want[i], `drafts chosen by cost, seeds ${seedBase}, round ${round}, request ${i}`));
      }
    }
  }));

  it('llama-server\'s per-request fields and timings', withLogs(async () => {
    // with probabilities: a retry that lists none would take known tokens instead of drafts
    const body = { prompt: PROMPTS[0], n_predict: model.maxTokens, temperature: 0.8, seed: 77, ignore_eos: true,
                   n_probs: 1 };
    const a = await post(on, '/completion', body);
    assert.equal(a.status, 200, a.body);
    const b = await post(on, '/completion', body); // a retry: drafted
    assert.equal(b.json.content, a.json.content);
    assert.ok(b.json.timings.draft_n > 0 && b.json.timings.draft_n_accepted > 0, JSON.stringify(b.json.timings));
    assert.ok(b.json.timings.draft_n_accepted <= b.json.timings.draft_n);
    const c = await post(on, '/completion', { ...body, 'speculative.n_max': 0 }); // off for this request
    assert.equal(c.json.content, a.json.content);
    assert.equal(c.json.timings.draft_n, undefined);
    const d = await post(off, '/completion', { ...body, 'speculative.n_max': 4, 'speculative.n_min': 2 }); // on
    assert.equal(d.json.content, a.json.content);
    assert.ok(d.json.timings.draft_n_accepted > 0, JSON.stringify(d.json.timings));
    for (const [field, value] of [['speculative.p_min', 0.75], ['speculative.type', 'ngram-mod'],
                                  ['speculative.n_max', 65], ['speculative.n_min', -1]]) {
      const r = await post(on, '/completion', { ...body, [field]: value });
      assert.equal(r.status, 400, `${field}: ${r.body}`);
      assert.equal(r.json.error.param, field, r.body);
    }
  }));
});

// Past the window: with --context-shift a generation drops older tokens and goes on, without it ends at the
// window; drafts never reach past it, so the shifts and the end come at the same tokens.
for (const shift of [true, false]) describe(`drafts at the window's end (${shift ? '--context-shift' : 'no shift'})`, () => {
  const args = ['-c', '256', '-np', '2', ...(shift ? ['--context-shift'] : [])];
  let off = null;
  let on = null;
  before(async () => {
    [off, on] = await Promise.all([startServer(args), startServer([...args, '--draft', '16', '--draft-always'])]);
  });
  after(async () => {
    for (const s of [off, on]) if (s) await stopAndCheck(s);
  });
  it('the same tokens, finish and truncation, greedy and seeded, twice (the second drafted from the cache)', async () => {
    for (const extra of [{ temperature: 0 }, { temperature: 0.9, seed: 4 }]) {
      const body = { prompt: PROMPTS[0], n_predict: 300, ignore_eos: true, return_tokens: true, ...extra };
      const want = await post(off, '/completion', body);
      assert.equal(want.status, 200, want.body);
      for (let k = 0; k < 2; k++) {
        const got = await post(on, '/completion', body);
        assert.equal(got.status, 200, got.body);
        assert.deepEqual(got.json.tokens, want.json.tokens, `${JSON.stringify(extra)}, run ${k}`);
        assert.equal(got.json.stop_type, want.json.stop_type);
        assert.equal(got.json.truncated, want.json.truncated);
      }
      assert.equal(want.json.tokens.length < 300, !shift, 'without a shift the window ends it');
    }
    const m = (await get(on, '/metrics')).body;
    assert.ok(Number(/^tokenkv_draft_accepted_tokens_total (\S+)$/m.exec(m)[1]) > 0, 'drafts accepted');
  });
});

// A model that copies its prompt (`tokenkv mkmodel --weights induction`), served with drafts chosen by cost: the
// n-gram drafts of a copied passage start at a low guessed chance, and the steps that leave them out carry one now
// and then (a probe), so the chance is learned and the drafts are taken; the answers are the plain server's.
describe('drafts chosen by cost on a model that copies', () => {
  let dir = null;
  let off = null;
  let costed = null;
  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tkv-induction-'));
    const file = path.join(dir, 'induction.gguf');
    execFileSync(BIN, ['mkmodel', file, '--dim', '640', '--layers', '2', '--heads', '2', '--kv-heads', '2',
      '--head-dim', '128', '--ff', '64', '--weights', 'induction', '--vocab-from', MODEL], { stdio: 'ignore' });
    [off, costed] = await Promise.all([startServer(['--draft', '0'], { model: file }),
                                       startServer(['--draft', '8'], { model: file })]);
  });
  after(async () => {
    for (const s of [off, costed]) if (s) await stopAndCheck(s);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  it('copies a passage as the plain server does, with drafts accepted', async () => {
    const passage = 'the cat sat on a red mat while seven small dogs ran past the old mill and a boy sang to the moon';
    const body = { prompt: `${passage}\n${passage.split(' ').slice(0, 4).join(' ')}`, n_predict: 64, temperature: 0,
                   ignore_eos: true };
    const want = await post(off, '/completion', body);
    assert.equal(want.status, 200, want.body);
    const got = await post(costed, '/completion', body);
    assert.equal(got.status, 200, got.body);
    assert.equal(got.json.content, want.json.content);
    assert.ok(got.json.timings.draft_n_accepted > 0, JSON.stringify(got.json.timings));
  });
});

// --no-draft-known: a greedy retry verifies its answer as drafts instead of taking it as known tokens; the same answer.
describe('drafts without known tokens (--no-draft-known)', () => {
  let off = null;
  let on = null;
  before(async () => {
    [off, on] = await Promise.all([startServer([]), startServer(['--draft', '8', '--draft-always', '--no-draft-known'])]);
  });
  after(async () => {
    for (const s of [off, on]) if (s) await stopAndCheck(s);
  });
  it('a greedy retry drafts, takes no known token and answers as without drafts', async () => {
    const body = { prompt: PROMPTS[1], n_predict: 40, temperature: 0, ignore_eos: true, return_tokens: true };
    const want = await post(off, '/completion', body);
    assert.equal(want.status, 200, want.body);
    const c0 = await draftCounters(on);
    for (let k = 0; k < 2; k++) assert.deepEqual((await post(on, '/completion', body)).json.tokens, want.json.tokens);
    const c1 = await draftCounters(on);
    assert.equal(c1.known, c0.known, 'no known tokens');
    assert.ok(c1.accepted - c0.accepted >= 30, `the retry's drafts are accepted: ${JSON.stringify([c0, c1])}`);
  });
});

// Known tokens outlive a restart: the cells' records go to --cache-dir with their K/V (cache file version 4), so a
// greedy retry after a graceful restart takes its answer from the cache as before it, and answers as without drafts.
for (const model of MODELS) describe(`known tokens after a restart (--cache-dir, ${model.name})`, () => {
  let off = null;
  let dir = null;
  before(async () => {
    off = await startServer([], { model: model.file });
    dir = mkdtempSync(path.join(os.tmpdir(), 'tkv-known-'));
  });
  after(async () => {
    if (off) await stopAndCheck(off);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  it('a greedy retry after the restart takes known tokens and answers as without drafts', async () => {
    const n = model.maxTokens;
    const body = { prompt: PROMPTS[2], n_predict: n, temperature: 0, ignore_eos: true, return_tokens: true };
    const want = await post(off, '/completion', body);
    assert.equal(want.status, 200, want.body);
    const args = ['--draft', '8', '--draft-always', '--cache-dir', path.join(dir, 'cache'), '--save-interval', '0'];
    const first = await startServer(args, { model: model.file });
    try {
      assert.deepEqual((await post(first, '/completion', body)).json.tokens, want.json.tokens);
    } finally {
      await stopAndCheck(first); // the graceful stop saves the cache
    }
    const second = await startServer(args, { model: model.file });
    try {
      assert.equal((await draftCounters(second)).known, 0);
      const r = await post(second, '/completion', body);
      assert.equal(r.status, 200, r.body);
      assert.deepEqual(r.json.tokens, want.json.tokens, 'the same answer');
      const known = (await draftCounters(second)).known;
      assert.ok(known >= (model.name === 'qwen35' ? 1 : n - 2), `known tokens after the restart: ${known} of ${n}\n${tail(second.log())}`);
    } finally {
      await stopAndCheck(second);
    }
  });
});
