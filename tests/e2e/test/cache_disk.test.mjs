// --cache-disk: a prefix evicted from RAM (a cache of 128 cells) is written
// to the directory in the background and comes back from it: the next
// request that continues it reports it as cached and gets the answer the
// server computed from scratch the first time; so does a new server on the
// same directories (--cache-dir keeps what RAM held, the disk what it
// evicted). A damaged file is refused (a miss, the same answer), and the
// directory stays within --cache-disk-max.
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { it } from 'node:test';
import { get, post, startServer, stopAndCheck, tail } from '../lib/server.mjs';

const A = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park '
  + 'with her friends. One day, she saw a big red ball under a tall green tree. She ran to the tree';
const OTHERS = [
  'Tom had a blue car. He liked to drive it fast down the hill to the old mill where his friend Sam lived. '
  + 'Sam had a big dog named Max, and Max liked to run after the car',
  'The sun was warm and the birds were singing in the tall green trees by the lake. A little duck swam '
  + 'to the shore and looked for bread. A girl came with her mom',
];

async function complete(server, prompt) {
  const r = await post(server, '/v1/completions', { prompt, max_tokens: 8, temperature: 0 });
  assert.equal(r.status, 200, r.body);
  return { text: r.json.choices[0].text, cached: r.json.usage.prompt_tokens_details.cached_tokens,
           prompt: r.json.usage.prompt_tokens, completion: r.json.usage.completion_tokens };
}

const files = async (dir) => (await readdir(dir)).filter((n) => n.endsWith('.tkvc'));

/** Until the disk thread has written what was evicted (a run staged but not written yet is a miss). */
async function settled(dir) {
  let last = -1;
  for (let i = 0; i < 50; i++) {
    const n = (await files(dir)).length;
    if (n === last && n > 0) return;
    last = n;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the disk directory did not settle (${last} files)`);
}

async function dirBytes(dir) {
  let n = 0;
  for (const f of await files(dir)) n += (await stat(path.join(dir, f))).size;
  return n;
}

it('evicted prefixes come back from the disk, across a restart; damaged files are misses', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'tkv-e2e-disk-'));
  const ram = await mkdtemp(path.join(os.tmpdir(), 'tkv-e2e-disk-ram-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  t.after(() => rm(ram, { recursive: true, force: true }));
  const args = ['--ctx', '128', '-np', '1', '--cache-disk', dir, '--cache-dir', ram, '--save-interval', '0'];
  let server = await startServer(args);
  try {
    const first = await complete(server, A); // computed from scratch: the reference answer
    assert.ok(first.prompt > 60);
    for (const p of OTHERS) await complete(server, p); // they evict A
    await settled(dir);
    const back = await complete(server, A);
    assert.ok(back.cached >= first.prompt - 2, `cached_tokens ${back.cached} of ${first.prompt}: not from the disk`);
    assert.equal(back.text, first.text);
    await stopAndCheck(server);

    // a new server: RAM gets what it held from --cache-dir, the rest of A is on the disk
    server = await startServer(args);
    assert.match(server.log(), /cache disk: .* holds [1-9]\d* files/);
    const again = await complete(server, A);
    assert.ok(again.cached >= first.prompt - 2, `cached_tokens ${again.cached} after a restart`);
    assert.equal(again.text, first.text);
    await stopAndCheck(server);

    // A's tail evicted again, then every file damaged: each is refused when loaded, the prompt is computed
    server = await startServer(args);
    for (const p of OTHERS) await complete(server, p);
    await settled(dir);
    for (const f of await files(dir)) {
      const p = path.join(dir, f);
      const b = await readFile(p);
      b[b.length - 20] ^= 0xff;
      await writeFile(p, b);
    }
    const damaged = await complete(server, A);
    assert.ok(damaged.cached < first.prompt - 2, `cached_tokens ${damaged.cached}: damaged files were used`);
    assert.equal(damaged.text, first.text);
    await stopAndCheck(server);

    // the limit: LRU files go
    const max = 300000;
    server = await startServer([...args, '--cache-disk-max', String(max)]);
    for (let i = 0; i < 6; i++) await complete(server, `${OTHERS[i % 2]} and then ${i} more words came`);
    await complete(server, A);
    await stopAndCheck(server);
    assert.ok(await dirBytes(dir) <= max, `${await dirBytes(dir)} bytes on disk, limit ${max}`);
  } catch (e) {
    e.message = `${e.message}\n--- server ---\n${tail(server.log())}`;
    throw e;
  } finally {
    await server.stop();
  }
});

// Known tokens come back with their cells: a greedy request's prompt evicted to the disk is loaded back with the
// record of what its last row chose (format version 4), and the files that go on past the prompt (the eviction
// cuts the answer into pieces; each next piece is found by the last one's key) bring the answer's cells with them
// (TKV_IMAGE_CONTINUATION), so a drafting server's retry takes its whole answer from the cache, the same text.
it('an evicted greedy prompt comes back from the disk with its whole answer known', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'tkv-e2e-disk-known-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const server = await startServer(['--ctx', '128', '-np', '1', '--cache-disk', dir, '--draft', '8', '--draft-always']);
  const known = async () => Number(/^tokenkv_draft_known_tokens_total (\S+)$/m.exec((await get(server, '/metrics')).body)[1]);
  try {
    const first = await complete(server, A);
    for (const p of OTHERS) await complete(server, p); // they evict A and its answer
    await settled(dir);
    const k0 = await known();
    const back = await complete(server, A);
    assert.ok(back.cached >= first.prompt - 2, `cached_tokens ${back.cached} of ${first.prompt}: not from the disk`);
    assert.equal(back.text, first.text);
    assert.equal(await known() - k0, first.completion, 'known tokens after the load: the whole answer');
    await stopAndCheck(server);
  } catch (e) {
    e.message = `${e.message}\n--- server ---\n${tail(server.log())}`;
    throw e;
  } finally {
    await server.stop();
  }
});
