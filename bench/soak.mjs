#!/usr/bin/env node
// Soak and chaos run of `tokenkv serve --cache-dir DIR` (issue 22):
// CLIENTS clients send mixed traffic (completions, chat, streams of both,
// cancelled streams and requests, three cache_salts and none) for DURATION
// seconds while the server is killed with SIGKILL and restarted on the same
// cache directory every RESTART seconds. It reports requests and errors by
// status (connection errors inside a restart are expected and counted
// apart), compares every greedy answer with a fresh server's answer to the
// same request, runs GET /v1/cache?check=1 after every restart and at the
// end, and samples the server's RSS. Exit status 1 on a wrong answer, a
// failed check, an unexpected error, or a server that died by itself.
//
// --state-cache MIB is the hybrid mode (a model with recurrent layers:
// qwen35, granitehybrid): the server gets that checkpoint budget (and
// --state-interval N when given), the traffic gains conversations (the next
// turn over the previous answer) and prompts cut from one long text at
// arbitrary points (divergences anywhere, so branch-point and interval
// checkpoints come and go), /metrics is sampled every second and any
// tokenkv_cache_checkpoint_bytes above tokenkv_cache_checkpoint_budget_bytes
// fails the run, and the fresh server runs with --no-prefix-cache.
//
//   node bench/soak.mjs [--duration 60] [--clients 64] [--restart 60] [--threads 1]
//                       [--bin build/tokenkv] [--model ../shared/models/stories260K.gguf]
//                       [--state-cache 0] [--state-interval 0] [--json FILE]
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const OpenAI = createRequire(path.join(ROOT, 'tests/e2e/package.json'))('openai');

function options() {
  const o = { duration: 60, clients: 64, restart: 60, threads: 1, bin: path.join(ROOT, 'build/tokenkv'),
              model: path.join(process.env.TKV_SHARED_DIR || path.join(ROOT, '../shared'), 'models/stories260K.gguf'),
              state_cache: 0, state_interval: 0, json: null };
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i += 2) {
    const k = a[i].replace(/^--/, '').replaceAll('-', '_');
    if (!(k in o) || a[i + 1] === undefined) {
      console.error(`soak: unknown option or missing value: ${a[i]}\n${readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(21, 24).join('\n')}`);
      process.exit(2);
    }
    o[k] = typeof o[k] === 'number' ? Number(a[i + 1]) : a[i + 1];
  }
  return o;
}

const O = options();
const KEY = 'soak-key';
const ADMIN = 'soak-admin';
const SALTS = [undefined, 'tenant-a', 'tenant-b', 'tenant-c'];
const PROMPTS = [
  'Once upon a time', 'The little dog', 'Lily and Ben went to the park', 'One day, a big bird',
  'Tom had a red ball.', 'The sun was hot and', 'Mom said to Sue', 'There was a tree with',
  'The cat saw a fish', 'A boy named Tim liked to', 'In the forest, there was', 'The girl was sad because',
];
const SYSTEM = 'You are a storyteller. Tell short, happy stories for small children.';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pick = (a) => a[Math.floor(Math.random() * a.length)];

async function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// ---- the server -----------------------------------------------------------------

function rssMB(pid) {
  try {
    return Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
  } catch {
    return null;
  }
}

async function startServer(port, extra) {
  const args = ['serve', '-m', O.model, '--host', '127.0.0.1', '--port', String(port), '-t', String(O.threads),
                '--api-key', KEY, '--admin-key', ADMIN,
                // the clients all come from 127.0.0.1, and a cancelled request's connection counts until the
                // server notices it closed: at 64 clients that passes the default per-client cap of 64
                '--max-connections-per-client', '0', ...extra];
  const child = spawn(O.bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const srv = { child, log: '', exit: null };
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { srv.log += d; });
  srv.exited = new Promise((r) => child.on('exit', (code, signal) => { srv.exit = { code, signal }; r(srv.exit); }));
  const end = Date.now() + 30000;
  while (Date.now() < end && !srv.exit) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(5000) })).status === 200) return srv;
    } catch { /* not yet */ }
    await sleep(50);
  }
  throw new Error(`the server did not start: ${JSON.stringify(srv.exit)}\n${srv.log}`);
}

