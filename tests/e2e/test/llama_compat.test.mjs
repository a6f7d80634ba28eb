// Coming from llama-server (issue 35): its first-day command line starts
// `tokenkv serve`, and the behaviours its clients depend on hold: the role
// alone in a chat stream's first chunk, --n-predict as the default length
// (not a limit), server-wide --seed, random seeds a
// JavaScript client can send back, timings, /slots' next_token array,
// X-Api-Key, ChatML (any role) for a model without a template, JSON schemas
// that constrain chat, logit_bias's list form, and fields that are not
// implemented refused by name.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { describe, it } from 'node:test';
import { assertErrorBody, BIN, MODEL, get, post, serverSuite, tokenize } from '../lib/server.mjs';

const KEY = 'k';
const AUTH = { Authorization: `Bearer ${KEY}` };
const MESSAGES = [{ role: 'system', content: 'Book' }, { role: 'user', content: 'What is the best book' }];

/** The data events of an SSE response body. */
function events(body) {
  return body.split('\n\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]').map((l) => JSON.parse(l.slice(6)));
}

// issue 35's command line, as a llama-server user types it (-t 1: see lib/server.mjs)
serverSuite('llama-server: the first-day command line', ['-c', '2048', '-np', '2', '-t', '1', '-ngl', '0', '--jinja',
  '--api-key', KEY, '-fa', 'on', '--cache-type-k', 'q8_0', '--n-predict', '64', '--alias', 'foo', '--metrics',
  '--slots', '--seed', '42'], (ctx) => {
  ctx.test('starts, and says once for each option without effect that it has none', async (server) => {
    for (const o of ['-ngl 0', '--jinja', '-fa on', '--metrics'])
      assert.equal(server.log().split('\n').filter((l) => l.includes(`tokenkv serve: ${o}: accepted`)).length, 1, o);
    const m = await get(server, '/v1/models', AUTH);
    assert.equal(m.json.data[0].id, 'foo');
    const m2 = await get(server, '/models', AUTH); // llama-server's alias
    assert.deepEqual(m2.json, m.json);
  });

  ctx.test('--n-predict is the default length, not a limit', async (server) => {
    const a = await post(server, '/completion', { prompt: 'Once upon a time', ignore_eos: true, temperature: 0 }, AUTH);
    assert.equal(a.status, 200, a.body);
    assert.equal(a.json.tokens_predicted, 64);
    const b = await post(server, '/completion', { prompt: 'Once upon a time', ignore_eos: true, n_predict: 100 }, AUTH);
    assert.equal(b.json.tokens_predicted, 100);
    assert.equal(b.json.stop_type, 'limit');
    assert.equal(b.json.generation_settings.n_predict, 100);
    const c = await post(server, '/v1/chat/completions', { messages: MESSAGES, max_tokens: 5 }, AUTH);
    assert.equal(c.json.usage.completion_tokens, 5);
    const d = await post(server, '/v1/chat/completions', { messages: MESSAGES, ignore_eos: true }, AUTH);
    assert.equal(d.json.usage.completion_tokens, 64); // chat too: no max_tokens, the server's default
  });

  ctx.test('--seed: unseeded requests use it; seed -1 is random', async (server) => {
    const body = { prompt: 'Once upon a time', n_predict: 12, temperature: 1, ignore_eos: true };
    const a = await post(server, '/completion', body, AUTH);
    const b = await post(server, '/completion', body, AUTH);
    assert.equal(a.json.generation_settings.seed, 42);
    assert.equal(a.json.content, b.json.content);
    const r1 = await post(server, '/completion', { ...body, seed: -1 }, AUTH);
    const r2 = await post(server, '/completion', { ...body, seed: -1 }, AUTH);
    const s1 = r1.json.generation_settings.seed, s2 = r2.json.generation_settings.seed;
    assert.notEqual(s1, 42);
    assert.notEqual(s1, s2); // two random 32-bit seeds
    for (const s of [s1, s2]) assert.ok(Number.isSafeInteger(s) && s >= 0 && s < 2 ** 32, String(s));
    // a reported seed, sent back, gives the same text
    const again = await post(server, '/completion', { ...body, seed: s1 }, AUTH);
    assert.equal(again.json.content, r1.json.content);
  });

  ctx.test("POST /completions is llama-server's alias of /completion (its native shape)", async (server) => {
    const body = { prompt: 'Once upon a time', n_predict: 4, temperature: 0 };
    const a = await post(server, '/completions', body, AUTH);
    const b = await post(server, '/completion', body, AUTH);
    assert.equal(a.status, 200, a.body);
    assert.equal(typeof a.json.content, 'string');
    assert.equal(a.json.content, b.json.content);
    assert.equal(a.json.choices, undefined);
  });

  ctx.test('X-Api-Key is a key too; a wrong one is refused', async (server) => {
    const ok = await post(server, '/v1/completions', { prompt: 'Hi', max_tokens: 2 }, { 'X-Api-Key': KEY });
    assert.equal(ok.status, 200, ok.body);
    const bad = await post(server, '/v1/completions', { prompt: 'Hi', max_tokens: 2 }, { 'X-Api-Key': 'nope' });
    assert.equal(bad.status, 401);
  });

  ctx.test('/slots: next_token is an array of one, n_remain -1 when idle', async (server) => {
    const s = await get(server, '/slots', AUTH);
    assert.equal(s.status, 200);
    assert.equal(s.json.length, 2);
    for (const slot of s.json) {
      assert.ok(Array.isArray(slot.next_token) && slot.next_token.length === 1, JSON.stringify(slot));
      assert.equal(slot.next_token[0].n_remain, -1);
      assert.equal(slot.next_token[0].has_next_token, false);
    }
  });
});

