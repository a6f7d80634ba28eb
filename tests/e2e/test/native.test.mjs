// llama-server's own surface: the native POST /completion (on the same path
// as /v1/completions) and GET /slots.
import assert from 'node:assert/strict';
import { assertErrorBody, continuation, get, post, serverSuite, tokenize, waitFor } from '../lib/server.mjs';

const PROMPT = 'Once upon a time';
const N = 16;

/** The events of a native /completion stream, and whether it ended with [DONE]. */
async function streamed(server, body, { stopAfter } = {}) {
  const ac = new AbortController();
  const res = await fetch(`${server.url}/completion`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
    signal: ac.signal,
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const events = [];
  let done = false;
  let buf = '';
  const dec = new TextDecoder();
  // a reader, not for-await: leaving a for-await loop would cancel the body, and with it the request
  const reader = res.body.getReader();
  try {
    for (;;) {
      const { value: chunk, done: end_ } = await reader.read();
      if (end_) break;
      buf += dec.decode(chunk, { stream: true });
      let end;
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const line = buf.slice(0, end);
        buf = buf.slice(end + 2);
        assert.ok(line.startsWith('data: '), line);
        if (line === 'data: [DONE]') done = true;
        else events.push(JSON.parse(line.slice(6)));
      }
      if (stopAfter && events.length >= stopAfter) {
        return { events, done, abort: () => ac.abort() };
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  }
  return { events, done, abort: () => {} };
}

serverSuite('native /completion and /slots', ['--parallel', '2'], (s) => {
  s.test('/completion reads as /v1/completions and the CLI for the same greedy request', async (server) => {
    const expected = await continuation(server, PROMPT, N);
    const promptLen = (await tokenize(server, PROMPT)).length;
    const r = await post(server, '/completion', { prompt: PROMPT, n_predict: N, temperature: 0, cache_prompt: true });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.json.tokens_cached, 0, 'nothing of this prompt was cached before');
    assert.equal(r.json.timings.prompt_n, promptLen);
    assert.equal(r.json.content, expected);
    const v1 = await post(server, '/v1/completions', { prompt: PROMPT, max_tokens: N, temperature: 0 });
    assert.equal(v1.json.choices[0].text, r.json.content);
    assert.equal(r.json.stop, true);
    assert.equal(r.json.stop_type, 'limit');
    assert.equal(r.json.stopping_word, '');
    assert.equal(r.json.tokens_predicted, N);
    assert.equal(r.json.tokens_evaluated, promptLen);
    assert.equal(r.json.model, 'stories260K');
    assert.equal(r.json.generation_settings.n_predict, N);
    assert.equal(r.json.timings.predicted_n, N);
    assert.ok(r.json.timings.predicted_ms >= 0 && r.json.timings.prompt_ms >= 0);

    // a prompt of token ids reads the same, and reuses the cached prompt: all of it but the last token, which
    // is computed again for its logits
    const ids = await post(server, '/completion', { prompt: await tokenize(server, PROMPT), n_predict: N,
                                                    temperature: 0 });
    assert.equal(ids.json.content, expected);
    assert.equal(ids.json.tokens_cached, promptLen - 1);
    assert.equal(ids.json.timings.prompt_n, 1);
  });

  s.test('a stop word ends it: stop_type word, the stopping word, the text before it', async (server) => {
    const text = await continuation(server, PROMPT, N);
    const word = text.trim().split(/\s+/)[3]; // a word the greedy text reaches after a few tokens
    assert.ok(word && text.includes(word));
    const r = await post(server, '/completion', { prompt: PROMPT, n_predict: N, temperature: 0, stop: [word],
                                                  return_tokens: true });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.json.stop_type, 'word');
    assert.equal(r.json.stopping_word, word);
    assert.equal(r.json.content, text.slice(0, text.indexOf(word)));
    assert.deepEqual(r.json.generation_settings.stop, [word]);
    assert.equal(r.json.tokens.length, r.json.tokens_predicted);
    assert.ok(r.json.tokens_predicted < N);
  });

  s.test("llama-server's sampling defaults where the request gives none", async (server) => {
    const r = await post(server, '/completion', { prompt: PROMPT, n_predict: 2, seed: 7 });
    assert.equal(r.status, 200, r.body);
    const g = r.json.generation_settings;
    assert.equal(g.temperature.toFixed(2), '0.80');
    assert.equal(g.top_k, 40);
    assert.equal(g.top_p.toFixed(2), '0.95');
    assert.equal(g.min_p.toFixed(2), '0.05');
    assert.equal(g.seed, 7);
    // the same seed, the same draw
    const again = await post(server, '/completion', { prompt: PROMPT, n_predict: 2, seed: 7 });
    assert.equal(again.json.content, r.json.content);
  });

  s.test('streamed: content events add up to the plain answer; the last one has the counts, no [DONE]', async (server) => {
    const plain = await post(server, '/completion', { prompt: PROMPT, n_predict: N, temperature: 0 });
    const { events, done } = await streamed(server, { prompt: PROMPT, n_predict: N, temperature: 0 });
    assert.equal(done, false);
    assert.ok(events.length >= 2);
    const last = events.at(-1);
    for (const e of events.slice(0, -1)) assert.equal(e.stop, false);
    assert.equal(last.stop, true);
    assert.equal(last.content, '');
    assert.equal(events.map((e) => e.content).join(''), plain.json.content);
    assert.equal(last.tokens_predicted, N);
    assert.equal(last.stop_type, 'limit');
  });

  s.test('/slots: one entry per slot, the running request in one of them', async (server) => {
    const props = (await get(server, '/props')).json;
    const idle = await get(server, '/slots');
    assert.equal(idle.status, 200);
    assert.equal(idle.json.length, 2);
    assert.deepEqual(idle.json.map((x) => x.id), [0, 1]);
    for (const x of idle.json) {
      assert.equal(x.is_processing, false);
      assert.equal(x.n_ctx, props.n_ctx);
      assert.equal(x.request, null);
    }
    // stories260K at temperature 0 runs on for thousands of tokens after this prompt
    const long = 'Once upon a time, there was a big dog named Max.';
    const promptLen = (await tokenize(server, long)).length;
    const st = await streamed(server, { prompt: long, n_predict: 2000, temperature: 0 }, { stopAfter: 3 });
    let busy;
    await waitFor(async () => {
      busy = (await get(server, '/slots')).json.filter((x) => x.is_processing);
      return busy.length === 1 && busy[0].next_token[0].n_decoded >= 3;
    }, 'a slot processing the stream');
    const x = busy[0];
    assert.match(x.request, /^cmpl-/);
    assert.equal(x.n_prompt_tokens, promptLen);
    assert.equal(x.params.n_predict, 2000);
    assert.equal(x.next_token.length, 1); // llama-server's shape: an array of one
    assert.equal(x.next_token[0].n_remain, 2000 - x.next_token[0].n_decoded);
    assert.ok(x.n_past >= promptLen && x.n_past <= promptLen + x.next_token[0].n_decoded, JSON.stringify(x));
    st.abort();
    await waitFor(async () => (await get(server, '/slots')).json.every((y) => !y.is_processing),
                  'the slot to be free again after the client left');
  });

  s.test('bad /completion requests: a 400 naming the field', async (server) => {
    const cases = [
      [{ prompt: PROMPT, n_predict: 0 }, 'n_predict'],
      [{ prompt: PROMPT, n_predict: 'ten' }, 'n_predict'],
      [{ prompt: PROMPT, n_predict: 1 << 30 }, 'n_predict'],
      [{ prompt: PROMPT, cache_prompt: 'yes' }, 'cache_prompt'],
      [{ prompt: PROMPT, id_slot: 1 }, 'id_slot'],
      [{ prompt: PROMPT, json_schema: 5 }, 'json_schema'], // a schema constrains (llama_compat.test.mjs); this is none
      [{ prompt: PROMPT, n_probs: 99 }, 'n_probs'], // 0..20 (llama_compat.test.mjs checks the probabilities)
      [{ prompt: PROMPT, n_probs: 2, post_sampling_probs: 'yes' }, 'post_sampling_probs'], // a boolean (llama_compat.test.mjs)
      [{ prompt: PROMPT, stream_options: { include_usage: true }, stream: true }, 'stream_options'],
      [{ n_predict: 4 }, 'prompt'],
      [{ prompt: PROMPT, temperature: 9 }, 'temperature'],
    ];
    for (const [body, param] of cases) {
      const r = await post(server, '/completion', body);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.body}`);
      assertErrorBody(r.json, { param });
    }
    const g = await get(server, '/completion');
    assert.equal(g.status, 405);
    const p = await post(server, '/slots', {});
    assert.equal(p.status, 405);
    // fields that ask for nothing pass: cache_prompt false, id_slot -1, n_probs 0, n_predict -1
    const ok = await post(server, '/completion', { prompt: PROMPT, cache_prompt: false, id_slot: -1, n_probs: 0,
                                                   n_predict: -1, temperature: 0, stop: ['.'] });
    assert.equal(ok.status, 200, ok.body);
    assert.equal(ok.json.stop_type, 'word');
  });
});