async function cacheCheck(port) {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/v1/cache?check=1`,
                          { headers: { Authorization: `Bearer ${ADMIN}` }, signal: AbortSignal.timeout(60000) });
    const j = await r.json();
    return { status: r.status, check: j.check, nodes: j.nodes, used: j.cells?.used };
  } catch (e) {
    return { check: `request failed: ${e.cause?.code || e.cause?.message || e.message}` };
  }
}

// ---- the traffic ------------------------------------------------------------------

// The hybrid mode's long text, cut at one of CUTS word boundaries spread over it and given one of TAILS:
// prompts that share a prefix up to an arbitrary point and diverge there.
const STORY = PROMPTS.join(' ') + ' They played all day and then they went home to eat. ' +
  'The moon came up over the hill, and the little bird sang a song about the sea and the sky.';
const CUTS = (() => {
  const spaces = [...STORY.matchAll(/ /g)].map((m) => m.index);
  return Array.from({ length: 16 }, (_, i) => spaces[Math.floor(((i + 1) * (spaces.length - 1)) / 17)]);
})();
const TAILS = [' and then', ' but the dog', ' so Lily said', ' one more time'];
const FOLLOW_UPS = ['What happened next?', 'Tell it again, shorter.', 'Who was there?', 'Why?'];
const MODEL = 'stories260K';

// One greedy request, recorded under its body (the fresh server answers the same body).
async function greedy(client, chat, body, salt, stream, note) {
  const api = chat ? client.chat.completions : client.completions;
  const key = JSON.stringify({ chat, body });
  note.what = `${stream ? 'stream' : 'request'} ${JSON.stringify({ chat, salt, ...body }).slice(0, 300)}`;
  const req = { ...body, ...(salt ? { cache_salt: salt } : {}) };
  if (!stream) {
    const c = await api.create(req);
    return { key, text: chat ? c.choices[0].message.content : c.choices[0].text };
  }
  let text = '';
  for await (const c of await api.create({ ...req, stream: true }))
    text += (chat ? c.choices[0]?.delta?.content : c.choices[0]?.text) ?? '';
  return { key, text };
}

let nulStripped = 0;

// The hybrid mode's requests: a two-turn conversation (the second turn carries the first's answer), or a
// completion of the long text cut at an arbitrary point. A list of {kind, key, text}.
async function hybridRequest(client, salt, max_tokens, note) {
  const stream = Math.random() < 0.5;
  if (Math.random() < 0.5) {
    const msgs = [{ role: 'system', content: SYSTEM }, { role: 'user', content: pick(PROMPTS) }];
    const first = await greedy(client, true, { model: MODEL, messages: msgs, max_tokens, temperature: 0 }, salt, stream, note);
    // a random-weight model's answer may hold a NUL byte, which the server refuses in a request ("\u0000 is not
    // allowed"): the second turn carries the answer without it (counted; the server's refusal is a known gap)
    if (first.text.includes('\0')) nulStripped++;
    const answer = first.text.replaceAll('\0', '');
    const next = [...msgs, { role: 'assistant', content: answer }, { role: 'user', content: pick(FOLLOW_UPS) }];
    const second = await greedy(client, true, { model: MODEL, messages: next, max_tokens, temperature: 0 }, salt, stream, note);
    return [{ kind: 'turn-1', ...first }, { kind: 'turn-2', ...second }];
  }
  const prompt = STORY.slice(0, pick(CUTS)) + pick(TAILS);
  return [{ kind: 'cut', ...(await greedy(client, false, { model: MODEL, prompt, max_tokens, temperature: 0 }, salt, stream, note)) }];
}

// One request of a random kind; returns a list of {kind, key, text} for greedy answers ({key: null} for a
// cancelled one).
async function oneRequest(client, note) {
  const prompt = pick(PROMPTS);
  const salt = pick(SALTS);
  const max_tokens = 8 + Math.floor(Math.random() * 3) * 8;
  if (O.state_cache && Math.random() < 0.4) return hybridRequest(client, salt, max_tokens, note);
  const extra = salt ? { cache_salt: salt } : {};
  const r = Math.random();
  const chat = r < 0.5;
  const base = chat
    ? { model: MODEL, messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: prompt }],
        max_tokens, temperature: 0 }
    : { model: MODEL, prompt, max_tokens, temperature: 0 };
  const api = chat ? client.chat.completions : client.completions;
  const deltaOf = (c) => (chat ? c.choices[0]?.delta?.content : c.choices[0]?.text) ?? '';
  const mode = Math.random();
  const kind = chat ? 'chat' : 'completion';
  if (mode < 0.45) return [{ kind, ...(await greedy(client, chat, base, salt, false, note)) }];
  if (mode < 0.8) return [{ kind: `${kind}-stream`, ...(await greedy(client, chat, base, salt, true, note)) }];
  note.what = `cancel (${mode < 0.9 ? 'stream' : 'request'}) ${JSON.stringify({ chat, salt, prompt })}`;
  // cancellations: a stream left after a chunk or two, or a plain request left before its answer
  const ac = new AbortController();
  const long = { ...base, ...extra, max_tokens: 400, temperature: 0.8 };
  try {
    if (mode < 0.9) {
      let n = 0;
      for await (const c of await api.create({ ...long, stream: true }, { signal: ac.signal })) {
        if (deltaOf(c) && ++n === 2) {
          // and leave the loop: an abort after the whole answer arrived (a model that stops after a few
          // tokens) lets the SDK's iterator hand out the buffered events and then wait forever (openai
          // 6.49: 21 of 5563 such streams on qwen35; the server had sent its last event)
          ac.abort();
          break;
        }
      }
    } else {
      setTimeout(() => ac.abort(), 5 + Math.random() * 30);
      await api.create(long, { signal: ac.signal });
    }
  } catch (e) {
    if (!(e instanceof OpenAI.APIUserAbortError) && e.name !== 'AbortError') throw e;
  }
  return [{ kind: 'cancel', key: null, text: null }];
}

// The hybrid mode's checkpoint gauges from /metrics, or null.
async function checkpointGauges(port) {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/metrics`,
                          { headers: { Authorization: `Bearer ${ADMIN}` }, signal: AbortSignal.timeout(5000) });
    const text = await r.text();
    const g = {};
    for (const m of text.matchAll(/^tokenkv_cache_(checkpoints|checkpoint_bytes|checkpoint_budget_bytes|checkpoint_evictions_total|state_scratch_bytes) (\S+)$/gm))
      g[m[1]] = Number(m[2]);
    return 'checkpoint_budget_bytes' in g ? g : null;
  } catch {
    return null; /* inside a restart */
  }
}

