// Tool calls with the official client, on random-weight models that carry
// real chat templates (written by `tokenkv mkmodel --chat-template`), one
// per call syntax: with tool_choice "required" or a named function every
// answer is a call (finish_reason "tool_calls") whose arguments validate
// against the function's schema (checked here by a validator of our own,
// not the server's); a streamed answer reassembles, delta by delta, into
// exactly the non-streamed one; bad tool_choice values are 400s naming it;
// and call arguments sent back as JSON strings reach the template as the
// objects the reference renders.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { BIN, SHARED, OpenAI, assertErrorBody, post, startServer, stopAndCheck, withLog as withServerLog } from '../lib/server.mjs';

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', minLength: 1, maxLength: 12 },
          days: { type: 'integer', minimum: 1, maximum: 7 },
          unit: { enum: ['celsius', 'fahrenheit'] },
        },
        required: ['city', 'days'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      description: 'The time in a zone', // gpt-oss's template needs one
      parameters: {
        type: 'object',
        properties: { zone: { type: 'string', maxLength: 8 }, exact: { type: 'boolean' } },
        required: ['zone'],
        additionalProperties: false,
      },
    },
  },
];

// A validator for the keywords the schemas above use, written for this test.
function validate(schema, v, where = '$') {
  const errs = [];
  if (schema.enum && !schema.enum.some((e) => e === v)) errs.push(`${where}: ${JSON.stringify(v)} not in enum`);
  if (schema.type === 'object') {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return [`${where}: not an object`];
    for (const k of schema.required ?? []) if (!(k in v)) errs.push(`${where}: '${k}' missing`);
    for (const [k, x] of Object.entries(v)) {
      if (!schema.properties?.[k]) {
        if (schema.additionalProperties === false) errs.push(`${where}: extra key '${k}'`);
      } else errs.push(...validate(schema.properties[k], x, `${where}.${k}`));
    }
  }
  if (schema.type === 'string') {
    if (typeof v !== 'string') return [`${where}: not a string`];
    const len = [...v].length; // code points
    if (schema.minLength !== undefined && len < schema.minLength) errs.push(`${where}: shorter than ${schema.minLength}`);
    if (schema.maxLength !== undefined && len > schema.maxLength) errs.push(`${where}: longer than ${schema.maxLength}`);
  }
  if (schema.type === 'integer') {
    if (!Number.isInteger(v)) return [`${where}: not an integer`];
    if (schema.minimum !== undefined && v < schema.minimum) errs.push(`${where}: below ${schema.minimum}`);
    if (schema.maximum !== undefined && v > schema.maximum) errs.push(`${where}: above ${schema.maximum}`);
  }
  if (schema.type === 'boolean' && typeof v !== 'boolean') errs.push(`${where}: not a boolean`);
  return errs;
}

// every call names a tool (or the one asked for) and its arguments validate
function checkCalls(message, { only = null, atMost = 4 } = {}) {
  assert.ok(Array.isArray(message.tool_calls) && message.tool_calls.length >= 1, JSON.stringify(message));
  assert.ok(message.tool_calls.length <= atMost, JSON.stringify(message));
  const ids = new Set();
  for (const c of message.tool_calls) {
    assert.match(c.id, /^call_[A-Za-z0-9]{24}$/);
    ids.add(c.id);
    assert.equal(c.type, 'function');
    const tool = TOOLS.find((t) => t.function.name === c.function.name);
    assert.ok(tool, `unknown function ${c.function.name}`);
    if (only) assert.equal(c.function.name, only);
    assert.equal(typeof c.function.arguments, 'string');
    const args = JSON.parse(c.function.arguments);
    assert.deepEqual(validate(tool.function.parameters, args), [], c.function.arguments);
  }
  assert.equal(ids.size, message.tool_calls.length, 'call ids are unique');
}

// a stream's chunks put back together as a message, choice by choice
async function reassemble(stream) {
  const choices = [];
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      const m = (choices[ch.index] ??= { content: null, tool_calls: [], finish_reason: null });
      if (typeof ch.delta.content === 'string') m.content = (m.content ?? '') + ch.delta.content;
      for (const d of ch.delta.tool_calls ?? []) {
        if (!m.tool_calls[d.index]) {
          assert.ok(d.id && d.type === 'function' && d.function?.name, `first delta of call ${d.index}: ${JSON.stringify(d)}`);
          m.tool_calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } };
        } else {
          assert.equal(d.id, undefined, 'only the first delta carries the id');
        }
        m.tool_calls[d.index].function.arguments += d.function?.arguments ?? '';
      }
      if (ch.finish_reason) m.finish_reason = ch.finish_reason;
    }
  }
  return choices;
}

