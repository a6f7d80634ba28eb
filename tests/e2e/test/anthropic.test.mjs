// Anthropic's Messages API (issue 35) with the official @anthropic-ai/sdk,
// unmodified: plain, streamed, tools (a forced tool_use, its tool_result
// sent back), count_tokens, an error, and the cache's reuse reported as
// cache_read_input_tokens. The expectations come from the chat route: the
// same conversation sent as OpenAI messages renders the same prompt, so the
// same greedy text and the same token counts.
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { post, serverSuite } from '../lib/server.mjs';

const KEY = 'k';
const BOOK = { system: 'Book', messages: [{ role: 'user', content: 'What is the best book' }] };
const WEATHER = {
  name: 'get_weather',
  description: 'The weather of a city',
  input_schema: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] } }, required: ['city'] },
};

function client(server) {
  return new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0 });
}

/** The chat route's answer to the same conversation (greedy), as the independent expectation. */
async function chat(server, messages, max_tokens, extra = {}) {
  const r = await post(server, '/v1/chat/completions', { messages, max_tokens, temperature: 0, ...extra }, server.auth);
  assert.equal(r.status, 200, r.body);
  return r.json;
}
const OPENAI_BOOK = [{ role: 'system', content: 'Book' }, { role: 'user', content: 'What is the best book' }];

serverSuite('Anthropic Messages API', ['-c', '1024', '-np', '2', '--api-key', KEY], (ctx) => {
  ctx.test('messages.create: the text and counts of the same chat', async (server) => {
    const m = await client(server).messages.create({ model: 'any', max_tokens: 8, temperature: 0, ...BOOK,
      cache_salt: 'plain' });
    const c = await chat(server, OPENAI_BOOK, 8, { cache_salt: 'plain-chat' });
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.match(m.id, /^msg_/);
    assert.deepEqual(m.content, [{ type: 'text', text: c.choices[0].message.content }]);
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 8);
    assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, c.usage.prompt_tokens);
  });

  ctx.test('messages.stream: the events in order, reassembling into the same message', async (server) => {
    const body = { model: 'any', max_tokens: 10, temperature: 0, ...BOOK };
    const plain = await client(server).messages.create(body);
    const stream = client(server).messages.stream(body);
    const types = [];
    stream.on('streamEvent', (e) => types.push(e.type));
    const m = await stream.finalMessage();
    assert.deepEqual(m.content, plain.content);
    assert.equal(m.stop_reason, plain.stop_reason);
    assert.equal(m.usage.output_tokens, 10);
    assert.equal(types[0], 'message_start');
    assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
    assert.equal(types[1], 'content_block_start');
    assert.equal(types.at(-3), 'content_block_stop');
    assert.ok(types.slice(2, -3).every((t) => t === 'content_block_delta'), types.join(' '));
  });

  ctx.test('tools: a forced tool_use, streamed or not, and its tool_result sent back', async (server) => {
    const body = { model: 'any', max_tokens: 150, temperature: 0, tools: [WEATHER],
      tool_choice: { type: 'tool', name: 'get_weather' }, messages: [{ role: 'user', content: 'Weather?' }] };
    const m = await client(server).messages.create(body);
    assert.equal(m.stop_reason, 'tool_use');
    const use = m.content.find((b) => b.type === 'tool_use');
    assert.ok(use, JSON.stringify(m.content));
    assert.equal(use.name, 'get_weather');
    assert.ok(['Paris', 'Oslo'].includes(use.input.city), JSON.stringify(use.input));
    const s = await client(server).messages.stream(body).finalMessage();
    assert.deepEqual(s.content.map((b) => [b.type, b.name, b.input]), m.content.map((b) => [b.type, b.name, b.input]));
    // the result goes back as the chat route's tool message: the same prompt, token for token
    const turn = [...body.messages, { role: 'assistant', content: [use] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] }];
    const count = await client(server).messages.countTokens({ model: 'any', tools: [WEATHER], messages: turn });
    const c = await chat(server, [{ role: 'user', content: 'Weather?' },
      { role: 'assistant', content: null, tool_calls: [{ id: use.id, type: 'function',
        function: { name: 'get_weather', arguments: JSON.stringify(use.input) } }] },
      { role: 'tool', tool_call_id: use.id, content: 'sunny' }], 1,
    { tools: [{ type: 'function', function: { name: WEATHER.name, description: WEATHER.description,
      parameters: WEATHER.input_schema } }] });
    assert.equal(count.input_tokens, c.usage.prompt_tokens);
    const next = await client(server).messages.create({ ...body, tool_choice: { type: 'none' }, messages: turn,
      max_tokens: 4 });
    assert.equal(next.stop_reason, 'max_tokens');
  });

  ctx.test('count_tokens: the tokens of the prompt the chat route computes', async (server) => {
    const n = await client(server).messages.countTokens({ model: 'any', ...BOOK });
    const c = await chat(server, OPENAI_BOOK, 1, { cache_salt: 'count' });
    assert.equal(n.input_tokens, c.usage.prompt_tokens);
  });

  ctx.test('a repeated request reports its prompt as read from the cache', async (server) => {
    const body = { model: 'any', max_tokens: 4, ...BOOK, messages: [{ role: 'user', content: 'Tell me a story' }],
      cache_salt: 'repeat' };
    const a = await client(server).messages.create(body);
    const b = await client(server).messages.create(body);
    const prompt = a.usage.input_tokens + a.usage.cache_read_input_tokens;
    assert.equal(a.usage.cache_read_input_tokens, 0);
    assert.equal(b.usage.cache_read_input_tokens, prompt - 1); // all but the last token, decoded for its logits
    assert.equal(b.usage.input_tokens, 1);
    assert.equal(b.usage.cache_creation_input_tokens, 0);
  });

  ctx.test('errors: a field it does not know, or cannot honour, is refused by name', async (server) => {
    for (const [extra, field] of [[{ frobnicate: 1 }, 'frobnicate'],
      [{ thinking: { type: 'enabled', budget_tokens: 1024 } }, 'thinking']]) {
      const err = await client(server).messages.create({ model: 'any', max_tokens: 4, ...BOOK, ...extra }).then(
        () => null, (e) => e);
      assert.ok(err instanceof Anthropic.BadRequestError, String(err));
      assert.equal(err.status, 400);
      assert.equal(err.error.type, 'error');
      assert.equal(err.error.error.type, 'invalid_request_error');
      assert.match(err.error.error.message, new RegExp(field));
    }
    const img = await post(server, '/v1/messages', { model: 'any', max_tokens: 4, messages: [{ role: 'user',
      content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: '' } }] }] }, server.auth);
    assert.equal(img.status, 400);
    assert.match(img.json.error.message, /'image' blocks are not supported/);
    const noKey = await new Anthropic({ baseURL: server.url, apiKey: 'wrong', maxRetries: 0 }).messages
      .create({ model: 'any', max_tokens: 4, ...BOOK }).then(() => null, (e) => e);
    assert.ok(noKey instanceof Anthropic.AuthenticationError, String(noKey));
  });
});
