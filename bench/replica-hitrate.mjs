// replica-hitrate.mjs — cache hit rate of a multi-user chat workload on one
// replica and on three behind HAProxy, with round-robin or prefix-affinity
// routing, with and without the shared Redis store (issue 24, item 6).
//
//   node bench/replica-hitrate.mjs -m MODEL [--users 24] [--turns 6] [--max-tokens 32]
//        [--concurrency 4] [--port 18400] [--only NAME] [-- SERVE_OPTIONS...]
//
// Each setup is started with scripts/cluster (TKV_BIN, default build/tokenkv)
// and stopped after its run. The workload is the same for all: `users`
// conversations that share one system prompt, each `turns` turns long (a
// turn's prompt is the system prompt, the conversation so far and a new
// question; greedy, so every setup sees the same texts); the turns go round
// by round (turn 1 of every user, then turn 2, ...), the users in a new
// (seeded, the same for every setup) order each round, so that round robin
// does not happen to send a user to the same replica every time,
// `concurrency` requests at a time. Affinity: each request carries prompt_cache_key = the user's
// id; round robin: it carries none (HAProxy then balances round robin).
// Hit rate = sum of usage.prompt_tokens_details.cached_tokens / sum of
// usage.prompt_tokens over every request.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const dd = argv.indexOf('--');
const serveOpts = dd >= 0 ? argv.slice(dd + 1) : [];
const own = dd >= 0 ? argv.slice(0, dd) : argv;
const opt = (name, dflt) => { const i = own.indexOf(name); return i >= 0 ? own[i + 1] : dflt; };
const model = opt('-m', '/tmp/m/bench-125m-Q4_K_M.gguf');
const nUsers = Number(opt('--users', '24'));
const nTurns = Number(opt('--turns', '6'));
const maxTokens = Number(opt('--max-tokens', '32'));
const concurrency = Number(opt('--concurrency', '4'));
const basePort = Number(opt('--port', '18400'));
const only = opt('--only', null);

const SETUPS = [
  { name: '1 replica', replicas: 1, store: false, affinity: false },
  { name: '3 replicas, round robin', replicas: 3, store: false, affinity: false },
  { name: '3 replicas, round robin + store', replicas: 3, store: true, affinity: false },
  { name: '3 replicas, affinity', replicas: 3, store: false, affinity: true },
  { name: '3 replicas, affinity + store', replicas: 3, store: true, affinity: true },
];

const SYSTEM = 'You are a kind storyteller for small children. Your stories are short and happy. ' +
  'They have a little girl or a little boy in them, a friend, and a dog or a cat. ' +
  'Something small goes wrong, and the friends fix it together. ' +
  'At the end everyone is happy and they learn to share, to be kind, and to say sorry. ' +
  'Use easy words. Do not use scary things. Keep every sentence short.\n';
const TOPICS = ['a red ball', 'a big tree', 'the sun', 'a small boat', 'a lost kite', 'a birthday cake',
                'a rainy day', 'a new friend'];
const FOLLOW = ['What did the cat do next?', 'Where did they go after that?', 'Why was the boy sad?',
                'How did the dog help?', 'What did mom say?', 'Who found the toy?', 'What did they eat?'];

async function turn(url, user, history, question, affinity) {
  const prompt = `${SYSTEM}${history}User: ${question}\nStory:`;
  const body = { prompt, max_tokens: maxTokens, temperature: 0 };
  if (affinity) body.prompt_cache_key = `user-${user}`;
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`user ${user}: HTTP ${r.status}: ${text}`);
  // every replica scripts/cluster starts names itself: a response without the header came from something
  // else (a replica that could not bind its port, and another process on it)
  if (!r.headers.get('x-tokenkv-replica')) throw new Error(`user ${user}: a response without X-Tokenkv-Replica`);
  const j = JSON.parse(text);
  return { text: j.choices[0].text, prompt: j.usage.prompt_tokens,
           cached: j.usage.prompt_tokens_details?.cached_tokens ?? 0, replica: r.headers.get('x-tokenkv-replica') };
}

// xorshift32: the users' order of each round
function rng(seed) {
  let x = seed >>> 0 || 1;
  return () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x / 2 ** 32; };
}

async function workload(url, affinity) {
  const history = Array(nUsers).fill('');
  const rand = rng(24);
  let prompt = 0, cached = 0;
  const perReplica = {};
  const usersOn = {}; // replica -> set of users it served
  for (let t = 0; t < nTurns; t++) {
    const order = Array.from({ length: nUsers }, (_, u) => u);
    for (let i = nUsers - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    let next = 0;
    const worker = async () => {
      for (let k; (k = next++) < nUsers;) {
        const u = order[k];
        const q = t === 0 ? `Tell me a story about ${TOPICS[u % TOPICS.length]} (story ${u}).`
                          : FOLLOW[(u + t) % FOLLOW.length];
        const r = await turn(url, u, history[u], q, affinity);
        history[u] += `User: ${q}\nStory:${r.text}\n`;
        prompt += r.prompt;
        cached += r.cached;
        perReplica[r.replica] = (perReplica[r.replica] ?? 0) + 1;
        (usersOn[r.replica] ??= new Set()).add(u);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
  }
  const spread = Object.fromEntries(Object.entries(usersOn).map(([k, v]) => [k, v.size]));
  return { prompt, cached, rate: cached / prompt, requests: perReplica, users_seen: spread };
}

const results = [];
for (const [i, s] of SETUPS.entries()) {
  if (only && s.name !== only) continue;
  const port = basePort + 10 * i;
  const dir = mkdtempSync(path.join(tmpdir(), 'tkv-hitrate-'));
  const env = { ...process.env, TKV_CLUSTER_DIR: dir };
  const cluster = (...a) => execFileSync(path.join(root, 'scripts/cluster'), a, { env, stdio: ['ignore', 'ignore', 'inherit'] });
  cluster('start', '--replicas', String(s.replicas), '--port', String(port), '-m', model,
          ...(s.store ? [] : ['--no-store']), '--', ...serveOpts);
  const t0 = performance.now();
  try {
    const r = await workload(`http://127.0.0.1:${port}`, s.affinity);
    results.push({ setup: s.name, ...r, seconds: +((performance.now() - t0) / 1e3).toFixed(1) });
    console.error(JSON.stringify(results.at(-1)));
  } finally {
    cluster('stop');
    rmSync(dir, { recursive: true, force: true });
  }
}

const single = results.find((r) => r.setup === '1 replica');
console.log('| setup | prompt tokens | cached tokens | hit rate | of 1 replica | requests per replica |');
console.log('| --- | --- | --- | --- | --- | --- |');
for (const r of results) {
  const rel = single ? `${(100 * r.rate / single.rate).toFixed(1)}%` : '-';
  const per = Object.entries(r.requests).sort().map(([k, v]) => `${k} ${v}`).join(', ');
  console.log(`| ${r.setup} | ${r.prompt} | ${r.cached} | ${(100 * r.rate).toFixed(1)}% | ${rel} | ${per} |`);
}