// the non-streamed message, ids left out (they are per response)
function shape(message, finish) {
  return {
    content: message.content || null, // a stream sends no empty content delta (as llama-server): '' reassembles to null
    calls: (message.tool_calls ?? []).map((c) => [c.function.name, c.function.arguments]),
    finish,
  };
}

const SYNTAXES = [
  ['Qwen-Qwen2.5-7B-Instruct.jinja', 'hermes'],
  ['meta-llama-Llama-3.1-8B-Instruct.jinja', 'llama3'],
  ['mistralai-Mistral-Nemo-Instruct-2407.jinja', 'mistral'],
  ['Mistral-Small-3.2-24B-Instruct-2506.jinja', 'mistral-args'],
  ['deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja', 'deepseek'],
  ['openai-gpt-oss-120b.jinja', 'harmony'],
  // Qwen3.5 opens a think block in its generation prompt: a forced call may reason first, and a random model
  // rarely closes it, so these requests ask the template for no thinking (test_tool_calls covers the reasoning)
  ['Qwen3.5-4B.jinja', 'xml', { chat_template_kwargs: { enable_thinking: false } }],
  ['ByteDance-Seed-OSS.jinja', 'seed-xml'],
  ['google-gemma-2-2b-it.jinja', 'generic'],
];
const MESSAGES = [{ role: 'user', content: 'What is the weather in Paris for the next three days?' }];

