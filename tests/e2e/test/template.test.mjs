// The model's own chat template: a model whose GGUF carries Qwen's QwQ
// template (written by `tokenkv mkmodel --chat-template`) is served with that
// template rendered as transformers renders it. /apply-template returns the
// prompt the server builds, byte for byte the reference render of
// ../shared/reference/templates.jsonl; a chat request is that prompt's
// tokens; chat_template_kwargs reach the template; and when the template
// opens a think block, the answer comes back as reasoning_content (streamed
// as delta.reasoning_content), or inline with reasoning_format "none".
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { BIN, SHARED, assertErrorBody, post, startServer, stopAndCheck, tokenize, withLog as withServerLog } from '../lib/server.mjs';

const TEMPLATE = 'Qwen-QwQ-32B.jinja';
const trim = (s) => s.replace(/^[ \n\r\t]+|[ \n\r\t]+$/g, '');

// the reference renders of TEMPLATE with a generation prompt and no tools
async function referenceRenders() {
  const lines = (await readFile(path.join(SHARED, 'reference', 'templates.jsonl'), 'utf8')).split('\n');
  return lines.filter((l) => l.trim()).map((l) => JSON.parse(l))
    .filter((r) => r.template === TEMPLATE && !r.error && r.input.add_generation_prompt && !r.input.tools);
}

describe('the model\'s chat template (Jinja)', () => {
  let dir = null;
  let server = null;
  let renders = [];
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'tkv-template-'));
    const model = path.join(dir, 'qwq.gguf');
    await promisify(execFile)(BIN, ['mkmodel', model, '--dim', '64', '--layers', '2', '--heads', '2', '--ff', '128',
      '--chat-template', path.join(SHARED, 'templates', TEMPLATE), '--vocab-from',
      path.join(SHARED, 'models', 'stories260K.gguf')]);
    server = await startServer([], { model });
    renders = await referenceRenders();
    assert.ok(renders.length >= 5);
  });
  after(async () => {
    if (server) await stopAndCheck(server);
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  const withLog = (fn) => withServerLog(() => server, fn);

  it('builds the prompt the reference renders, and chats with its tokens', withLog(async () => {
    assert.match(server.log(), /chat the model's template/);
    for (const r of renders) {
      const body = { messages: r.input.messages, chat_template_kwargs: r.input.extra };
      const a = await post(server, '/apply-template', body);
      assert.equal(a.status, 200, a.body);
      assert.equal(a.json.prompt, r.expected, `messages ${JSON.stringify(r.input.messages).slice(0, 200)}`);
    }
    const r = renders[0];
    const chat = await server.client().chat.completions.create({ model: 'qwq', messages: r.input.messages, max_tokens: 4,
                                                                temperature: 0 });
    assert.equal(chat.usage.prompt_tokens, (await tokenize(server, r.expected)).length);
    // the prompt closed the think block ("<think>\n</think>"): all of it is the answer
    assert.equal(chat.choices[0].message.reasoning_content, undefined);
  }));

  // a NUL (an earlier answer holding byte 0, sent back) is a character like any other to the template: the render
  // with NULs is the render with U+0001 (another non-space control character) in their places, NULs put back
  it('renders a NUL in a message as any other character', withLog(async () => {
    for (const r of renders.slice(0, 3)) {
      const mark = (c) => r.input.messages.map((m) => (typeof m.content === 'string' ? { ...m, content: `${c}${m.content}${c}x` } : m));
      const [nul, one] = await Promise.all(['\u0000', '\u0001'].map((c) =>
        post(server, '/apply-template', { messages: mark(c), chat_template_kwargs: r.input.extra })));
      assert.equal(one.status, 200, one.body);
      assert.equal(nul.status, 200, nul.body);
      assert.ok(one.json.prompt.includes('\u0001'));
      assert.equal(nul.json.prompt, one.json.prompt.replaceAll('\u0001', '\u0000'));
      const chat = await post(server, '/v1/chat/completions', { messages: mark('\u0000'), max_tokens: 2, temperature: 0,
                                                                chat_template_kwargs: r.input.extra });
      assert.equal(chat.status, 200, chat.body);
      assert.equal(chat.json.usage.prompt_tokens, (await tokenize(server, nul.json.prompt)).length);
    }
  }));

  it('returns the reasoning apart when the template opens a think block', withLog(async () => {
    const messages = renders[0].input.messages;
    const kwargs = { enable_thinking: true }; // QwQ's template then leaves "<think>\n" open
    const { json } = await post(server, '/apply-template', { messages, chat_template_kwargs: kwargs });
    assert.ok(json.prompt.endsWith('<think>\n'), JSON.stringify(json.prompt.slice(-40)));
    const raw = (await post(server, '/v1/completions', { prompt: json.prompt, max_tokens: 12, temperature: 0 })).json
      .choices[0].text;
    assert.ok(trim(raw).length > 0, 'the model says something');
    const req = { model: 'qwq', messages, max_tokens: 12, temperature: 0, chat_template_kwargs: kwargs };
    const client = server.client();
    const split = await client.chat.completions.create(req);
    assert.equal(split.choices[0].message.reasoning_content, trim(raw));
    assert.equal(split.choices[0].message.content, '');
    const inline = await client.chat.completions.create({ ...req, reasoning_format: 'none' });
    assert.equal(inline.choices[0].message.reasoning_content, undefined);
    assert.equal(trim(inline.choices[0].message.content), trim(raw));
    // streamed: the same reasoning, in delta.reasoning_content
    const chunks = [];
    for await (const c of await client.chat.completions.create({ ...req, stream: true })) chunks.push(c);
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.reasoning_content ?? '').join(''), trim(raw));
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), '');
  }));

  it('refuses bad template arguments with a 400 naming them', withLog(async () => {
    const messages = renders[0].input.messages;
    for (const [body, param] of [[{ messages, chat_template_kwargs: 'x' }, 'chat_template_kwargs'],
      [{ messages, tools: {} }, 'tools'], [{ messages, reasoning_format: 'sideways' }, 'reasoning_format'],
      [{ messages: [] }, 'messages']]) {
      const r = await post(server, '/v1/chat/completions', body);
      assert.equal(r.status, 400, r.body);
      assertErrorBody(r.json, { param });
    }
    // a template that raises is a 400 naming its line: QwQ's adds a list of content parts to a string
    // (templates.jsonl has it raise on exactly this conversation)
    const parts = [{ type: 'text', text: 'Describe this list:' }, { type: 'text', text: 'apples, pears, plums' }];
    for (const route of ['/apply-template', '/v1/chat/completions']) {
      const bad = await post(server, route, { messages: [{ role: 'user', content: parts }] });
      assert.equal(bad.status, 400, bad.body);
      assertErrorBody(bad.json, { param: 'messages' });
      assert.match(bad.json.error.message, /chat template failed: template line \d+/);
    }
  }));
});
