// --cache-dir: the prefix cache outlives the server. A graceful restart
// reuses what the last run cached; corrupt files are skipped with a warning;
// a server killed with SIGKILL at random moments (some of them during a save)
// restarts on the same directory with a consistent cache; periodic saves
// write only the files of new prefixes. Throughout, every
// answer is the answer of a fresh server that has no cache directory (and no
// prefix cache at all): a loaded K/V row paired with the wrong token would
// change the text.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, readdir, rm, stat, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { execFile } from 'node:child_process';
import {
  BIN, MODEL, MODEL_ID, cliIds, commonPrefix, get, kill, post, startServer, stopAndCheck, tail, tokenize,
} from '../lib/server.mjs';

// ~75 tokens on stories260K
const PROMPT = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park '
  + 'with her friends. One day, she saw a big red ball under a tall green tree. She ran to the tree, '
  + 'picked up the ball and';
const SANITIZER_REPORT = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer/;
const LOADED = /cache: loaded (\d+) files \((\d+) tokens\)/;
const SKIPPED = /warning: cache: skipped (\d+) files that failed validation/;
const SAVED = /cache: saved to .* in ([\d.]+) ms/g;

// a seeded generator (mulberry32): the prompts and kill moments of a run
// are reproducible; TKV_E2E_SEED picks another run
const SEED = Number(process.env.TKV_E2E_SEED || 20250607) >>> 0;
function rng32(seed) {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function tmpDir(t) {
  const d = await mkdtemp(path.join(os.tmpdir(), 'tkv-e2e-persist-'));
  t.after(() => rm(d, { recursive: true, force: true }));
  return d;
}

/** The names of dir's cache files (what a load considers), and its leftover temporary files. */
async function listDir(dir) {
  const names = (await readdir(dir).catch((e) => (e.code === 'ENOENT' ? [] : Promise.reject(e)))).sort();
  return {
    cache: names.filter((n) => n.endsWith('.tkvc') && !n.includes('.tmp')),
    tmp: names.filter((n) => n.includes('.tmp')),
  };
}

/** {files, tokens, skipped} from a server's start-up lines. */
function loadLine(log) {
  if (/cache: .* does not exist yet: starting empty/.test(log)) return { files: 0, tokens: 0, skipped: 0 };
  const m = LOADED.exec(log);
  assert.ok(m, `no 'cache: loaded' line:\n${tail(log)}`);
  const s = SKIPPED.exec(log);
  return { files: Number(m[1]), tokens: Number(m[2]), skipped: s ? Number(s[1]) : 0 };
}

function saves(log) {
  return [...log.matchAll(SAVED)].map((m) => Number(m[1]));
}

/** POST /v1/completions, greedy; resolves {text, cached, prompt_tokens, finish}. */
async function complete(server, prompt, maxTokens) {
  const r = await post(server, '/v1/completions', { model: MODEL_ID, prompt, max_tokens: maxTokens, temperature: 0 });
  assert.equal(r.status, 200, r.body);
  const u = r.json.usage;
  return { text: r.json.choices[0].text, cached: u.prompt_tokens_details.cached_tokens, prompt_tokens: u.prompt_tokens };
}

async function cacheCheck(server) {
  const r = await get(server, '/v1/cache?check=1');
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.check, 'ok', `tkv_cache_check after a restart: ${r.json.check}`);
  return r.json;
}

/** Run fn(); a failure kills the servers and gets their stderr appended. */
async function withLogs(servers, fn) {
  try {
    return await fn();
  } catch (e) {
    await Promise.all(servers.filter(Boolean).map((s) => kill(s)));
    if (e && typeof e === 'object') {
      for (const s of servers.filter(Boolean)) {
        try {
          e.message += `\n--- server stderr (${s.argv.join(' ')}) ---\n${tail(s.log(), 4000)}`;
        } catch { /* a read-only message */ }
      }
    }
    throw e;
  }
}

