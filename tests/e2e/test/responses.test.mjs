// OpenAI's Responses API (issue 35) with the official openai client's
// client.responses: text input, message-list input, instructions, the
// stream's events, and previous_response_id continued from the cache. The
// expectations come from the chat route: the same conversation sent as chat
// messages renders the same prompt, so the same greedy text and counts.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { post, serverSuite } from '../lib/server.mjs';

async function chat(server, messages, max_tokens, extra = {}) {
  const r = await post(server, '/v1/chat/completions', { messages, max_tokens, temperature: 0, ...extra });
  assert.equal(r.status, 200, r.body);
  return r.json;
}

serverSuite('OpenAI Responses API', ['-c', '1024', '-np', '2'], (ctx) => {
  const client = (server) => new OpenAI({ baseURL: server.baseURL, apiKey: 'none', maxRetries: 0 });

  ctx.test('text input with instructions: the chat route\'s text and counts', async (server) => {
    const r = await client(server).responses.create({ model: 'any', instructions: 'Book', input: 'What is the best book',
      max_output_tokens: 8, temperature: 0, cache_salt: 'text' });
    const c = await chat(server, [{ role: 'system', content: 'Book' }, { role: 'user', content: 'What is the best book' }],
      8, { cache_salt: 'text-chat' });
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, 'response');
    assert.equal(r.output_text, c.choices[0].message.content);
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.deepEqual([r.usage.input_tokens, r.usage.output_tokens], [c.usage.prompt_tokens, 8]);
  });

  ctx.test('a message list, and a continuation by previous_response_id read from the cache', async (server) => {
    const first = await client(server).responses.create({ model: 'any', instructions: 'Book', max_output_tokens: 6,
      temperature: 0, cache_salt: 'conv',
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Tell me about a dog' }] }] });
    const next = await client(server).responses.create({ model: 'any', instructions: 'Book', max_output_tokens: 6,
      temperature: 0, cache_salt: 'conv', previous_response_id: first.id, input: 'And then?' });
    assert.equal(next.previous_response_id, first.id);
    // the whole conversation, as chat messages, in a namespace with nothing cached
    const c = await chat(server, [{ role: 'system', content: 'Book' }, { role: 'user', content: 'Tell me about a dog' },
      { role: 'assistant', content: first.output_text }, { role: 'user', content: 'And then?' }], 6,
    { cache_salt: 'conv-chat' });
    assert.equal(c.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(next.output_text, c.choices[0].message.content);
    assert.equal(next.usage.input_tokens, c.usage.prompt_tokens);
    // the first response's prompt at least came from the cache, not recomputed
    assert.ok(next.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens,
      JSON.stringify([next.usage, first.usage]));
    // another namespace does not see it; store: false keeps nothing
    const other = await client(server).responses.create({ model: 'any', input: 'x', max_output_tokens: 2,
      previous_response_id: first.id, cache_salt: 'other' }).then(() => null, (e) => e);
    assert.equal(other?.status, 400);
    const unkept = await client(server).responses.create({ model: 'any', input: 'x', max_output_tokens: 2, store: false });
    const gone = await client(server).responses.create({ model: 'any', input: 'y', max_output_tokens: 2,
      previous_response_id: unkept.id }).then(() => null, (e) => e);
    assert.equal(gone?.status, 400);
    assert.match(gone.message, /previous response/);
  });

  ctx.test('stream: the events in order, ending with the same response', async (server) => {
    const body = { model: 'any', instructions: 'Book', input: 'What is the best book', max_output_tokens: 8,
      temperature: 0 };
    const plain = await client(server).responses.create(body);
    const events = [];
    for await (const e of await client(server).responses.create({ ...body, stream: true })) events.push(e);
    const types = events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
      'response.content_part.added']);
    assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done',
      'response.output_item.done', 'response.completed']);
    assert.ok(types.slice(4, -4).every((t) => t === 'response.output_text.delta'), types.join(' '));
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    assert.equal(text, plain.output_text);
    const done = events.at(-1).response;
    assert.equal(done.output[0].content[0].text, plain.output_text);
    assert.deepEqual(done.usage.output_tokens, plain.usage.output_tokens);
    const helper = await client(server).responses.stream(body).finalResponse();
    assert.equal(helper.output_text, plain.output_text);
  });

  ctx.test('fields it does not know, or cannot honour, are refused by name', async (server) => {
    for (const [extra, param] of [[{ frobnicate: 1 }, 'frobnicate'],
      [{ tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }] }, 'tools'],
      [{ reasoning: { effort: 'high' } }, 'reasoning']]) {
      const err = await client(server).responses.create({ model: 'any', input: 'Hi', max_output_tokens: 2, ...extra })
        .then(() => null, (e) => e);
      assert.equal(err?.status, 400, String(err));
      assert.equal(err.param, param);
    }
  });
});