serverSuite('llama-server: responses', [], (ctx) => {
  ctx.test('a chat stream: the role alone first (content null), then no role; the same text as unstreamed', async (server) => {
    const body = { messages: MESSAGES, max_tokens: 12, temperature: 0 };
    const whole = await post(server, '/v1/chat/completions', body);
    const res = await post(server, '/v1/chat/completions', { ...body, stream: true });
    const ev = events(res.body);
    assert.deepEqual(ev[0].choices[0].delta, { role: 'assistant', content: null });
    assert.equal(ev[0].choices[0].finish_reason, null);
    let text = '';
    for (const e of ev.slice(1)) {
      assert.equal(e.choices[0].delta.role, undefined);
      text += e.choices[0].delta.content ?? '';
    }
    assert.equal(text, whole.json.choices[0].message.content);
  });

  ctx.test('timings: the prompt computed and cached make the prompt, predicted the completion', async (server) => {
    const r = await post(server, '/v1/chat/completions', { messages: MESSAGES, max_tokens: 6 });
    const t = r.json.timings;
    assert.equal(t.prompt_n + t.cache_n, r.json.usage.prompt_tokens);
    assert.equal(t.cache_n, r.json.usage.prompt_tokens_details.cached_tokens);
    assert.equal(t.predicted_n, r.json.usage.completion_tokens);
    const s = await post(server, '/v1/chat/completions', { messages: MESSAGES, max_tokens: 6, stream: true,
                                                         stream_options: { include_usage: true } });
    const last = events(s.body).at(-1);
    assert.equal(last.timings.predicted_n, last.usage.completion_tokens);
    assert.ok(events(s.body).slice(0, -1).every((e) => e.timings === undefined));
  });

  ctx.test('a model without a template: ChatML, tool results included', async (server) => {
    const r = await post(server, '/apply-template', {
      messages: [...MESSAGES, { role: 'assistant', content: 'A' }, { role: 'tool', content: '42' }],
    });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.json.prompt, '<|im_start|>system\nBook<|im_end|>\n<|im_start|>user\nWhat is the best book<|im_end|>\n' +
      '<|im_start|>assistant\nA<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n');
    const n = await post(server, '/apply-template', { messages: MESSAGES, add_generation_prompt: false });
    assert.ok(n.json.prompt.endsWith('What is the best book<|im_end|>\n'), n.json.prompt);
  });

  ctx.test('JSON schemas constrain chat: top-level json_schema, and a schema inside json_object', async (server) => {
    const a = await post(server, '/v1/chat/completions', { messages: MESSAGES, max_tokens: 8, json_schema: { const: '42' } });
    assert.equal(a.status, 200, a.body);
    assert.equal(a.json.choices[0].message.content, '"42"');
    const b = await post(server, '/v1/chat/completions', { messages: MESSAGES, max_tokens: 8,
                                                         response_format: { type: 'json_object', schema: { const: 'x' } } });
    assert.equal(b.json.choices[0].message.content, '"x"');
    const c = await post(server, '/completion', { prompt: 'Once', n_predict: 8, json_schema: { const: 'y' } });
    assert.equal(c.json.content, '"y"');
    const bad = await post(server, '/v1/chat/completions', { messages: MESSAGES, response_format: { type: 'json_object', schema: 123 } });
    assert.equal(bad.status, 400);
    assertErrorBody(bad.json, { param: 'response_format' });
    const both = await post(server, '/v1/chat/completions', { messages: MESSAGES, json_schema: {}, response_format: { type: 'json_object' } });
    assert.equal(both.status, 400);
  });

  ctx.test("logit_bias: llama-server's list form and text keys ban what they name", async (server) => {
    const banned = await tokenize(server, ' the', { add_special: false });
    const body = { prompt: 'Once upon a time', n_predict: 48, temperature: 0, return_tokens: true, ignore_eos: true };
    const plain = await post(server, '/completion', body);
    assert.ok(plain.json.tokens.some((t) => banned.includes(t)), 'the unbiased text has the token (else this proves nothing)');
    for (const logit_bias of [banned.map((t) => [t, false]), [[' the', -100]], { ' the': -100 }]) {
      const r = await post(server, '/completion', { ...body, logit_bias });
      assert.equal(r.status, 200, r.body);
      assert.ok(!r.json.tokens.some((t) => banned.includes(t)), JSON.stringify(logit_bias));
    }
  });

  ctx.test('/tokenize with_pieces: each token with its piece', async (server) => {
    const ids = await tokenize(server, 'Hello world');
    const r = await post(server, '/tokenize', { content: 'Hello world', with_pieces: true });
    assert.deepEqual(r.json.tokens.map((t) => t.id), ids);
    assert.equal(r.json.tokens.slice(1).map((t) => t.piece).join('').trim(), 'Hello world');
  });

  ctx.test('a final assistant message is continued (prefill, continue_final_message)', async (server) => {
    const prefix = '<|im_start|>system\nBook<|im_end|>\n<|im_start|>user\nWhat is the best book<|im_end|>\n';
    const msgs = [...MESSAGES, { role: 'assistant', content: 'Once upon' }];
    const a = await post(server, '/apply-template', { messages: msgs });
    assert.equal(a.json.prompt, `${prefix}<|im_start|>assistant\nOnce upon`);
    const b = await post(server, '/apply-template', { messages: msgs, continue_final_message: true, add_generation_prompt: false });
    assert.equal(b.json.prompt, a.json.prompt);
    const c = await post(server, '/v1/chat/completions', { messages: msgs, max_tokens: 6, temperature: 0 });
    const d = await post(server, '/v1/completions', { prompt: a.json.prompt, max_tokens: 6, temperature: 0 });
    assert.equal(c.json.choices[0].message.content, d.json.choices[0].text); // the answer continues the prefill
    for (const [body, param] of [[{ messages: msgs, continue_final_message: true, add_generation_prompt: true }, 'continue_final_message'],
                                 [{ messages: MESSAGES, continue_final_message: true }, 'continue_final_message'],
                                 [{ messages: [...msgs, { role: 'assistant', content: 'x' }] }, 'messages']]) {
      const r = await post(server, '/v1/chat/completions', body);
      assert.equal(r.status, 400, r.body);
      assert.equal(r.json.error.param, param);
    }
  });

  ctx.test('response_fields: only the paths asked for; the prompt as text', async (server) => {
    const r = await post(server, '/completion', { prompt: 'Hello', n_predict: 3, response_fields: ['content', 'generation_settings/n_predict', 'prompt', 'nope'] });
    assert.equal(r.status, 200, r.body);
    assert.deepEqual(Object.keys(r.json).sort(), ['content', 'generation_settings/n_predict', 'prompt']);
    assert.equal(r.json['generation_settings/n_predict'], 3);
    assert.equal(r.json.prompt, '<s> Hello'); // BOS and the pieces as the vocabulary has them
    const all = await post(server, '/completion', { prompt: 'Hello', n_predict: 3, response_fields: [] });
    assert.ok(all.json.generation_settings && all.json.timings);
  });

  ctx.test('n_probs: the model\'s top n of each generated token', async (server) => {
    const r = await post(server, '/completion', { prompt: 'Once upon a time', n_probs: 3, n_predict: 5, temperature: 0,
                                                  return_tokens: true, ignore_eos: true });
    assert.equal(r.status, 200, r.body);
    const p = r.json.completion_probabilities;
    assert.equal(p.length, 5);
    p.forEach((t, i) => {
      assert.equal(t.id, r.json.tokens[i]);
      assert.equal(t.top_logprobs.length, 3);
      assert.equal(t.top_logprobs[0].id, t.id, 'greedy: the most likely token is the one chosen');
      assert.ok(t.logprob <= 0 && t.top_logprobs.every((x, k) => k === 0 || x.logprob <= t.top_logprobs[k - 1].logprob));
      assert.ok(Array.isArray(t.bytes) && typeof t.token === 'string');
    });
  });

  ctx.test('a native stream: an event per token, with its id (and its probabilities)', async (server) => {
    const body = { prompt: 'Once upon a time', n_predict: 12, temperature: 0, ignore_eos: true };
    const whole = await post(server, '/completion', { ...body, return_tokens: true, n_probs: 2 });
    const ev = events((await post(server, '/completion', { ...body, stream: true, n_probs: 2 })).body);
    const steps = ev.filter((e) => !e.stop);
    assert.equal(steps.length, 12);
    assert.ok(steps.every((e) => e.tokens.length === 1 && e.completion_probabilities.length === 1), JSON.stringify(steps[0]));
    assert.deepEqual(steps.map((e) => e.tokens[0]), whole.json.tokens);
    assert.equal(steps.map((e) => e.content).join(''), whole.json.content);
    assert.deepEqual(steps.map((e) => e.completion_probabilities[0]), whole.json.completion_probabilities);
    assert.equal(ev.at(-1).stop, true);
  });

  ctx.test('fields that are not implemented are refused by name', async (server) => {
    const cases = [
      ['/v1/chat/completions', { messages: MESSAGES, typical_p: 0.5 }, 'typical_p'],
      ['/completion', { prompt: 'Hi', response_fields: 'content' }, 'response_fields'], // must be a list
      ['/completion', { prompt: 'Hi', grammar_lazy: true }, 'grammar_lazy'],
    ];
    for (const [route, body, param] of cases) {
      const r = await post(server, route, body);
      assert.equal(r.status, 400, `${param}: ${r.body}`);
      assert.equal(r.json.error.param, param);
    }
    const neutral = await post(server, '/v1/chat/completions', { messages: MESSAGES, max_tokens: 2, typical_p: 1 });
    assert.equal(neutral.status, 200, neutral.body);
  });
});