describe('tool calls', () => {
  let dir = null;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'tkv-tools-'));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const [template, syntax, extra] of SYNTAXES) {
    describe(`${syntax} (${template})`, () => {
      let server = null;
      let client = null;
      before(async () => {
        const model = path.join(dir, `${syntax}.gguf`);
        await promisify(execFile)(BIN, ['mkmodel', model, '--dim', '64', '--layers', '2', '--heads', '2', '--ff', '128',
          '--ctx', '8192', '--chat-template', path.join(SHARED, 'templates', template), '--vocab-from',
          path.join(SHARED, 'models', 'stories260K.gguf')]);
        server = await startServer(['-c', '16384'], { model });
        client = server.client();
        if (extra) { // every request of this syntax carries the extra fields
          const create = client.chat.completions.create.bind(client.chat.completions);
          client.chat.completions.create = (body, opts) => create({ ...extra, ...body }, opts);
        }
      });
      after(async () => {
        if (server) await stopAndCheck(server);
      });
      const withLog = (fn) => withServerLog(() => server, fn);

      it('detects the syntax from the template', withLog(async () => {
        assert.match(server.log(), new RegExp(`tool calls ${syntax}\\b`));
      }));

      it('"required": a call whose arguments validate, every time', withLog(async () => {
        for (let seed = 1; seed <= 4; seed++) {
          const r = await client.chat.completions.create({ model: 'm', messages: MESSAGES, tools: TOOLS,
            tool_choice: 'required', seed, max_tokens: 1500, parallel_tool_calls: seed % 2 === 0 });
          const c = r.choices[0];
          assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
          checkCalls(c.message, { atMost: seed % 2 === 0 ? 4 : 1 });
        }
      }));

      it('a named function: a call of that function', withLog(async () => {
        for (let seed = 1; seed <= 3; seed++) {
          const r = await client.chat.completions.create({ model: 'm', messages: MESSAGES, tools: TOOLS, seed,
            tool_choice: { type: 'function', function: { name: 'get_time' } }, max_tokens: 1500 });
          assert.equal(r.choices[0].finish_reason, 'tool_calls');
          checkCalls(r.choices[0].message, { only: 'get_time' });
        }
      }));

      it('streamed, the deltas reassemble into the non-streamed answer exactly', withLog(async () => {
        const cases = [
          { tool_choice: 'required', seed: 7 },
          { tool_choice: { type: 'function', function: { name: 'get_weather' } }, seed: 8 },
          { tool_choice: 'auto', seed: 9, max_tokens: 60 },
          { tool_choice: 'auto', seed: 10, max_tokens: 60, n: 2 },
        ];
        for (const c of cases) {
          const body = { model: 'm', messages: MESSAGES, tools: TOOLS, max_tokens: 1500, ...c };
          const whole = await client.chat.completions.create(body);
          const parts = await reassemble(await client.chat.completions.create({ ...body, stream: true }));
          assert.equal(parts.length, whole.choices.length);
          for (const ch of whole.choices) {
            const p = parts[ch.index];
            assert.deepEqual(shape({ content: p.content, tool_calls: p.tool_calls }, p.finish_reason),
                             shape(ch.message, ch.finish_reason), JSON.stringify(c));
            if (p.tool_calls.length) assert.equal(p.finish_reason, 'tool_calls');
          }
        }
      }));
    });
  }

  describe('requests', () => {
    let server = null;
    let model = null;
    before(async () => {
      model = path.join(dir, 'qwen-req.gguf');
      await promisify(execFile)(BIN, ['mkmodel', model, '--dim', '64', '--layers', '2', '--heads', '2', '--ff', '128',
        '--chat-template', path.join(SHARED, 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja'), '--vocab-from',
        path.join(SHARED, 'models', 'stories260K.gguf')]);
      server = await startServer([], { model });
    });
    after(async () => {
      if (server) await stopAndCheck(server);
    });

    it('a tool_choice naming an unknown function, or asking for a call without tools, is a 400 naming it', async () => {
      const base = { messages: MESSAGES, max_tokens: 4 };
      const unknown = await post(server, '/v1/chat/completions', { ...base, tools: TOOLS,
        tool_choice: { type: 'function', function: { name: 'launch_rocket' } } });
      assert.equal(unknown.status, 400, unknown.body);
      assertErrorBody(unknown.json, { param: 'tool_choice' });
      assert.match(unknown.json.error.message, /launch_rocket/);
      for (const [patch, param] of [
        [{ tool_choice: 'required' }, 'tool_choice'],
        [{ tools: TOOLS, tool_choice: 'sometimes' }, 'tool_choice'],
        [{ tools: TOOLS, tool_choice: { type: 'function' } }, 'tool_choice'],
        [{ tools: [{ type: 'function', function: { name: 'bad name!' } }] }, 'tools'],
        [{ tools: [{ type: 'retrieval' }] }, 'tools'],
        [{ tools: TOOLS, parallel_tool_calls: 'yes' }, 'parallel_tool_calls'],
        [{ tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice'],
      ]) {
        const r = await post(server, '/v1/chat/completions', { ...base, ...patch });
        assert.equal(r.status, 400, `${JSON.stringify(patch)}: ${r.body}`);
        assertErrorBody(r.json, { param });
      }
      const client = server.client();
      await assert.rejects(client.chat.completions.create({ model: 'm', ...base, tools: TOOLS,
        tool_choice: { type: 'function', function: { name: 'nope' } } }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
      // "none": no call is read back, whatever the model writes
      const none = await client.chat.completions.create({ model: 'm', ...base, tools: TOOLS, tool_choice: 'none' });
      assert.equal(none.choices[0].message.tool_calls, undefined);
    });

    it('call arguments sent back as JSON strings reach the template as objects (the reference renders)', async () => {
      const lines = (await readFile(path.join(SHARED, 'reference', 'templates.jsonl'), 'utf8')).split('\n')
        .filter((l) => l.trim()).map((l) => JSON.parse(l));
      const renders = lines.filter((r) => r.template === 'Qwen-Qwen2.5-7B-Instruct.jinja' && !r.error &&
        r.input.messages.some((m) => (m.tool_calls ?? []).some((c) => typeof c.function.arguments === 'object')));
      assert.ok(renders.length >= 1);
      for (const r of renders) {
        // as an OpenAI client sends them: arguments as a string
        const messages = r.input.messages.map((m) => (m.tool_calls ? { ...m, tool_calls: m.tool_calls.map((c) => (
          { ...c, function: { ...c.function, arguments: JSON.stringify(c.function.arguments) } })) } : m));
        const a = await post(server, '/apply-template', { messages, tools: r.input.tools,
          chat_template_kwargs: r.input.extra, add_generation_prompt: r.input.add_generation_prompt });
        assert.equal(a.status, 200, a.body);
        if (r.input.add_generation_prompt) assert.equal(a.json.prompt, r.expected);
        else assert.ok(r.expected.startsWith(a.json.prompt.slice(0, r.expected.length - 40)));
        // and a chat request with this history is answered, with a call when one is required
        const c = await server.client().chat.completions.create({ model: 'm', messages, tools: TOOLS,
          tool_choice: 'required', max_tokens: 300, seed: 3 });
        checkCalls(c.choices[0].message);
      }
    });
  });
});
