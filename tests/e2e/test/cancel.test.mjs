// A client that goes away mid-stream: its generation stops, the cache stays
// consistent and keeps what was computed; /metrics tells the story.
import assert from 'node:assert/strict';
import { MODEL_ID, get, serverSuite, tokenize, waitFor } from '../lib/server.mjs';

// stories260K at temperature 0 does not reach end-of-text for thousands of
// tokens after this prompt, so only the client's abort can end it early
const PROMPT = 'Once upon a time, there was a big dog named Max.';
const MAX_TOKENS = 2000;

function metric(text, name) {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  assert.ok(m, `${name} in /metrics`);
  return Number(m[1]);
}

serverSuite('cancellation', ['--parallel', '2'], (s) => {
  s.test('aborting a stream stops its generation and keeps the cache consistent', async (server) => {
    const client = server.client({ maxRetries: 0 });
    const promptLen = (await tokenize(server, PROMPT)).length;
    const ac = new AbortController();
    const stream = await client.completions.create(
      { model: MODEL_ID, prompt: PROMPT, max_tokens: MAX_TOKENS, temperature: 0, stream: true },
      { signal: ac.signal });
    let chunks = 0;
    let text = '';
    for await (const c of stream) {
      text += c.choices[0].text;
      if (++chunks === 3) {
        ac.abort(); // closes the connection
        break;      // (chunks already received would still be handed out)
      }
    }
    assert.ok(text.length > 0);

    // the server notices within a step or so: no sequence left running
    let cache;
    await waitFor(async () => {
      cache = (await get(server, '/v1/cache?check=1')).json;
      return cache.sequences.length === 0;
    }, 'the cancelled request to leave its sequence', 10000);
    assert.equal(cache.check, 'ok');
    assert.ok(cache.cells.used > promptLen, `what it computed stays cached: ${cache.cells.used} cells`);
    assert.equal(cache.cells.used, cache.cells.evictable, 'nothing is referenced any more');

    // it stopped long before its budget
    const m1 = await get(server, '/metrics');
    const generated = metric(m1.body, 'tokenkv_generated_tokens_total');
    assert.ok(generated >= 3 && generated < MAX_TOKENS, `generated ${generated} of ${MAX_TOKENS}`);
    await waitFor(() => /POST \/v1\/completions 499 /.test(server.log()), 'the 499 ("client closed") log line', 5000);
    // the line counts the tokens the stream sent (it said 0 before), and the client leaving is no error
    const line = /POST \/v1\/completions 499 .*generated=(\d+)/.exec(server.log());
    assert.ok(Number(line[1]) >= 3 && Number(line[1]) <= generated, line[0]);
    assert.doesNotMatch(server.log(), /tokenkv serve: http: /, 'no libmicrohttpd message about the closed socket');

    // the same prompt again reuses the cancelled request's cells
    const again = await client.completions.create({ model: MODEL_ID, prompt: PROMPT, max_tokens: 8, temperature: 0 });
    assert.equal(again.usage.prompt_tokens_details.cached_tokens, promptLen - 1);
    assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0);
    assert.ok(text.startsWith(again.choices[0].text) || again.choices[0].text.startsWith(text),
              `the cancelled stream's text ${JSON.stringify(text)} and the new one ${JSON.stringify(again.choices[0].text)} agree`);

    // Prometheus text: counters by status and the latency histograms
    const m = await get(server, '/metrics');
    assert.equal(m.status, 200);
    assert.match(m.headers.get('content-type'), /^text\/plain/);
    const body = m.body;
    assert.match(body, /^# TYPE tokenkv_requests_total counter$/m);
    assert.ok(metric(body, 'tokenkv_requests_total\\{status="200"\\}') >= 4);
    assert.equal(metric(body, 'tokenkv_requests_total\\{status="499"\\}'), 1); /* counted as such, not "other" */
    for (const h of ['tokenkv_time_to_first_token_seconds', 'tokenkv_time_per_output_token_seconds']) {
      assert.match(body, new RegExp(`^# TYPE ${h} histogram$`, 'm'));
      const inf = metric(body, `${h}_bucket\\{le="\\+Inf"\\}`);
      assert.equal(metric(body, `${h}_count`), inf);
      assert.ok(inf >= 1, `${h}: ${inf} observations`);
      assert.ok(metric(body, `${h}_sum`) > 0);
      // buckets are cumulative
      const buckets = [...body.matchAll(new RegExp(`^${h}_bucket\\{le="([^"]+)"\\} (\\d+)$`, 'gm'))].map((x) => Number(x[2]));
      assert.ok(buckets.length >= 2);
      for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i] >= buckets[i - 1]);
    }
    assert.equal(metric(body, 'tokenkv_generated_tokens_total'), generated + again.usage.completion_tokens);
    assert.ok(metric(body, 'tokenkv_cached_prompt_tokens_total') >= promptLen - 1);
    // every line is a comment or "name{labels} value"
    for (const line of body.split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      assert.match(line, /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? \S+$/, line);
    }
  });

  s.test('a client that leaves a plain request also cancels it', async (server) => {
    const prompt = 'Tim and Sue went to the park to play with a big ball.';
    const ac = new AbortController();
    const pending = fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt, max_tokens: MAX_TOKENS, temperature: 0 }),
      signal: ac.signal,
    });
    // wait until it runs, then leave
    await waitFor(async () => (await get(server, '/v1/cache')).json.sequences.length === 1, 'the request to start');
    ac.abort();
    await assert.rejects(pending, (e) => e.name === 'AbortError');
    await waitFor(async () => (await get(server, '/v1/cache')).json.sequences.length === 0, 'the request to end', 10000);
    const cache = (await get(server, '/v1/cache?check=1')).json;
    assert.equal(cache.check, 'ok');
    await waitFor(() => /POST \/v1\/completions 499 .*generated=\d+/.test(server.log()), 'the 499 log line', 5000);
    const line = /POST \/v1\/completions 499 .*generated=(\d+)/.exec(server.log());
    assert.ok(Number(line[1]) < MAX_TOKENS, line[0]);
  });
});
