// Hardening, round 3 (issue 38), the disk tier (--cache-disk) under the cache
// directory's rules: a tier directory writable by others or owned by another
// user is refused at start, and so is a second server on one directory; what
// is planted in place of a tier file (a FIFO, a symlink to a good copy, a
// sparse 1 GiB file) is refused without hanging the request, following the
// link or reading the gigabyte; the files come out 0600 in a 0700 directory.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFile, chmod, chown, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, truncate, unlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { it } from 'node:test';
import { promisify } from 'node:util';
import { post, startServer, stopAndCheck, tail } from '../lib/server.mjs';

const A = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park '
  + 'with her friends. One day, she saw a big red ball under a tall green tree. She ran to the tree';
const OTHERS = [
  'Tom had a blue car. He liked to drive it fast down the hill to the old mill where his friend Sam lived. '
  + 'Sam had a big dog named Max, and Max liked to run after the car',
  'The sun was warm and the birds were singing in the tall green trees by the lake. A little duck swam '
  + 'to the shore and looked for bread. A girl came with her mom',
];
const ARGS = ['--ctx', '128', '-np', '1'];

async function complete(server, prompt) {
  const r = await post(server, '/v1/completions', { prompt, max_tokens: 8, temperature: 0 });
  assert.equal(r.status, 200, r.body);
  return { text: r.json.choices[0].text, cached: r.json.usage.prompt_tokens_details.cached_tokens,
           prompt: r.json.usage.prompt_tokens };
}

// p, or a failure naming what did not answer within ms (a hang guard, far above the expected time)
function within(ms, what, p) {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, guard]).finally(() => clearTimeout(timer));
}

const files = async (dir) => (await readdir(dir)).filter((n) => n.endsWith('.tkvc'));

/** Until the disk thread has written what was evicted. */
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

async function tmpdir(t, name) {
  const d = await mkdtemp(path.join(os.tmpdir(), `tkv-e2e-${name}-`));
  t.after(() => rm(d, { recursive: true, force: true }));
  return d;
}

/** The server's peak resident memory in bytes (VmHWM). */
async function peakRss(server) {
  const m = /VmHWM:\s+(\d+) kB/.exec(await readFile(`/proc/${server.pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

/**
 * A's prefix computed, evicted to the tier (dir) by the others, then every tier file replaced by plant(file);
 * A again, within a hang guard: {first, back, server} (the server still running).
 */
async function planted(t, plant) {
  const dir = path.join(await tmpdir(t, 'tier'), 'disk'); // created by the server
  const server = await startServer([...ARGS, '--cache-disk', dir]);
  t.after(() => server.stop());
  try {
    const first = await complete(server, A);
    for (const p of OTHERS) await complete(server, p);
    await settled(dir);
    for (const f of await files(dir)) await plant(path.join(dir, f));
    const back = await within(60000, 'A after the tier files were replaced', complete(server, A));
    return { first, back, server, dir };
  } catch (e) {
    e.message = `${e.message}\n--- server ---\n${tail(server.log())}`;
    throw e;
  }
}

it('a FIFO in place of a tier file: the request is answered (a miss) and SIGTERM still stops the server',
  async (t) => {
    const { first, back, server } = await planted(t, async (f) => {
      await unlink(f);
      await promisify(execFile)('mkfifo', [f]);
    });
    assert.equal(back.text, first.text);
    assert.ok(back.cached < first.prompt - 2, `cached_tokens ${back.cached}: something was loaded from a FIFO`);
    await within(30000, 'SIGTERM with FIFOs in the tier', stopAndCheck(server));
  });

it('a symlink in place of a tier file (to a good copy of it) is not followed', async (t) => {
  const away = await tmpdir(t, 'tier-away');
  const { first, back, server } = await planted(t, async (f) => {
    const copy = path.join(away, path.basename(f));
    await copyFile(f, copy);
    await unlink(f);
    await symlink(copy, f);
  });
  assert.equal(back.text, first.text);
  assert.ok(back.cached < first.prompt - 2, `cached_tokens ${back.cached}: a file was read through a symlink`);
  await stopAndCheck(server);
});

it('a sparse 1 GiB file in place of a tier file is refused by its size, unread', async (t) => {
  const { first, back, server } = await planted(t, (f) => truncate(f, 1 << 30));
  assert.equal(back.text, first.text);
  assert.ok(back.cached < first.prompt - 2, `cached_tokens ${back.cached}`);
  const peak = await peakRss(server);
  assert.ok(peak < 512 << 20, `peak RSS ${peak} bytes: the sparse file was read`);
  await stopAndCheck(server);
});

it('a sparse 1 GiB file found at start is not indexed; files 0600, directory 0700, no temporary names left',
  async (t) => {
    const { dir, server, first, back } = await planted(t, async () => {});
    // the control: untouched, the files load (so the misses of the tests above are refusals)
    assert.ok(back.cached >= first.prompt - 2, `cached_tokens ${back.cached} of ${first.prompt}: not from the disk`);
    await stopAndCheck(server);
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
    const names = await readdir(dir);
    assert.ok(!names.some((n) => n.includes('.tmp')), names.join(' '));
    for (const n of names) assert.equal((await stat(path.join(dir, n))).mode & 0o777, 0o600, n);
    // the server's own name pattern, with its own size written over by a gigabyte of holes
    const [f] = await files(dir);
    await truncate(path.join(dir, f), 1 << 30);
    const again = await startServer([...ARGS, '--cache-disk', dir]);
    try {
      assert.match(again.log(), /cache disk: 1 files refused \(larger than any image this cache writes/);
      await complete(again, A);
      assert.ok(await peakRss(again) < 512 << 20);
    } finally {
      await stopAndCheck(again);
    }
  });

it('a tier directory writable by others, owned by another user or in use by another server is refused',
  async (t) => {
    const open = await tmpdir(t, 'tier-open');
    await chmod(open, 0o777);
    await assert.rejects(startServer([...ARGS, '--cache-disk', open]), /writable by other users \(mode 0777\): refused/);
    await chmod(open, 0o700);
    const first = await startServer([...ARGS, '--cache-disk', open]);
    try {
      await assert.rejects(startServer([...ARGS, '--cache-disk', open]), /in use by another process/);
    } finally {
      await stopAndCheck(first);
    }
    if (process.getuid() === 0) { // only root can give a directory away
      const foreign = path.join(await tmpdir(t, 'tier-foreign'), 'd');
      await mkdir(foreign, { mode: 0o700 });
      await chown(foreign, 65534, 65534);
      await assert.rejects(startServer([...ARGS, '--cache-disk', foreign]), /is owned by uid 65534, not by this user/);
    }
  });