describe('persistence (--cache-dir)', () => {
  // the oracle: a fresh server without --cache-dir nor a prefix cache, each
  // answer computed from the prompt alone
  let fresh;
  const oracleMemo = new Map();
  const oracle = (prompt, n) => {
    const key = `${n}\u0000${prompt}`;
    if (!oracleMemo.has(key)) oracleMemo.set(key, complete(fresh, prompt, n));
    return oracleMemo.get(key);
  };
  before(async () => {
    fresh = await startServer(['--no-prefix-cache']);
  });
  after(async () => {
    if (fresh) await stopAndCheck(fresh);
  });

  it('a graceful restart reuses the prompt and the generated tokens', async (t) => {
    const dir = path.join(await tmpDir(t), 'cache'); // not there yet: the server creates it
    const args = ['--cache-dir', dir, '--save-interval', '0'];
    const first = await startServer(args);
    let firstText, promptIds, gen;
    await withLogs([first], async () => {
      assert.match(first.log(), /cache: .* does not exist yet: starting empty/);
      promptIds = await tokenize(first, PROMPT);
      assert.ok(promptIds.length >= 60, `${promptIds.length} prompt tokens`);
      const r = await complete(first, PROMPT, 16);
      assert.equal(r.cached, 0);
      assert.equal(r.text, (await oracle(PROMPT, 16)).text);
      firstText = r.text;
      // the generated ids (the CLI is the oracle of the ids; they must read as the text)
      gen = await cliIds(PROMPT, 16);
      const detok = await post(first, '/detokenize', { tokens: [...promptIds, ...gen] });
      const head = await post(first, '/detokenize', { tokens: promptIds });
      assert.equal(detok.json.content.slice(head.json.content.length), firstText, 'the CLI ids are the text');
    });
    await stopAndCheck(first);
    const firstLog = (await first.stop()).log;
    assert.equal(saves(firstLog).length, 1, `one save, at shutdown:\n${tail(firstLog)}`);
    const files = (await listDir(dir)).cache;
    assert.ok(files.length >= 1, 'the shutdown wrote cache files');

    // what was cached: the prompt and the generated tokens but the last (never decoded)
    const run = [...promptIds, ...gen.slice(0, -1)];
    const second = await startServer(args);
    await withLogs([second], async () => {
      const loaded = loadLine(second.log());
      assert.deepEqual(loaded, { files: files.length, tokens: run.length, skipped: 0 });
      const view = await cacheCheck(second);
      assert.equal(view.cells.used, run.length, 'the cache holds what was saved');

      // the same prompt with more text, which begins with the first answer:
      // cached = the shared token prefix (at most all but the last prompt token)
      const longer = `${PROMPT}${firstText} Then they went home and had a nice dinner.`;
      const longerIds = await tokenize(second, longer);
      const expected = Math.min(commonPrefix(longerIds, run), longerIds.length - 1);
      assert.ok(expected > promptIds.length, `the generated tokens were saved too (${expected} > ${promptIds.length})`);
      const r = await complete(second, longer, 16);
      assert.equal(r.prompt_tokens, longerIds.length);
      assert.equal(r.cached, expected, 'cached_tokens after the restart');
      assert.equal(r.text, (await oracle(longer, 16)).text, 'the same text as a fresh server');

      // the first prompt again: all of it but the last token
      const again = await complete(second, PROMPT, 16);
      assert.equal(again.cached, promptIds.length - 1);
      assert.equal(again.text, firstText);
      await cacheCheck(second);
    });
    await stopAndCheck(second);
  });

  it('corrupt or truncated files are skipped with a warning', async (t) => {
    // a directory that is there and empty (tests (a) and (c) start from
    // one that is not there yet): nothing to load
    const dir = await tmpDir(t);
    const args = ['--cache-dir', dir, '--save-interval', '0'];
    // a tree with branches: several files, children after their parents
    const prompts = [PROMPT, `${PROMPT} threw it to her friend Ben.`, `${PROMPT} took it home.`,
                     'Tom had a blue car. He liked to drive it fast.'];
    const first = await startServer(args);
    await withLogs([first], async () => {
      assert.deepEqual(loadLine(first.log()), { files: 0, tokens: 0, skipped: 0 });
      for (const p of prompts) await complete(first, p, 8);
    });
    await stopAndCheck(first);
    const { cache: files } = await listDir(dir);
    assert.ok(files.length >= 4, `${files.length} files`);

    // a byte flipped in the middle of every file (K/V data), and one file
    // truncated to a third besides (before that byte: truncation alone)
    for (const f of files) {
      const p = path.join(dir, f);
      const b = await readFile(p);
      b[b.length >> 1] ^= 0x5a;
      await writeFile(p, b);
    }
    const cut = path.join(dir, files[0]);
    await truncate(cut, Math.floor((await stat(cut)).size / 3));

    const second = await startServer(args);
    await withLogs([second], async () => {
      const log = second.log();
      assert.deepEqual(loadLine(log), { files: 0, tokens: 0, skipped: files.length }, 'every file skipped');
      assert.match(log, /warning: cache: skipped \d+ files that failed validation; the first: .*cache file/);
      assert.equal((await get(second, '/health')).status, 200);
      const view = await cacheCheck(second);
      assert.equal(view.cells.used, 0, 'nothing was loaded');
      const r = await complete(second, prompts[1], 8);
      assert.equal(r.cached, 0, 'nothing of the corrupt files is reused');
      assert.equal(r.text, (await oracle(prompts[1], 8)).text);
      const other = await complete(second, prompts[3], 8);
      assert.equal(other.cached, 1, 'BOS, from the request before');
      assert.equal(other.text, (await oracle(prompts[3], 8)).text);
    });
    await stopAndCheck(second);

    // that save replaced the corrupt files: the next start loads all, skips none
    const { cache: now } = await listDir(dir);
    const third = await startServer(args);
    await withLogs([third], async () => {
      const l = loadLine(third.log());
      assert.equal(l.skipped, 0);
      assert.equal(l.files, now.length);
      await cacheCheck(third);
      const r = await complete(third, prompts[1], 8);
      assert.ok(r.cached > 0);
      assert.equal(r.text, (await oracle(prompts[1], 8)).text);
    });
    await stopAndCheck(third);
  });

  it('SIGKILL at random moments (during saves too): restarts answer as a fresh server', async (t) => {
    const dir = path.join(await tmpDir(t), 'cache');
    const args = ['--cache-dir', dir, '--save-interval', '1'];
    const rand = rng32(SEED);
    const pick = (a, r = rand) => a[Math.floor(r() * a.length)];
    const OPENINGS = [
      PROMPT,
      'Tom had a blue car. He liked to drive it around the garden every day. One morning, he saw',
      'The sun was hot and the sky was blue. Sam and Mia went to the shop to buy some ice cream, and',
      'A little bird flew to the top of the big tree. It looked down at the children playing and',
    ];
    const WORDS = ['the', 'cat', 'dog', 'happy', 'ran', 'to', 'a', 'big', 'red', 'ball', 'and', 'saw', 'tree',
                   'mom', 'said', 'play', 'fun', 'little', 'boy', 'girl', 'park', 'sun', 'jumped', 'smiled'];
    // the prompts of the load: the same sequence each run (whichever client sends each)
    const makePrompt = (r) => {
      const n = 3 + Math.floor(r() * 12);
      const words = Array.from({ length: n }, () => pick(WORDS, r));
      return { prompt: `${pick(OPENINGS, r)} ${words.join(' ')}.`, n: 4 + Math.floor(r() * 20) };
    };
    t.diagnostic(`seed ${SEED} (TKV_E2E_SEED)`);

    const KILLS = 8;
    const history = []; // every request sent: {prompt, n, life, text?}
    let reusedFromDisk = 0; // first requests after a restart that reused loaded K/V
    let killedMidSave = 0;
    let loadedTotal = 0;
    for (let life = 0; life <= KILLS; life++) {
      const pre = await listDir(dir);
      const server = await startServer(args);
      await withLogs([server], async () => {
        // it starts; every cache file (never a .tmp) was loaded or skipped
        const log = server.log();
        assert.ok(!SANITIZER_REPORT.test(log), log);
        if (life > 0) {
          const l = loadLine(log);
          assert.equal(l.files + l.skipped, pre.cache.length,
                       `loaded + skipped = the cache files present (${pre.cache.length}), .tmp files (${pre.tmp.length}) ignored`);
          loadedTotal += l.tokens;
          t.diagnostic(`life ${life}: loaded ${l.files} files (${l.tokens} tokens), skipped ${l.skipped}`);
        }
        const view = await cacheCheck(server);

        // prompts sent before the kill answer as on a fresh server; first
        // the last one answered (on this fresh start, what it reuses can
        // only come from the files)
        const prev = history.filter((h) => h.life === life - 1);
        const answered = prev.filter((h) => h.text !== undefined);
        const checks = answered.length ? [answered[answered.length - 1]] : [];
        const older = history.filter((h) => h.life < life - 1);
        for (let k = 0; k < 2 && prev.length; k++) checks.push(pick(prev)); // finished or cut off by the kill
        for (let k = 0; k < 2 && older.length; k++) checks.push(pick(older));
        for (const [k, h] of checks.entries()) {
          const r = await complete(server, h.prompt, h.n);
          assert.equal(r.text, (await oracle(h.prompt, h.n)).text,
                       `life ${life}: '${h.prompt}' (sent in life ${h.life}) after the restart`);
          if (k === 0 && view.cells.used > 0 && r.cached > 0) reusedFromDisk++;
        }

        if (life === KILLS) return; // the last life ends gracefully, below

        // load: two clients, one prompt after another, the tree keeps changing
        const prand = rng32((SEED + 7919 * (life + 1)) >>> 0);
        let killed = false;
        const errors = [];
        const worker = async () => {
          while (!killed) {
            const h = { ...makePrompt(prand), life };
            history.push(h);
            try {
              const r = await complete(server, h.prompt, h.n);
              h.text = r.text;
            } catch (e) {
              if (!killed) errors.push(e);
              return; // cut off by the kill
            }
          }
        };
        const workers = [worker(), worker()];
        // when to kill: half the lives at a moment spread over 0-1500 ms of
        // load; the others aimed at the next save (saves come 1 s apart and
        // take a few ms per file): 1 s after one ended, plus up to 1.5 times
        // its duration
        let delay = Math.floor(rand() * 1500);
        const aimed = life % 2 === 1;
        const frac = rand();
        if (aimed) {
          const n0 = saves(server.log()).length;
          const end = Date.now() + 5000;
          while (saves(server.log()).length === n0 && Date.now() < end) await sleep(1);
          const last = saves(server.log()).at(-1) ?? 10;
          delay = 1000 + Math.floor(frac * (1.5 * last + 5));
        }
        await sleep(delay);
        killed = true;
        const { signal, log: killedLog } = await kill(server);
        assert.equal(signal, 'SIGKILL');
        assert.ok(!SANITIZER_REPORT.test(killedLog), killedLog);
        await Promise.all(workers);
        if (errors.length) throw errors[0];
        const nSaves = saves(killedLog).length;
        const postDir = await listDir(dir);
        if (postDir.tmp.length > pre.tmp.length) killedMidSave++;
        t.diagnostic(`life ${life}: killed ${delay} ms ${aimed ? 'after a save ended (aimed at the next)' : 'into the load'}; `
                     + `${history.filter((h) => h.life === life).length} requests, ${nSaves} saves `
                     + `(${saves(killedLog).join(', ')} ms); ${postDir.cache.length} files, ${postDir.tmp.length} .tmp`);

        // the answers of the load itself (some of them on K/V loaded at the start)
        const done = history.filter((h) => h.life === life && h.text !== undefined);
        const step = Math.max(1, Math.floor(done.length / 12));
        for (let k = 0; k < done.length; k += step) {
          assert.equal(done[k].text, (await oracle(done[k].prompt, done[k].n)).text,
                       `life ${life}: '${done[k].prompt}' under load`);
        }
      });
      if (life === KILLS) {
        await stopAndCheck(server);
      }
    }
    t.diagnostic(`${killedMidSave} kills left a .tmp file (killed during a save); ${loadedTotal} tokens loaded in all; `
                 + `${reusedFromDisk} first requests reused loaded K/V`);
    assert.ok(loadedTotal > 0, 'the restarts loaded something');
    assert.ok(reusedFromDisk > 0, 'some restart reused K/V it loaded');

    // after a graceful save the directory is whole: everything loads, nothing is skipped
    const { cache: files } = await listDir(dir);
    const last = await startServer(args);
    await withLogs([last], async () => {
      assert.deepEqual(loadLine(last.log()).skipped, 0);
      assert.equal(loadLine(last.log()).files, files.length);
      await cacheCheck(last);
    });
    await stopAndCheck(last);
  });
  it('periodic saves are incremental: a save after new requests writes only the new nodes\' files', async (t) => {
    const dir = path.join(await tmpDir(t), 'cache');
    const server = await startServer(['--cache-dir', dir, '--save-interval', '1']);
    const written = async () => Number(/^tokenkv_cache_save_files_written_total (\d+)/m.exec((await get(server, '/metrics')).body)[1]);
    // the files of the cache dir by name, with their inode: a file written again is a new inode (rename)
    const files = async () => {
      const out = new Map();
      for (const n of (await listDir(dir)).cache) out.set(n, (await stat(path.join(dir, n))).ino);
      return out;
    };
    // wait until a save has written what is cached now: the count stops moving over two saves
    const settle = async () => {
      let last = -1;
      for (let i = 0; i < 40; i++) {
        const n = await written();
        const saves = Number(/^tokenkv_cache_saves_total (\d+)/m.exec((await get(server, '/metrics')).body)[1]);
        if (n === last && saves >= 2) return n;
        last = n;
        await sleep(1100);
      }
      assert.fail('the saves did not settle');
    };
    await withLogs([server], async () => {
      await complete(server, PROMPT, 8);
      await complete(server, 'Tom had a blue car. He liked to drive it around the garden every day.', 8);
      const w0 = await settle();
      const before = await files();
      assert.ok(before.size >= 2, `${before.size} files`);
      // a new prompt: its node is new; the others (BOS, split off already by the second prompt, and the two
      // leaves) keep their files
      await complete(server, 'The sun was hot and the sky was blue. Sam and Mia went to the shop.', 8);
      const w1 = await settle();
      const now = await files();
      const rewritten = [...before].filter(([n, ino]) => now.has(n) && now.get(n) !== ino);
      assert.deepEqual(rewritten, [], 'no file already on disk is written again');
      const added = [...now.keys()].filter((n) => !before.has(n));
      assert.ok(added.length >= 1, 'the new prompt has its file');
      assert.equal(w1 - w0, added.length, `files written by the save = the new files (${added.length})`);
      // idle: the next saves write nothing
      await sleep(2200);
      assert.equal(await written(), w1, 'nothing new, nothing written');
      assert.deepEqual(await files(), now);
    });
    await stopAndCheck(server);
  });
  it('a second server on the same directory exits with a clear message, the first goes on', async (t) => {
    const dir = await tmpDir(t);
    const first = await startServer(['--cache-dir', dir]);
    const second = await new Promise((resolve) => {
      execFile(BIN, ['serve', '-m', MODEL, '--host', '127.0.0.1', '--port', '0', '-t', '1', '--cache-dir', dir],
               { timeout: 20000 }, (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stderr }));
    });
    assert.equal(second.code, 1, second.stderr);
    assert.match(second.stderr, new RegExp(`--cache-dir .* is in use by another server \\(pid ${first.pid ?? '\\d+'}\\)`));
    const r = await complete(first, PROMPT, 4);
    assert.ok(r.text.length > 0);
    await stopAndCheck(first);
    // the directory and its files are the user's alone
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
    for (const f of (await listDir(dir)).cache) assert.equal((await stat(path.join(dir, f))).mode & 0o777, 0o600);
  });
});