async function main() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tkv-soak-'));
  const cacheDir = path.join(dir, 'cache');
  const port = await freePort();
  const t0 = Date.now();
  const stats = { requests: 0, ok: {}, errors: {}, restart_errors: 0, restarts: 0, checks: [], rss: [],
                  loaded: [], died: [], ckpt: [], over_budget: [] };
  const hybridArgs = O.state_cache ? ['--state-cache', String(O.state_cache),
                                      ...(O.state_interval ? ['--state-interval', String(O.state_interval)] : [])] : [];
  const answers = new Map(); // key -> Set of texts seen
  let restarting = false;
  let srv = await startServer(port, ['--cache-dir', cacheDir, '--save-interval', '10', ...hybridArgs]);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
  const end = t0 + O.duration * 1000;

  const sampler = setInterval(() => {
    const mb = srv && !srv.exit ? rssMB(srv.child.pid) : null;
    if (mb !== null) stats.rss.push([Math.round((Date.now() - t0) / 1000), Math.round(mb * 10) / 10, stats.restarts]);
    if (O.state_cache)
      checkpointGauges(port).then((g) => {
        if (!g) return;
        const at = Math.round((Date.now() - t0) / 1000);
        stats.ckpt.push([at, g]);
        if (g.checkpoint_bytes > g.checkpoint_budget_bytes) stats.over_budget.push([at, g]);
      });
  }, 1000);

  // what each client (and the chaos) is doing, so that a request that never ends is reported, not waited for
  const notes = [];
  const chaosNote = { what: 'idle', since: Date.now() };
  const HUNG_MS = 150000;

  async function clientLoop(i) {
    const note = (notes[i] = { what: 'idle', since: Date.now() });
    while (Date.now() < end) {
      const during = restarting;
      note.since = Date.now();
      try {
        let timer;
        const hung = new Promise((_, reject) => {
          timer = setTimeout(() => reject(Object.assign(new Error(`no answer in ${HUNG_MS / 1000} s: ${note.what}`),
                                                         { hung: true })), HUNG_MS);
        });
        const results = await Promise.race([oneRequest(client, note), hung]).finally(() => clearTimeout(timer));
        note.what = 'idle';
        for (const r of results) {
          stats.requests++;
          stats.ok[r.kind] = (stats.ok[r.kind] || 0) + 1;
          if (r.key) {
            if (!answers.has(r.key)) answers.set(r.key, new Set());
            answers.get(r.key).add(r.text);
          }
        }
      } catch (e) {
        stats.requests++;
        if (during || restarting) {
          stats.restart_errors++; // the server was killed under it
          await sleep(100);
        } else {
          const k = e.hung ? e.message
                  : e.status ? `${e.status} ${String(e.error?.message ?? e.message).slice(0, 100)}` : `connection: ${e.cause?.code || e.message}`;
          stats.errors[k] = (stats.errors[k] || 0) + 1;
          if (!e.status) await sleep(100);
        }
      }
    }
  }

  async function chaos() {
    while (Date.now() + O.restart * 1000 < end) {
      chaosNote.what = 'sleeping', chaosNote.since = Date.now();
      await sleep(O.restart * 1000);
      chaosNote.what = 'restarting', chaosNote.since = Date.now();
      if (srv.exit) stats.died.push({ at: Date.now() - t0, ...srv.exit, log: srv.log.slice(-2000) });
      restarting = true;
      srv.child.kill('SIGKILL');
      await srv.exited;
      srv = await startServer(port, ['--cache-dir', cacheDir, '--save-interval', '10', ...hybridArgs]);
      stats.restarts++;
      const m = /cache: loaded (\d+) files \((\d+) tokens\)/.exec(srv.log);
      stats.loaded.push(m ? { files: Number(m[1]), tokens: Number(m[2]) } : { files: 0, note: srv.log.split('\n').find((l) => /cache:/.test(l)) });
      await sleep(500); // requests in flight at the kill fail inside this window
      restarting = false;
      chaosNote.what = 'checking the cache', chaosNote.since = Date.now();
      stats.checks.push({ at: Math.round((Date.now() - t0) / 1000), ...(await cacheCheck(port)) });
    }
    chaosNote.what = 'done';
  }

  // the run ends when every client and the chaos are done; whatever is still going HUNG_MS after the end is
  // reported as hung (and the run fails)
  let lateTimer;
  const late = new Promise((r) => { lateTimer = setTimeout(() => r('late'), end - Date.now() + HUNG_MS + 30000); });
  const finished = await Promise.race([Promise.all([chaos(), ...Array.from({ length: O.clients }, (_, i) => clientLoop(i))]), late]);
  clearTimeout(lateTimer);
  if (finished === 'late') {
    for (const [i, n] of notes.entries())
      if (n.what !== 'idle') stats.errors[`hung client ${i} (${Math.round((Date.now() - n.since) / 1000)} s): ${n.what}`] = 1;
    if (chaosNote.what !== 'done') stats.errors[`hung chaos (${Math.round((Date.now() - chaosNote.since) / 1000)} s): ${chaosNote.what}`] = 1;
  }
  clearInterval(sampler);
  stats.checks.push({ at: Math.round((Date.now() - t0) / 1000), final: true, ...(await cacheCheck(port)) });
  if (srv.exit) stats.died.push({ at: Date.now() - t0, ...srv.exit, log: srv.log.slice(-2000) });
  srv.child.kill('SIGTERM');
  const last = await srv.exited;
  if (last.signal || last.code !== 0) stats.died.push({ at: 'shutdown', ...last, log: srv.log.slice(-2000) });

  // a fresh server, no cache directory (and for a hybrid no prefix cache at all): the answer every greedy
  // request must have had
  const fport = await freePort();
  const fresh = await startServer(fport, O.state_cache ? ['--no-prefix-cache'] : []);
  const fclient = new OpenAI({ baseURL: `http://127.0.0.1:${fport}/v1`, apiKey: KEY, maxRetries: 2 });
  let compared = 0;
  const mismatches = [];
  for (const [key, texts] of answers) {
    const { chat, body } = JSON.parse(key);
    const want = chat ? (await fclient.chat.completions.create(body)).choices[0].message.content
                      : (await fclient.completions.create(body)).choices[0].text;
    compared++;
    for (const t of texts) if (t !== want) mismatches.push({ chat, body, got: t, want });
  }
  fresh.child.kill('SIGTERM');
  await fresh.exited;
  rmSync(dir, { recursive: true, force: true });

  const rss = stats.rss.map((x) => x[1]);
  const report = {
    date: new Date().toISOString(), host: os.hostname(), cpus: os.cpus().length, options: O,
    seconds: Math.round((Date.now() - t0) / 1000), requests: stats.requests, ok: stats.ok, errors: stats.errors,
    connection_errors_in_restarts: stats.restart_errors, restarts: stats.restarts, loaded: stats.loaded,
    greedy_compared: compared, greedy_answers: [...answers.values()].reduce((n, s) => n + s.size, 0),
    mismatches: mismatches.slice(0, 10), n_mismatches: mismatches.length, checks: stats.checks,
    rss_mb: { min: Math.min(...rss), max: Math.max(...rss), samples: stats.rss.filter((_, i) => i % 5 === 0),
              // the peak of each server's life (a restart starts a new process): flat when nothing grows
              per_life_max: stats.rss.reduce((a, [, mb, life]) => ((a[life] = Math.max(a[life] ?? 0, mb)), a), []) },
    died: stats.died,
  };
  if (O.state_cache) {
    const c = stats.ckpt.map((x) => x[1]);
    report.checkpoints = {
      samples: c.length, over_budget: stats.over_budget.slice(0, 10), n_over_budget: stats.over_budget.length,
      budget_bytes: c.length ? Math.max(...c.map((g) => g.checkpoint_budget_bytes)) : null,
      max_bytes: c.length ? Math.max(...c.map((g) => g.checkpoint_bytes)) : null,
      max_held: c.length ? Math.max(...c.map((g) => g.checkpoints)) : null,
      max_scratch_bytes: c.length ? Math.max(...c.map((g) => g.state_scratch_bytes)) : null,
      evictions: c.reduce((n, g, i) => n + (i + 1 === c.length || c[i + 1].checkpoint_evictions_total < g.checkpoint_evictions_total
                                             ? g.checkpoint_evictions_total : 0), 0), // summed over the server's lives
      nul_stripped: nulStripped,
      over_time: stats.ckpt.filter((_, i) => i % 30 === 0).map(([at, g]) => [at, g.checkpoints, g.checkpoint_bytes]),
    };
  }
  if (O.json) writeFileSync(O.json, JSON.stringify(report, null, 1));
  const okN = Object.values(stats.ok).reduce((a, b) => a + b, 0);
  console.log(`soak: ${report.seconds} s, ${O.clients} clients, ${stats.restarts} SIGKILL restarts`);
  console.log(`  requests ${stats.requests}: ok ${okN} ${JSON.stringify(stats.ok)}`);
  console.log(`  errors ${JSON.stringify(stats.errors)}; connection errors inside restarts ${stats.restart_errors}`);
  console.log(`  loaded after restarts: ${stats.loaded.map((l) => `${l.files} files/${l.tokens ?? 0} tokens`).join(', ') || '-'}`);
  console.log(`  greedy: ${compared} distinct requests compared with a fresh server, ${mismatches.length} mismatches`);
  console.log(`  cache checks: ${stats.checks.map((c) => c.check).join(', ')}`);
  console.log(`  RSS MB: min ${report.rss_mb.min}, max ${report.rss_mb.max}; over time ${report.rss_mb.samples.map((s) => `${s[0]}s:${s[1]}`).join(' ')}`);
  console.log(`  RSS MB, each server's peak: ${report.rss_mb.per_life_max.join(' ')}`);
  if (report.checkpoints) {
    const k = report.checkpoints;
    console.log(`  checkpoints: ${k.samples} samples, held max ${k.max_held}, bytes max ${k.max_bytes} of a budget of ` +
                `${k.budget_bytes} (${k.n_over_budget} samples over it), scratch max ${k.max_scratch_bytes}, ` +
                `${k.evictions} evicted; ${nulStripped} second turns sent without a NUL of the first answer`);
  }
  for (const d of stats.died) console.log(`  SERVER DIED: ${JSON.stringify(d)}`);
  for (const m of mismatches.slice(0, 3)) console.log(`  MISMATCH: ${JSON.stringify(m)}`);
  const bad = mismatches.length || Object.keys(stats.errors).length || stats.died.length || stats.over_budget.length ||
              (O.state_cache && !stats.ckpt.length) ||
              stats.checks.some((c) => c.check !== 'ok') || okN === 0;
  process.exit(bad ? 1 : 0);
}

main().catch((e) => {
  console.error(`soak: ${e.stack || e}`);
  process.exit(1);
});