serverSuite('llama-server: built-in command-r, --no-prefill-assistant, aliases and tags', ['--chat-template', 'command-r',
  '--no-prefill-assistant', '--alias', 'tinyllama-2,fim,code', '--tags', 'chat,fim,small'], (ctx) => {
  ctx.test('--alias a,b,c and --tags: the model lists them; its id is the first alias in order', async (server) => {
    const m = (await get(server, '/v1/models')).json.data;
    assert.equal(m.length, 1);
    assert.equal(m[0].id, 'code');
    assert.deepEqual([...m[0].aliases].sort(), ['code', 'fim', 'tinyllama-2']);
    assert.deepEqual([...m[0].tags].sort(), ['chat', 'fim', 'small']);
    assert.equal((await get(server, '/v1/models/fim')).status, 200);
    assert.equal((await get(server, '/v1/models/other')).status, 404);
  });

  ctx.test("renders llama-server's command-r; a final assistant message stays a closed turn", async (server) => {
    const r = await post(server, '/apply-template', { messages: [{ role: 'system', content: 'You are a test.' }, { role: 'user', content: 'Hi there' }] });
    assert.equal(r.json.prompt, '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>' +
      '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>');
    const p = await post(server, '/apply-template', { messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Yo' }] });
    assert.ok(p.json.prompt.endsWith('<|CHATBOT_TOKEN|>Yo<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'), p.json.prompt);
  });
});

serverSuite('llama-server: --no-slots, --verbose, --temp', ['--no-slots', '--verbose', '--temp', '0'], (ctx) => {
  ctx.test('/slots answers 501; answers carry __verbose; --temp is the default temperature', async (server) => {
    const s = await get(server, '/slots');
    assert.equal(s.status, 501);
    assert.ok(s.json.error);
    const r = await post(server, '/v1/chat/completions', { messages: MESSAGES, max_tokens: 8 });
    assert.ok(r.json.__verbose.prompt.includes('<|im_start|>user\nWhat is the best book<|im_end|>'), r.body);
    assert.equal(r.json.__verbose.content, r.json.choices[0].message.content);
    const greedy = await post(server, '/v1/chat/completions', { messages: MESSAGES, max_tokens: 8, temperature: 0 });
    assert.equal(r.json.choices[0].message.content, greedy.json.choices[0].message.content);
  });
});

/** The value of each sample of a Prometheus text, by name. */
function samples(text) {
  return Object.fromEntries(text.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => {
    const at = l.lastIndexOf(' ');
    return [l.slice(0, at), Number(l.slice(at + 1))];
  }));
}

serverSuite("llama-server's metric names", ['-np', '1'], (ctx) => {
  ctx.test('llamacpp:* count what the responses reported', async (server) => {
    const body = { prompt: 'I believe the meaning of life is', temperature: 0, n_predict: 8 };
    const a = await post(server, '/completion', body), b = await post(server, '/completion', body);
    const t = [a.json.timings, b.json.timings];
    assert.ok(t[1].cache_n > 0);
    const m = samples((await get(server, '/metrics')).body);
    const computed = t[0].prompt_n + t[1].prompt_n, cached = t[0].cache_n + t[1].cache_n;
    assert.equal(m['llamacpp:prompt_tokens_total'], computed);
    assert.equal(m['llamacpp:prompt_tokens_cache_total'], cached);
    assert.equal(m['llamacpp:prompt_cache_hit_ratio'], cached / (cached + computed));
    assert.equal(m['llamacpp:tokens_predicted_total'], t[0].predicted_n + t[1].predicted_n);
    assert.equal(m['llamacpp:requests_processing'], 0);
    assert.equal(m['llamacpp:requests_deferred'], 0);
    assert.ok(m['llamacpp:n_decode_total'] >= t[0].predicted_n + t[1].predicted_n - 1);
  });
});

serverSuite('llama-server: several prompts in one /completion', ['-c', '512', '-np', '2'], (ctx) => {
  ctx.test('an array of prompts is answered with an array, each as if sent alone', async (server) => {
    const text = 'I believe the meaning of life is', ids = await tokenize(server, text);
    const body = { n_predict: 6, temperature: 0 };
    const alone = (await post(server, '/completion', { ...body, prompt: ids })).json;
    const other = (await post(server, '/completion', { ...body, prompt: 'Once upon a time' })).json;
    const r = await post(server, '/completion', { ...body, prompt: [ids, 'Once upon a time', text] });
    assert.equal(r.status, 200, r.body);
    assert.deepEqual(r.json.map((x) => [x.index, x.content]),
      [[0, alone.content], [1, other.content], [2, alone.content]]);
    const s = await post(server, '/completion', { ...body, prompt: [ids, text], stream: true });
    assert.equal(s.status, 400);
    assert.equal(s.json.error.param, 'prompt');
  });
  ctx.test("a mixed array of ids and texts is one prompt, each text tokenized in its place", async (server) => {
    const text = ' the meaning of life', piece = await tokenize(server, text, { add_special: false });
    const r = await post(server, '/completion', { prompt: [1, 2, 3, text, 4, text], n_predict: 1, return_tokens: true });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.json.tokens_evaluated, 3 + piece.length + 1 + piece.length);
    const ids = [1, 2, 3, ...piece, 4, ...piece];
    const same = await post(server, '/completion', { prompt: ids, n_predict: 1, return_tokens: true });
    assert.equal(same.json.tokens_cached, ids.length - 1); // the same tokens: all but the last were cached
  });
});

