// /v1/chat/completions through the official openai client: plain and
// streamed answers agree, the stream has the role first, the finish reason
// last and, on request, a usage chunk.
import assert from 'node:assert/strict';
import { MODEL_ID, assertErrorBody, commonPrefix, continuation, post, serverSuite, tokenize } from '../lib/server.mjs';

const MESSAGES = [
  { role: 'system', content: 'You tell short stories to children.' },
  { role: 'user', content: 'Tell me a story about a cat and a dog.' },
];
// stories260K has no chat template: the server renders messages in ChatML, as
// llama-server does, ending with the generation prompt (server/server.c)
const RENDERED = '<|im_start|>system\nYou tell short stories to children.<|im_end|>\n' +
  '<|im_start|>user\nTell me a story about a cat and a dog.<|im_end|>\n<|im_start|>assistant\n';

// An answer is the completion of the rendered prompt: the text that follows
// it, except that whether a chat answer keeps the space SentencePiece puts
// before its first word is the server's choice (a completion must keep it).
function assertAnswer(content, completion) {
  assert.ok(content === completion || (completion.startsWith(' ') && content === completion.slice(1)),
            `answer ${JSON.stringify(content)}, completion ${JSON.stringify(completion)}`);
}

serverSuite('chat completions', [], (s) => {
  s.test('plain and streamed answers agree', async (server) => {
    const client = server.client();
    const req = { model: MODEL_ID, messages: MESSAGES, max_tokens: 30, temperature: 0 };
    const plain = await client.chat.completions.create(req);
    assert.equal(plain.object, 'chat.completion');
    assert.match(plain.id, /^chatcmpl-/);
    assert.equal(plain.model, MODEL_ID);
    assert.equal(plain.choices.length, 1);
    const msg = plain.choices[0].message;
    assert.equal(msg.role, 'assistant');
    assert.equal(typeof msg.content, 'string');
    assert.ok(msg.content.length > 0);
    assert.ok(['stop', 'length'].includes(plain.choices[0].finish_reason));

    // the answer is the completion of the rendered prompt
    const promptIds = await tokenize(server, RENDERED);
    assert.equal(plain.usage.prompt_tokens, promptIds.length);
    assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + plain.usage.completion_tokens);
    assert.equal(plain.usage.prompt_tokens_details.cached_tokens, 0, 'first request on a fresh server');
    const oracle = await continuation(server, RENDERED, 30);
    assertAnswer(msg.content, oracle);
    if (plain.choices[0].finish_reason === 'length') assert.equal(plain.usage.completion_tokens, 30);
    const viaCompletions = await post(server, '/v1/completions', { prompt: RENDERED, max_tokens: 30, temperature: 0 });
    assert.equal(viaCompletions.json.choices[0].text, oracle);

    // streamed
    const stream = await client.chat.completions.create({ ...req, stream: true });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    assert.ok(chunks.length >= 2);
    for (const c of chunks) {
      assert.equal(c.object, 'chat.completion.chunk');
      assert.equal(c.id, chunks[0].id);
      assert.equal(c.choices.length, 1);
    }
    assert.equal(chunks[0].choices[0].delta.role, 'assistant', 'the role comes with the first chunk');
    for (const c of chunks.slice(1)) assert.equal(c.choices[0].delta.role, undefined);
    const streamed = chunks.map((c) => c.choices[0].delta.content ?? '').join('');
    assert.equal(streamed, msg.content);
    const last = chunks[chunks.length - 1];
    assert.equal(last.choices[0].finish_reason, plain.choices[0].finish_reason);
    for (const c of chunks.slice(0, -1)) assert.equal(c.choices[0].finish_reason, null);

    // stream_options.include_usage: a last chunk with no choices and the usage
    const withUsage = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    const all = [];
    for await (const c of withUsage) all.push(c);
    const final = all[all.length - 1];
    assert.deepEqual(final.choices, []);
    assert.equal(final.usage.prompt_tokens, promptIds.length);
    assert.equal(final.usage.completion_tokens, plain.usage.completion_tokens);
    assert.equal(final.usage.total_tokens, final.usage.prompt_tokens + final.usage.completion_tokens);
    assert.equal(final.usage.prompt_tokens_details.cached_tokens, promptIds.length - 1);
    for (const c of all.slice(0, -1)) assert.equal(c.usage, null, 'usage is null on the other chunks');
    assert.equal(all.slice(0, -1).map((c) => c.choices[0].delta.content ?? '').join(''), msg.content);
    assert.equal(all[all.length - 2].choices[0].finish_reason, plain.choices[0].finish_reason);
  });

  s.test('max_completion_tokens bounds the answer', async (server) => {
    const client = server.client();
    const r = await client.chat.completions.create({ model: MODEL_ID, messages: MESSAGES, max_completion_tokens: 5, temperature: 0 });
    assert.equal(r.usage.completion_tokens, 5);
    assert.equal(r.choices[0].finish_reason, 'length');
    assertAnswer(r.choices[0].message.content, await continuation(server, RENDERED, 5));
  });

  s.test('a follow-up turn reuses the conversation so far', async (server) => {
    const client = server.client();
    const first = await client.chat.completions.create({ model: MODEL_ID, messages: MESSAGES, max_tokens: 12, temperature: 0 });
    const messages = [...MESSAGES, first.choices[0].message, { role: 'user', content: 'What happened next?' }];
    const second = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 12, temperature: 0 });
    // ChatML: one block per message, content as it is
    const rendered = `${RENDERED}${first.choices[0].message.content}<|im_end|>\n<|im_start|>user\nWhat happened next?` +
      '<|im_end|>\n<|im_start|>assistant\n';
    const renderedIds = await tokenize(server, rendered);
    const shared = commonPrefix(renderedIds, await tokenize(server, RENDERED));
    assert.equal(second.usage.prompt_tokens, renderedIds.length);
    // at least the first turn's prompt comes from the cache
    assert.ok(shared > 20 && second.usage.prompt_tokens_details.cached_tokens >= shared,
              `cached ${second.usage.prompt_tokens_details.cached_tokens} of ${renderedIds.length}, shared ${shared}`);
    assert.ok(second.usage.prompt_tokens_details.cached_tokens < renderedIds.length);
  });

  // A random model can answer with byte 0 (its <0x00> token); the server sends it as \u0000, and a client sends
  // the conversation back with it in the assistant's turn.
  s.test('an answer holding a NUL, sent back, gets a normal answer', async (server) => {
    const pieces = await post(server, '/tokenize', { content: 'a\u0000', add_special: false, with_pieces: true });
    assert.equal(pieces.status, 200, pieces.body);
    const nul = pieces.json.tokens.filter((t) => t.piece === '\u0000').map((t) => t.id);
    assert.equal(nul.length, 1, `one byte token for U+0000: ${pieces.body}`);
    const first = await post(server, '/v1/chat/completions', {
      messages: MESSAGES, max_tokens: 4, temperature: 0, logit_bias: { [nul[0]]: 100 },
    });
    assert.equal(first.status, 200, first.body);
    const answer = first.json.choices[0].message.content;
    assert.ok(answer.includes('\u0000'), `the forced answer holds a NUL: ${JSON.stringify(answer)}`);
    const messages = [...MESSAGES, { role: 'assistant', content: answer }, { role: 'user', content: 'What happened next?' }];
    const second = await post(server, '/v1/chat/completions', { messages, max_tokens: 12, temperature: 0 });
    assert.equal(second.status, 200, second.body);
    // ChatML with the answer as it was sent, NULs and all: its tokens hold the byte token for each NUL
    const rendered = `${RENDERED}${answer}<|im_end|>\n<|im_start|>user\nWhat happened next?<|im_end|>\n` +
      '<|im_start|>assistant\n';
    const ids = await tokenize(server, rendered);
    assert.equal(ids.filter((t) => t === nul[0]).length, [...answer].filter((c) => c === '\u0000').length);
    assert.equal(second.json.usage.prompt_tokens, ids.length);
    // the answer is the greedy completion of those tokens (a prompt of ids: no text to carry a NUL)
    const ref = await post(server, '/v1/completions', { prompt: ids, max_tokens: 12, temperature: 0 });
    assert.equal(ref.status, 200, ref.body);
    assertAnswer(second.json.choices[0].message.content, ref.json.choices[0].text);
    assert.equal(second.json.usage.completion_tokens, ref.json.usage.completion_tokens);
    // the same through a text prompt of /v1/completions, and parts of a content
    const asText = await post(server, '/v1/completions', { prompt: rendered, max_tokens: 12, temperature: 0 });
    assert.equal(asText.status, 200, asText.body);
    assert.equal(asText.json.choices[0].text, ref.json.choices[0].text);
    const parts = messages.map((m) => ({ role: m.role, content: [{ type: 'text', text: m.content }] }));
    const third = await post(server, '/v1/chat/completions', { messages: parts, max_tokens: 12, temperature: 0 });
    assert.equal(third.status, 200, third.body);
    assert.equal(third.json.choices[0].message.content, second.json.choices[0].message.content);
  });

  s.test('a NUL where text is read as a C string -> 400 naming the field', async (server) => {
    const cases = [
      [{ messages: [{ role: 'us\u0000er', content: 'hi' }] }, 'messages', 'messages[0].role'],
      [{ messages: MESSAGES, stop: ['a\u0000b'] }, 'stop', 'stop[0]'],
      [{ messages: MESSAGES, model: 'x\u0000' }, 'model', 'model'],
    ];
    for (const [body, param, named] of cases) {
      const r = await post(server, '/v1/chat/completions', { max_tokens: 4, ...body });
      assert.equal(r.status, 400, r.body);
      assertErrorBody(r.json, { param });
      assert.ok(r.json.error.message.includes(`'${named}' holds a NUL`), r.json.error.message);
    }
  });
});
