// Time to first token on a replica that loads a shared prefix from the Redis
// store (--kv-store) versus one that computes it:
//   node bench/store-ttft.mjs -m MODEL [--prefix-tokens 1500] [--runs 5] [--threads 2]
// Starts redis-server and three `tokenkv serve` on loopback: W (writes each
// prefix to the store by computing it), S (store: loads it) and C (no store:
// computes it). Each run uses a new prefix; S and C get the same request
// (prefix + a question), 1 completion token, non-streamed: its latency is the
// TTFT. Prints the medians and their ratio. Needs build/tokenkv and redis-server.
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const MODEL = arg('-m');
const PREFIX = Number(arg('--prefix-tokens', 1500));
const RUNS = Number(arg('--runs', 5));
const THREADS = arg('--threads', '2');
const BIN = process.env.TKV_BIN || path.join(ROOT, 'build', 'tokenkv');
if (!MODEL) {
  console.error('usage: node bench/store-ttft.mjs -m MODEL [--prefix-tokens 1500] [--runs 5] [--threads 2]');
  process.exit(2);
}

const procs = [];
process.on('exit', () => procs.forEach((p) => p.kill('SIGKILL')));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const freePort = () => new Promise((res) => {
  const s = net.createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
});

async function serve(args) {
  const port = await freePort();
  const p = spawn(BIN, ['serve', '-m', MODEL, '--port', String(port), '-t', THREADS, '-c', '8192', '-np', '1', ...args],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  p.stderr.on('data', (d) => { log += d; });
  procs.push(p);
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try { if ((await fetch(`${url}/health`)).status === 200) break; } catch { /* not yet */ }
    if (i > 600) throw new Error(`server did not start:\n${log}`);
    await sleep(100);
  }
  return url;
}

async function complete(url, prompt) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0 }),
  });
  const j = await r.json();
  if (r.status !== 200) throw new Error(JSON.stringify(j));
  return { ms: performance.now() - t0, cached: j.usage.prompt_tokens_details.cached_tokens, n: j.usage.prompt_tokens };
}

async function metric(url, name) {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(await (await fetch(`${url}/metrics`)).text());
  return m ? Number(m[1]) : 0;
}

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

const rport = await freePort();
procs.push(spawn('redis-server', ['--bind', '127.0.0.1', '--port', String(rport), '--save', '', '--appendonly', 'no',
  '--maxmemory', '4gb', '--maxmemory-policy', 'allkeys-lru'], { stdio: 'ignore' }));
await sleep(300);
const store = ['--kv-store', `redis://127.0.0.1:${rport}`];
const W = await serve(store), S = await serve(store), C = await serve([]);

// a text of about PREFIX tokens for this model, different for each run
async function prefixText(run) {
  let words = [];
  for (let i = 0; ; i++) {
    words.push(`story${run} part ${i} of the shared document says hello.`);
    if (i % 20 === 19) {
      const r = await fetch(`${W}/tokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ content: words.join(' ') }) });
      if ((await r.json()).tokens.length >= PREFIX) break;
    }
  }
  // trim to PREFIX tokens exactly, through the tokenizer
  const r = await fetch(`${W}/tokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ content: words.join(' ') }) });
  const toks = (await r.json()).tokens.slice(0, PREFIX);
  const d = await fetch(`${W}/detokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ tokens: toks.slice(1) }) });
  return (await d.json()).content;
}

const fromStore = [], recompute = [];
for (let run = 0; run < RUNS; run++) {
  const prefix = await prefixText(run);
  const writes = await metric(W, 'tokenkv_store_writes_total');
  const w = await complete(W, `${prefix} First question?`);
  const blocks = Math.floor(w.n / 64);
  for (let i = 0; (await metric(W, 'tokenkv_store_writes_total')) < writes + blocks; i++) {
    if (i > 300) throw new Error('the writes did not finish');
    await sleep(20);
  }
  const q = `${prefix} Second question?`;
  const s = await complete(S, q), c = await complete(C, q);
  fromStore.push(s.ms);
  recompute.push(c.ms);
  console.log(`run ${run}: prompt ${s.n} tokens; store: ${s.ms.toFixed(1)} ms (cached ${s.cached}); `
    + `recompute: ${c.ms.toFixed(1)} ms (cached ${c.cached})`);
}
const bytes = await metric(S, 'tokenkv_store_read_bytes_total');
const counts = {};
for (const k of ['hits', 'misses', 'timeouts', 'errors', 'rejected'])
  counts[k] = await metric(S, `tokenkv_store_${k}_total`);
console.log(`store replica: ${JSON.stringify(counts)}`);
console.log(`median TTFT: store ${median(fromStore).toFixed(1)} ms, recompute ${median(recompute).toFixed(1)} ms, `
  + `ratio ${(median(fromStore) / median(recompute)).toFixed(3)}; ${(bytes / RUNS / 1048576).toFixed(1)} MiB read per request`);
process.exit(0);
