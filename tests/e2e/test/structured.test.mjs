// Structured output through the official openai client: response_format
// json_schema (with client.chat.completions.parse) and json_object. A
// random-ish model's answer still parses and validates, and ends with
// finish_reason "stop"; schema keywords that cannot be enforced, unknown
// types and missing schemas are 400s that name the problem.
import assert from 'node:assert/strict';
import { MODEL_ID, assertErrorBody, post, serverSuite } from '../lib/server.mjs';

const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    pets: { type: 'array', items: { enum: ['cat', 'dog', 'bird'] }, maxItems: 3 },
    nickname: { type: ['string', 'null'], maxLength: 6 },
  },
  required: ['name', 'age', 'pets', 'nickname'],
  additionalProperties: false,
};

function checkPerson(p) {
  assert.deepEqual(Object.keys(p), ['name', 'age', 'pets', 'nickname']);
  assert.equal(typeof p.name, 'string');
  assert.ok([...p.name].length >= 1 && [...p.name].length <= 12, p.name);
  assert.ok(Number.isInteger(p.age) && p.age >= 0 && p.age <= 120, String(p.age));
  assert.ok(Array.isArray(p.pets) && p.pets.length <= 3 && p.pets.every((x) => ['cat', 'dog', 'bird'].includes(x)));
  assert.ok(p.nickname === null || (typeof p.nickname === 'string' && [...p.nickname].length <= 6));
}

serverSuite('structured output', [], (s) => {
  s.test('chat.completions.parse with a json_schema', async (server) => {
    const client = server.client();
    for (const temperature of [0, 1]) {
      for (let seed = 0; seed < 3; seed++) {
        const r = await client.chat.completions.parse({
          model: MODEL_ID, messages: [{ role: 'user', content: `Describe a person (${seed}).` }], temperature, seed,
          max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } },
        });
        assert.equal(r.choices[0].finish_reason, 'stop');
        checkPerson(r.choices[0].message.parsed);
        checkPerson(JSON.parse(r.choices[0].message.content));
      }
    }
  });

  s.test('json_object on chat and completions, streamed too', async (server) => {
    const client = server.client();
    const r = await client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'JSON please' }],
                                                     max_tokens: 400, temperature: 1, seed: 3,
                                                     response_format: { type: 'json_object' } });
    const v = JSON.parse(r.choices[0].message.content);
    assert.ok(v && typeof v === 'object' && !Array.isArray(v));
    const c = await post(server, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 400, temperature: 0,
                                                      response_format: { type: 'json_object' } });
    assert.equal(c.status, 200, c.body);
    assert.equal(typeof JSON.parse(c.json.choices[0].text), 'object');
    const stream = await client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'x' }],
      max_tokens: 200, temperature: 0, stream: true,
      response_format: { type: 'json_schema', json_schema: { name: 'p', schema: PERSON } } });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    checkPerson(JSON.parse(text));
  });

  s.test('what cannot be enforced is a 400 that names it', async (server) => {
    const chat = (response_format, extra = {}) => post(server, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'x' }], max_tokens: 4, response_format, ...extra });
    const cases = [
      [{ type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '^a+$' } } }, /pattern/],
      [{ type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', uniqueItems: true } } }, /uniqueItems/],
      [{ type: 'json_schema', json_schema: { name: 'x' } }, /schema/],
      [{ type: 'json_schema', json_schema: { name: 'x', schema: { $ref: '#/$defs/nope' } } }, /nope/],
      [{ type: 'xml' }, /xml/],
      ['json', /response_format/],
    ];
    for (const [rf, says] of cases) {
      const r = await chat(rf);
      assert.equal(r.status, 400, `${JSON.stringify(rf)}: ${r.body}`);
      assertErrorBody(r.json, { param: 'response_format' });
      assert.match(r.json.error.message, says);
    }
    const both = await chat({ type: 'json_object' }, { grammar: 'root ::= "x"' });
    assert.equal(both.status, 400);
    assertErrorBody(both.json, { param: 'grammar' });
  });
});
