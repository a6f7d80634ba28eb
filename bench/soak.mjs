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
//   node bench/soak.mjs [--duration 60] [--clients 64] [--restart 60] [--threads 1]
//                       [--bin build/tokenkv] [--model ../shared/models/stories260K.gguf]
//                       [--json FILE]
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
              json: null };
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i += 2) {
    const k = a[i].replace(/^--/, '');
    if (!(k in o) || a[i + 1] === undefined) {
      console.error(`soak: unknown option or missing value: ${a[i]}\n${readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(13, 16).join('\n')}`);
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
      if ((await fetch(`http://127.0.0.1:${port}/health`)).status === 200) return srv;
    } catch { /* not yet */ }
    await sleep(50);
  }
  throw new Error(`the server did not start: ${JSON.stringify(srv.exit)}\n${srv.log}`);
}

async function cacheCheck(port) {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/v1/cache?check=1`, { headers: { Authorization: `Bearer ${ADMIN}` } });
    const j = await r.json();
    return { status: r.status, check: j.check, nodes: j.nodes, used: j.cells?.used };
  } catch (e) {
    return { check: `request failed: ${e.cause?.code || e.cause?.message || e.message}` };
  }
}

// ---- the traffic ------------------------------------------------------------------

// One request of a random kind; returns {kind, key, text} for a greedy answer, or null.
async function oneRequest(client) {
  const prompt = pick(PROMPTS);
  const salt = pick(SALTS);
  const max_tokens = 8 + Math.floor(Math.random() * 3) * 8;
  const extra = salt ? { cache_salt: salt } : {};
  const r = Math.random();
  const chat = r < 0.5;
  const base = chat
    ? { model: 'stories260K', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: prompt }],
        max_tokens, temperature: 0, ...extra }
    : { model: 'stories260K', prompt, max_tokens, temperature: 0, ...extra };
  const api = chat ? client.chat.completions : client.completions;
  const key = JSON.stringify([chat, prompt, max_tokens]);
  const textOf = (c) => (chat ? c.choices[0].message.content : c.choices[0].text);
  const deltaOf = (c) => (chat ? c.choices[0]?.delta?.content : c.choices[0]?.text) ?? '';
  const mode = Math.random();
  if (mode < 0.45) return { kind: chat ? 'chat' : 'completion', key, text: textOf(await api.create(base)) };
  if (mode < 0.8) {
    let text = '';
    for await (const c of await api.create({ ...base, stream: true })) text += deltaOf(c);
    return { kind: chat ? 'chat-stream' : 'completion-stream', key, text };
  }
  // cancellations: a stream left after a chunk or two, or a plain request left before its answer
  const ac = new AbortController();
  const long = { ...base, max_tokens: 400, temperature: 0.8 };
  try {
    if (mode < 0.9) {
      let n = 0;
      for await (const c of await api.create({ ...long, stream: true }, { signal: ac.signal })) {
        if (deltaOf(c) && ++n === 2) ac.abort();
      }
    } else {
      setTimeout(() => ac.abort(), 5 + Math.random() * 30);
      await api.create(long, { signal: ac.signal });
    }
  } catch (e) {
    if (!(e instanceof OpenAI.APIUserAbortError) && e.name !== 'AbortError') throw e;
  }
  return { kind: 'cancel', key: null, text: null };
}

async function main() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tkv-soak-'));
  const cacheDir = path.join(dir, 'cache');
  const port = await freePort();
  const t0 = Date.now();
  const stats = { requests: 0, ok: {}, errors: {}, restart_errors: 0, restarts: 0, checks: [], rss: [],
                  loaded: [], died: [] };
  const answers = new Map(); // key -> Set of texts seen
  let restarting = false;
  let srv = await startServer(port, ['--cache-dir', cacheDir, '--save-interval', '10']);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
  const end = t0 + O.duration * 1000;

  const sampler = setInterval(() => {
    const mb = srv && !srv.exit ? rssMB(srv.child.pid) : null;
    if (mb !== null) stats.rss.push([Math.round((Date.now() - t0) / 1000), Math.round(mb * 10) / 10]);
  }, 1000);

  async function clientLoop() {
    while (Date.now() < end) {
      const during = restarting;
      try {
        const r = await oneRequest(client);
        stats.requests++;
        stats.ok[r.kind] = (stats.ok[r.kind] || 0) + 1;
        if (r.key) {
          if (!answers.has(r.key)) answers.set(r.key, new Set());
          answers.get(r.key).add(r.text);
        }
      } catch (e) {
        stats.requests++;
        if (during || restarting) {
          stats.restart_errors++; // the server was killed under it
          await sleep(100);
        } else {
          const k = e.status ? String(e.status) : `connection: ${e.cause?.code || e.message}`;
          stats.errors[k] = (stats.errors[k] || 0) + 1;
          if (!e.status) await sleep(100);
        }
      }
    }
  }

  async function chaos() {
    while (Date.now() + O.restart * 1000 < end) {
      await sleep(O.restart * 1000);
      if (srv.exit) stats.died.push({ at: Date.now() - t0, ...srv.exit, log: srv.log.slice(-2000) });
      restarting = true;
      srv.child.kill('SIGKILL');
      await srv.exited;
      srv = await startServer(port, ['--cache-dir', cacheDir, '--save-interval', '10']);
      stats.restarts++;
      const m = /cache: loaded (\d+) files \((\d+) tokens\)/.exec(srv.log);
      stats.loaded.push(m ? { files: Number(m[1]), tokens: Number(m[2]) } : { files: 0, note: srv.log.split('\n').find((l) => /cache:/.test(l)) });
      await sleep(500); // requests in flight at the kill fail inside this window
      restarting = false;
      stats.checks.push({ at: Math.round((Date.now() - t0) / 1000), ...(await cacheCheck(port)) });
    }
  }

  await Promise.all([chaos(), ...Array.from({ length: O.clients }, clientLoop)]);
  clearInterval(sampler);
  stats.checks.push({ at: Math.round((Date.now() - t0) / 1000), final: true, ...(await cacheCheck(port)) });
  if (srv.exit) stats.died.push({ at: Date.now() - t0, ...srv.exit, log: srv.log.slice(-2000) });
  srv.child.kill('SIGTERM');
  const last = await srv.exited;
  if (last.signal || last.code !== 0) stats.died.push({ at: 'shutdown', ...last, log: srv.log.slice(-2000) });

  // a fresh server, no cache directory: the answer every greedy request must have had
  const fport = await freePort();
  const fresh = await startServer(fport, []);
  const fclient = new OpenAI({ baseURL: `http://127.0.0.1:${fport}/v1`, apiKey: KEY, maxRetries: 2 });
  let compared = 0;
  const mismatches = [];
  for (const [key, texts] of answers) {
    const [chat, prompt, max_tokens] = JSON.parse(key);
    const want = chat
      ? (await fclient.chat.completions.create({ model: 'stories260K', max_tokens, temperature: 0,
          messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: prompt }] })).choices[0].message.content
      : (await fclient.completions.create({ model: 'stories260K', prompt, max_tokens, temperature: 0 })).choices[0].text;
    compared++;
    for (const t of texts) if (t !== want) mismatches.push({ chat, prompt, max_tokens, got: t, want });
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
    rss_mb: { min: Math.min(...rss), max: Math.max(...rss), samples: stats.rss.filter((_, i) => i % 5 === 0) },
    died: stats.died,
  };
  if (O.json) writeFileSync(O.json, JSON.stringify(report, null, 1));
  const okN = Object.values(stats.ok).reduce((a, b) => a + b, 0);
  console.log(`soak: ${report.seconds} s, ${O.clients} clients, ${stats.restarts} SIGKILL restarts`);
  console.log(`  requests ${stats.requests}: ok ${okN} ${JSON.stringify(stats.ok)}`);
  console.log(`  errors ${JSON.stringify(stats.errors)}; connection errors inside restarts ${stats.restart_errors}`);
  console.log(`  loaded after restarts: ${stats.loaded.map((l) => `${l.files} files/${l.tokens ?? 0} tokens`).join(', ') || '-'}`);
  console.log(`  greedy: ${compared} distinct requests compared with a fresh server, ${mismatches.length} mismatches`);
  console.log(`  cache checks: ${stats.checks.map((c) => c.check).join(', ')}`);
  console.log(`  RSS MB: min ${report.rss_mb.min}, max ${report.rss_mb.max}; over time ${report.rss_mb.samples.map((s) => `${s[0]}s:${s[1]}`).join(' ')}`);
  for (const d of stats.died) console.log(`  SERVER DIED: ${JSON.stringify(d)}`);
  for (const m of mismatches.slice(0, 3)) console.log(`  MISMATCH: ${JSON.stringify(m)}`);
  const bad = mismatches.length || Object.keys(stats.errors).length || stats.died.length ||
              stats.checks.some((c) => c.check !== 'ok') || okN === 0;
  process.exit(bad ? 1 : 0);
}

main().catch((e) => {
  console.error(`soak: ${e.stack || e}`);
  process.exit(1);
});
