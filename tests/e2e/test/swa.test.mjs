// Sliding-window attention and the prefix cache: a Gemma 3 (and Gemma 4)
// conversation's second turn, sent by another client, reuses everything the
// first turn left in the cache, and every answer equals the answer of a
// server that reuses nothing (--no-prefix-cache). models/arch/gemma3.gguf
// attends within 32 tokens on five of its six layers, gemma4.gguf on three
// of its five (and its last two layers read the K/V of earlier ones), and
// every prompt here is longer than that, so reuse that kept too little K/V
// (or masked by cell instead of by position) would change the text.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SHARED, commonPrefix, startServer, stopAndCheck, tail, tokenize } from '../lib/server.mjs';

const SYSTEM = 'You are a helpful assistant who answers questions about gardens, birds and the weather.';
const TURNS = ['Which birds visit a garden in winter?', 'And what do they eat when it snows?',
               'How can I help them in spring?'];
// neither file has a chat template: ChatML, as llama-server renders such a model (server/server.c)
const render = (messages) => `${messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('')}` +
  '<|im_start|>assistant\n';

for (const name of ['gemma3', 'gemma4']) describe(`sliding-window model (${name}): multi-turn reuse`, () => {
  const MODEL = path.join(SHARED, 'models', 'arch', `${name}.gguf`);
  let cached = null;
  let fresh = null;
  before(async () => {
    [cached, fresh] = await Promise.all([startServer([], { model: MODEL }),
                                          startServer(['--no-prefix-cache'], { model: MODEL })]);
  });
  after(async () => {
    for (const s of [cached, fresh]) if (s) await stopAndCheck(s);
  });

  it('each turn reuses the conversation so far and answers as without reuse', async () => {
    try {
      const messages = [{ role: 'system', content: SYSTEM }];
      let held = []; // what the cache holds after the last turn: its prompt and all generated tokens but the last
      for (let turn = 0; turn < TURNS.length; turn++) {
        messages.push({ role: 'user', content: TURNS[turn] });
        // a different client (and user) for every turn: reuse is across clients
        const req = { model: name, messages, max_tokens: 12, temperature: 0, return_tokens: true,
                      user: `client-${turn}` };
        const a = await cached.client().chat.completions.create(req);
        const b = await fresh.client().chat.completions.create(req);
        assert.equal(a.choices[0].message.content, b.choices[0].message.content, `turn ${turn}: reuse changed the answer`);
        assert.deepEqual(a.choices[0].tokens, b.choices[0].tokens);
        const ids = await tokenize(cached, render(messages));
        assert.ok(ids.length > 40, `turn ${turn}: a prompt of ${ids.length} tokens is longer than the window`);
        assert.equal(a.usage.prompt_tokens, ids.length);
        const expect = Math.min(commonPrefix(ids, held), ids.length - 1);
        if (turn > 0) assert.ok(expect > 40, `turn ${turn}: the shared prefix (${expect}) spans the window`);
        assert.equal(a.usage.prompt_tokens_details.cached_tokens, expect, `turn ${turn}: cached tokens`);
        assert.equal(b.usage.prompt_tokens_details.cached_tokens, 0);
        if (process.env.TKV_E2E_VERBOSE) console.log(`turn ${turn}: prompt ${ids.length}, cached ${expect}`);
        held = [...ids, ...a.choices[0].tokens.slice(0, -1)];
        messages.push({ role: 'assistant', content: a.choices[0].message.content });
      }
    } catch (e) {
      e.message = `${e.message}\n--- server stderr ---\n${tail(cached.log())}`;
      throw e;
    }
  });
});