serverSuite('llama-server: post_sampling_probs', ['-np', '1'], (ctx) => {
  ctx.test("the sampler's distribution: the model's own with nothing cut, one token at 1 when greedy", async (server) => {
    const body = { prompt: 'I believe the meaning of life is', n_probs: 5, n_predict: 3, seed: 7 };
    const open = { temperature: 1, top_k: 0, top_p: 1, min_p: 0 };
    const model = (await post(server, '/completion', { ...body, ...open })).json.completion_probabilities;
    const post1 = (await post(server, '/completion', { ...body, ...open, post_sampling_probs: true })).json
      .completion_probabilities;
    assert.equal(post1.length, 3);
    for (let i = 0; i < 3; i++) { // temperature 1, no cut: the softmax of the logits, exp(logprob)
      assert.equal(post1[i].id, model[i].id);
      assert.ok(Math.abs(post1[i].prob - Math.exp(model[i].logprob)) < 1e-5, `${post1[i].prob} ${model[i].logprob}`);
      assert.deepEqual(post1[i].top_probs.map((t) => t.id), model[i].top_logprobs.map((t) => t.id));
      post1[i].top_probs.forEach((t, k) => assert.ok(Math.abs(t.prob - Math.exp(model[i].top_logprobs[k].logprob)) < 1e-5));
    }
    const greedy = (await post(server, '/completion', { ...body, temperature: 0, post_sampling_probs: true })).json
      .completion_probabilities;
    for (const t of greedy) {
      assert.equal(t.prob, 1);
      assert.deepEqual(t.top_probs.map((x) => x.prob), [1, 0, 0, 0, 0]);
      assert.equal(t.top_probs[0].id, t.id);
    }
    const chat = await post(server, '/v1/chat/completions', { messages: MESSAGES, max_tokens: 2, post_sampling_probs: true });
    assert.equal(chat.status, 400);
    assert.equal(chat.json.error.param, 'post_sampling_probs');
  });
});

