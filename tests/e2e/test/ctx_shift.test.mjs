// --context-shift (issue 35), as llama-server does it: each request's window
// is --ctx-size / --parallel positions; a longer prompt is cut in blocks
// after its first n_keep tokens, and a generation that fills the window drops
// half of what follows the kept tokens and goes on. The cache must still
// hold exactly what it says: the test rebuilds the shifted token list from
// the rules (its own model of the state), finds that list cached, and checks
// that what the server computed after the shift is what a fresh computation
// of that list gives, in a namespace where nothing is reused.
import assert from 'node:assert/strict';
import { get, post, serverSuite, tokenize } from '../lib/server.mjs';

const CELLS = 256, SLOTS = 2, WINDOW = CELLS / SLOTS;
const LONG = 'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et '
  + 'dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea '
  + 'commodo consequat. Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla '
  + 'pariatur. Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt mollit anim id est.';

/** llama-server's cut of a prompt of n tokens that does not fit the window: what is left of it. */
function cutLength(n, keep) {
  const block = Math.floor((WINDOW - keep) / 2);
  return n - Math.floor((n - keep - block) / block) * block;
}

/** The token list a sequence holds at the end: the prompt, each generated token appended, a shift whenever the
 * list reaches the window (the BOS kept, half of the rest dropped); the last token was sampled from this list. */
function shiftedList(prompt, generated) {
  let list = [...prompt];
  for (const g of generated.slice(0, -1)) {
    list.push(g);
    if (list.length >= WINDOW) {
      const keep = 1, discard = Math.floor((list.length - 1 - keep) / 2);
      list = [...list.slice(0, keep), ...list.slice(keep + discard)];
    }
  }
  return list;
}

serverSuite('--context-shift', ['-c', String(CELLS), '-np', String(SLOTS), '--context-shift'], (ctx) => {
  ctx.test('a prompt longer than the window is cut as llama-server cuts it', async (server) => {
    const n = (await tokenize(server, LONG)).length;
    assert.ok(n > WINDOW, `the prompt is ${n} tokens`);
    const r = await post(server, '/completion', { prompt: LONG, n_predict: 8, temperature: 0 });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.json.truncated, true);
    assert.equal(r.json.timings.prompt_n, cutLength(n, 0));
    assert.equal(r.json.tokens_evaluated, cutLength(n, 0));
    const kept = await post(server, '/completion', { prompt: LONG, n_predict: 1, n_keep: 10, cache_salt: 'k' });
    assert.equal(kept.json.tokens_evaluated, cutLength(n, 10));
  });

  ctx.test('a generation past the window goes on; the cache holds exactly the shifted list', async (server) => {
    const prompt = await tokenize(server, 'Once upon a time');
    const r = await post(server, '/completion', { prompt, n_predict: 300, temperature: 0, ignore_eos: true,
      return_tokens: true });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.json.tokens_predicted, 300);
    assert.equal(r.json.tokens.length, 300);
    assert.equal(r.json.truncated, true);
    const list = shiftedList(prompt, r.json.tokens);
    assert.ok(list.length < WINDOW);
    // the list is cached: all but its last token (decoded for its logits) are reused
    const again = await post(server, '/completion', { prompt: list, n_predict: 1, temperature: 0 });
    assert.equal(again.json.tokens_cached, list.length - 1);
    // and computed honestly: a fresh computation of it, nothing reused, samples the same last token
    const fresh = await post(server, '/completion', { prompt: list, n_predict: 1, temperature: 0,
      ignore_eos: true, return_tokens: true, cache_salt: 'fresh' });
    assert.equal(fresh.json.tokens_cached, 0);
    assert.deepEqual(fresh.json.tokens, r.json.tokens.slice(-1));
    const check = await get(server, '/v1/cache?check=1');
    assert.equal(check.status, 200, check.body);
    assert.equal(check.json.check, 'ok');
  });

  ctx.test('n_keep and n_discard are llama-server\'s: a bad one is refused by name', async (server) => {
    const r = await post(server, '/completion', { prompt: 'Hi', n_keep: -2 });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'n_keep');
    const d = await post(server, '/completion', { prompt: 'Hi', n_discard: 'x' });
    assert.equal(d.json.error.param, 'n_discard');
  });
});

serverSuite('without --context-shift', ['-c', String(CELLS), '-np', String(SLOTS)], (ctx) => {
  ctx.test('a prompt over the context is refused, as llama-server words it', async (server) => {
    const r = await post(server, '/completion', { prompt: LONG.repeat(2), n_predict: 8 });
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /exceeds the available context size/);
  });
});
