// --swa-rows (issue 34, item 5): a sliding-window model (models/arch/gemma3.gguf, a window of 32) whose window
// layers keep their K/V in a pool of rows instead of one per cell must answer exactly as a server without the
// pool, one conversation and many at once, report as cached no more than it reuses, and keep a cache that
// checks; the flag is refused by name where it cannot work (another model, too few rows, cache files).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { SHARED, get, startServer, stopAndCheck, tail } from '../lib/server.mjs';
import path from 'node:path';

const MODEL = path.join(SHARED, 'models', 'arch', 'gemma3.gguf');
const ROWS = 128; // the minimum: 4 sequences x the window of 32
const BASE = ['-c', '512', '-np', '4'];
const STORY = 'Once upon a time there was a little girl who lived in a house near the woods. Every morning she '
  + 'walked to the river with her dog, and every evening she told her mother what she had seen there.';
const OTHERS = ['The big red ball rolled down the hill and into the pond where the ducks were swimming all day long '
  + 'in the sun.', 'Tom and his friend went to the park to play on the swings, but it started to rain and they ran '
  + 'home as fast as they could.', 'A small bird sat on the window and sang a song for the old man who lived there '
  + 'alone with his cat and his books.'];

const completion = (prompt) => ({ model: 'm', prompt, max_tokens: 12, temperature: 0, ignore_eos: true });

async function ask(server, prompt) {
  const r = await server.client({ maxRetries: 0 }).completions.create(completion(prompt));
  return { text: r.choices[0].text, cached: r.usage.prompt_tokens_details?.cached_tokens ?? 0, prompt: r.usage.prompt_tokens };
}

describe('a sliding-window model with --swa-rows', () => {
  let full = null, pool = null;
  before(async () => {
    full = await startServer(BASE, { model: MODEL });
    pool = await startServer([...BASE, '--swa-rows', String(ROWS)], { model: MODEL });
  });
  after(async () => {
    if (full) await stopAndCheck(full);
    if (pool) await stopAndCheck(pool);
  });
  const withLogs = (fn) => async () => {
    try {
      await fn();
    } catch (e) {
      e.message = `${e.message}\n--- pool server stderr ---\n${tail(pool.log())}`;
      throw e;
    }
  };

  it('a conversation past the window answers as without the pool, and reuses no more than it holds',
     withLogs(async () => {
    let prompt = STORY;
    for (let turn = 0; turn < 3; turn++) {
      const a = await ask(full, prompt), b = await ask(pool, prompt);
      assert.equal(b.text, a.text, `turn ${turn}: the answer`);
      assert.ok(b.prompt > 32, `turn ${turn}: a prompt longer than the window (${b.prompt} tokens)`);
      assert.ok(b.cached <= a.cached, `turn ${turn}: cached ${b.cached}, the full cache's ${a.cached}`);
      // each turn extends the last one's prompt and answer: the pool still holds that sequence's last window
      if (turn > 0) assert.ok(b.cached > 32, `turn ${turn}: cached ${b.cached} of ${b.prompt}`);
      prompt = `${prompt}${a.text} And then`;
    }
    const cache = (await get(pool, '/v1/cache?check=1')).json;
    assert.equal(cache.check, 'ok');
  }));

  it('four requests at once answer as they do alone without the pool', withLogs(async () => {
    const prompts = [STORY, ...OTHERS];
    const alone = [];
    for (const p of prompts) alone.push(await ask(full, p));
    const together = await Promise.all(prompts.map((p) => ask(pool, p)));
    together.forEach((r, i) => assert.equal(r.text, alone[i].text, `request ${i}`));
    assert.equal((await get(pool, '/v1/cache?check=1')).json.check, 'ok');
  }));
});

// Known tokens with the pool: a greedy retry with drafts takes its answer from the cache (as far as the pool holds
// the window's rows, which a recent answer's are) and answers as the server without the pool.
describe('known tokens with --swa-rows', () => {
  let full = null, pool = null;
  before(async () => {
    full = await startServer(BASE, { model: MODEL });
    pool = await startServer([...BASE, '--swa-rows', String(ROWS), '--draft', '8', '--draft-always'], { model: MODEL });
  });
  after(async () => {
    if (full) await stopAndCheck(full);
    if (pool) await stopAndCheck(pool);
  });
  it('a greedy retry past the window takes known tokens and answers as without the pool', async () => {
    const body = { model: 'm', prompt: STORY, max_tokens: 48, temperature: 0, ignore_eos: true };
    const want = (await full.client({ maxRetries: 0 }).completions.create(body)).choices[0].text;
    const known = async () => Number(/^tokenkv_draft_known_tokens_total (\S+)$/m.exec((await get(pool, '/metrics')).body)[1]);
    for (let k = 0; k < 2; k++) {
      const r = await pool.client({ maxRetries: 0 }).completions.create(body);
      assert.equal(r.choices[0].text, want, `request ${k}: the answer`);
    }
    const n = await known();
    assert.ok(n >= 40, `the retry's tokens were known: ${n} of 48\n${tail(pool.log())}`);
    assert.equal((await get(pool, '/v1/cache?check=1')).json.check, 'ok');
  });
});

describe('--swa-rows refused by name', () => {
  const refused = async (args, model, re) => {
    await assert.rejects(startServer(args, { model }), (e) => {
      assert.match(e.message, re);
      return true;
    });
  };
  it('on a model without window layers, under the minimum, and beside cache files', async () => {
    await refused(['--swa-rows', '64'], path.join(SHARED, 'models', 'stories260K.gguf'), /no sliding-window layers/);
    await refused([...BASE, '--swa-rows', '16'], MODEL, /swa_rows = 16 is under the minimum of 128/);
    await refused([...BASE, '--swa-rows', String(ROWS), '--cache-dir', '/tmp/tkv-swa-never'], MODEL,
                  /--swa-rows cannot be combined with --cache-dir/);
  });
});