serverSuite('llama-server: return_progress', ['-c', '256', '-np', '1', '-b', '64'], (ctx) => {
  ctx.test("a stream reports each step of its prompt's computation, a step being the batch", async (server) => {
    const body = { messages: [{ role: 'user', content: 'This is a test'.repeat(10) }], max_tokens: 4, stream: true,
      return_progress: true, stream_options: { include_usage: true } };
    for (const round of [0, 1]) { // the second finds all but the last token cached
      const r = await post(server, '/v1/chat/completions', body);
      assert.equal(r.status, 200, r.body);
      const ev = events(r.body), steps = ev.filter((e) => e.prompt_progress).map((e) => e.prompt_progress);
      const total = ev.at(-1).usage.prompt_tokens, cached = ev.at(-1).usage.prompt_tokens_details.cached_tokens;
      assert.equal(cached, round ? total - 1 : 0);
      // the admission (what the cache held), then one step per batch of at most 64 tokens
      const want = [cached];
      while (want.at(-1) < total) want.push(Math.min(want.at(-1) + 64, total));
      assert.deepEqual(steps.map((p) => p.processed), want);
      for (const p of steps) assert.deepEqual([p.total, p.cache], [total, cached]);
      assert.ok(ev.findIndex((e) => e.prompt_progress) < ev.findIndex((e) => e.choices?.length)); // before the text
    }
    const plain = await post(server, '/v1/chat/completions', { ...body, stream: false, stream_options: undefined });
    assert.equal(plain.status, 400);
    assert.equal(plain.json.error.param, 'return_progress');
  });
});

function serve(args, env = {}) {
  return new Promise((resolve) => {
    execFile(BIN, ['serve', '-m', MODEL, ...args], { env: { ...process.env, ...env }, timeout: 20000 },
      (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stderr }));
  });
}

describe('llama-server: unknown and refused options', () => {
  it('an unknown option: one line naming it and the nearest, exit 2', async () => {
    const r = await serve(['--port', '0', '--tmep', '0.5']);
    assert.equal(r.code, 2);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /unknown option '--tmep' \(did you mean --temp\?/);
  });
  it('an unimplemented option, from the command line or LLAMA_ARG_*, is refused by name', async () => {
    const a = await serve(['--lora', 'x.gguf']);
    assert.equal(a.code, 2);
    assert.match(a.stderr, /--lora: not implemented/);
    const b = await serve([], { LLAMA_ARG_EMBEDDINGS: '1' });
    assert.equal(b.code, 2);
    assert.match(b.stderr, /LLAMA_ARG_EMBEDDINGS: not implemented/);
  });
});
