// Two replicas sharing a Redis prefix store, behind HAProxy configured by
// deploy/haproxy.cfg, all on loopback:
// - a prefix computed on replica A is loaded from the store by replica B
//   (cached_tokens covers it, the text equals a fresh computation's), and a
//   value corrupted in Redis is refused, not used;
// - HAProxy keeps a prompt_cache_key on one replica (X-Tokenkv-Replica);
// - replica A killed with SIGKILL under traffic: new requests succeed on B;
//   A restarts on its port and serves again;
// - Redis stopped: requests still succeed, store hits stop, no request fails.
// Skipped with a message when redis-server or haproxy is not installed
// (scripts/install-deps installs both).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { get, post, startServer, stopAndCheck, tail, waitFor } from '../lib/server.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function have(cmd) {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
const missing = ['redis-server', 'haproxy'].filter((c) => !have(c));
const skip = missing.length ? `${missing.join(' and ')} not installed (scripts/install-deps installs them)` : false;

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// a process of ours (redis-server, haproxy), killed when the test ends
function daemon(cmd, args, logFile) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.on('data', (d) => { log += d; });
  child.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((r) => child.on('exit', r));
  const onExit = () => child.kill('SIGKILL');
  process.once('exit', onExit);
  return {
    child,
    log: () => log,
    async stop(sig = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(sig);
      await exited;
      process.removeListener('exit', onExit);
      if (logFile) writeFileSync(logFile, log);
    },
  };
}

function tcpUp(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => { s.end(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

// A Prometheus counter of a server's /metrics (0 when absent).
async function metric(server, name) {
  const r = await get(server, '/metrics');
  const m = new RegExp(`^${name.replace(/[{}"]/g, '\\$&')} (\\S+)$`, 'm').exec(r.body);
  return m ? Number(m[1]) : 0;
}

// ~330 tokens on stories260K: five full 64-token blocks
const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park '
  + 'with her friends. One day, she saw a big red ball under a tall green tree. She ran to the tree, '
  + 'picked up the ball and threw it to her friend Tom. Tom laughed and kicked the ball back to her. ';
const PROMPT = STORY.repeat(3) + 'Then the sun went down and';

describe('replicas sharing a Redis store behind HAProxy', { skip }, () => {
  let dir, redis, redisPort, lb, lbPort, A, B;
  const replicaArgs = (id) => ['--kv-store', `redis://127.0.0.1:${redisPort}`, '--replica-id', id, '-np', '2'];
  const startRedis = async () => {
    redis = daemon('redis-server', ['--bind', '127.0.0.1', '--port', String(redisPort), '--save', '', '--appendonly',
      'no', '--maxmemory', '256mb', '--maxmemory-policy', 'allkeys-lru', '--dir', dir], path.join(dir, 'redis.log'));
    await waitFor(() => tcpUp(redisPort), 'redis-server listening');
  };
  const redisCli = (...args) => execFileSync('redis-cli', ['-p', String(redisPort), ...args], { encoding: 'utf8' });
  // a completion through the balancer: {status, replica, json}
  const viaLb = async (body) => {
    const r = await post({ url: `http://127.0.0.1:${lbPort}` }, '/v1/completions', body);
    return { status: r.status, replica: r.headers.get('x-tokenkv-replica'), json: r.json, body: r.body };
  };

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'tkv-cluster-'));
    redisPort = await freePort();
    await startRedis();
    A = await startServer(replicaArgs('A'));
    B = await startServer(replicaArgs('B'));
    lbPort = await freePort();
    const cfg = readFileSync(path.join(ROOT, 'deploy', 'haproxy.cfg'), 'utf8').split('\n');
    const out = [];
    for (const line of cfg) {
      if (/# CLUSTER/.test(line) && /^\s*bind /.test(line)) out.push(`    bind 127.0.0.1:${lbPort}`);
      else if (/# CLUSTER/.test(line) && /^\s*server /.test(line)) {
        if (!out.some((l) => /server A /.test(l)))
          out.push(`    server A 127.0.0.1:${A.port}`, `    server B 127.0.0.1:${B.port}`);
      } else out.push(line);
    }
    writeFileSync(path.join(dir, 'haproxy.cfg'), out.join('\n'));
    lb = daemon('haproxy', ['-W', '-db', '-f', path.join(dir, 'haproxy.cfg')], path.join(dir, 'haproxy.log'));
    await waitFor(async () => (await fetch(`http://127.0.0.1:${lbPort}/health`)).status === 200, 'haproxy up', 15000);
  });

  after(async () => {
    await lb?.stop();
    if (A) await stopAndCheck(A);
    if (B) await stopAndCheck(B);
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a prefix computed on A is loaded from the store by B, with the same text', async () => {
    const body = { model: 'm', prompt: PROMPT, max_tokens: 16, temperature: 0 };
    const a = await post(A, '/v1/completions', body);
    assert.equal(a.status, 200, a.body);
    assert.equal(a.json.usage.prompt_tokens_details.cached_tokens, 0);
    const n = a.json.usage.prompt_tokens;
    const blocks = Math.floor((n - 1) / 64);
    assert.ok(blocks >= 4, `the prompt is ${n} tokens`);
    // the writes are in the background
    await waitFor(async () => (await metric(A, 'tokenkv_store_writes_total')) >= Math.floor(n / 64), 'A wrote its blocks');
    const b = await post(B, '/v1/completions', body);
    assert.equal(b.status, 200, b.body);
    assert.ok(b.json.usage.prompt_tokens_details.cached_tokens >= blocks * 64,
      `B reused ${b.json.usage.prompt_tokens_details.cached_tokens} tokens of ${n}\n${tail(B.log())}`);
    assert.equal(b.json.choices[0].text, a.json.choices[0].text);
    assert.equal(await metric(B, 'tokenkv_store_hits_total'), 1);
    assert.equal(await metric(B, 'tokenkv_store_hit_tokens_total'), blocks * 64);
  });

  it('a value corrupted in Redis is refused: the prefix is computed, the text is the same', async () => {
    const prompt = 'A different beginning. ' + STORY.repeat(2) + 'The end of the day came and';
    const body = { model: 'm', prompt, max_tokens: 16, temperature: 0 };
    const keysBefore = new Set(redisCli('--scan', '--pattern', 'tkv:*').split('\n').filter(Boolean));
    const a = await post(A, '/v1/completions', body);
    assert.equal(a.status, 200, a.body);
    const n = a.json.usage.prompt_tokens;
    await waitFor(async () => {
      const keys = redisCli('--scan', '--pattern', 'tkv:*').split('\n').filter(Boolean);
      return keys.length >= keysBefore.size + Math.floor(n / 64) - Math.floor(a.json.usage.prompt_tokens_details.cached_tokens / 64);
    }, 'A wrote the new blocks');
    // flip a byte of the K/V in every value this prompt added (its new blocks)
    const fresh = redisCli('--scan', '--pattern', 'tkv:*').split('\n').filter((k) => k && !keysBefore.has(k));
    assert.ok(fresh.length >= 1);
    for (const k of fresh) redisCli('SETRANGE', k, '3000', 'X');
    const rejected = await metric(B, 'tokenkv_store_rejected_total');
    const b = await post(B, '/v1/completions', body);
    assert.equal(b.status, 200, b.body);
    assert.equal(b.json.choices[0].text, a.json.choices[0].text);
    assert.ok(await metric(B, 'tokenkv_store_rejected_total') > rejected, 'the corrupt value was counted');
  });

  it('HAProxy keeps a prompt_cache_key on one replica', async () => {
    for (const key of ['user-1', 'user-2', 'user-3']) {
      const seen = new Set();
      for (let i = 0; i < 4; i++) {
        const r = await viaLb({ model: 'm', prompt: `Hello ${key} ${i}`, max_tokens: 2, prompt_cache_key: key });
        assert.equal(r.status, 200, r.body);
        seen.add(r.replica);
      }
      assert.equal(seen.size, 1, `${key} went to ${[...seen]}`);
      assert.ok(['A', 'B'].includes([...seen][0]));
    }
  });

  it('A killed with SIGKILL under traffic: requests go on on B; A restarts and serves', async () => {
    // a key that hashes to A
    let keyA = null;
    for (let i = 0; i < 40 && !keyA; i++) {
      const r = await viaLb({ model: 'm', prompt: 'Hi', max_tokens: 1, prompt_cache_key: `k${i}` });
      if (r.replica === 'A') keyA = `k${i}`;
    }
    assert.ok(keyA, 'no key of 40 hashed to A');
    const portA = A.port;
    let stop = false;
    const results = [];
    const traffic = (async () => {
      for (let i = 0; !stop; i++) {
        const t0 = Date.now();
        const r = await viaLb({ model: 'm', prompt: `${STORY} ${i}`, max_tokens: 8, prompt_cache_key: keyA });
        results.push({ t0, ...r });
      }
    })();
    await new Promise((r) => setTimeout(r, 300));
    const tKill = Date.now();
    await A.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, 1500));
    stop = true;
    await traffic;
    const afterKill = results.filter((r) => r.t0 > tKill);
    assert.ok(afterKill.length >= 1, 'no request after the kill');
    for (const r of afterKill) {
      assert.equal(r.status, 200, r.body);
      assert.equal(r.replica, 'B');
    }
    // A comes back on its port: HAProxy's check takes it back, and its keys return to it
    A = await startServer([...replicaArgs('A'), '--port', String(portA)]);
    await waitFor(async () => (await viaLb({ model: 'm', prompt: 'Hi', max_tokens: 1, prompt_cache_key: keyA })).replica === 'A',
      'A serving its key again', 15000);
  });

  it('Redis stopped: requests still succeed, hits stop, no request fails', async () => {
    const hits = await metric(B, 'tokenkv_store_hits_total');
    const failed = async (s) => (await metric(s, 'tokenkv_requests_total{status="500"}'))
      + (await metric(s, 'tokenkv_requests_total{status="503"}'));
    const failedBefore = (await failed(A)) + (await failed(B));
    await redis.stop('SIGKILL');
    for (let i = 0; i < 6; i++) {
      const r = await viaLb({ model: 'm', prompt: `${STORY} number ${i}`, max_tokens: 4 });
      assert.equal(r.status, 200, r.body);
    }
    // a long prompt straight to B: its lookup fails (counted), and B computes it
    const b = await post(B, '/v1/completions', { model: 'm', prompt: STORY.repeat(4), max_tokens: 4 });
    assert.equal(b.status, 200, b.body);
    assert.equal(await metric(B, 'tokenkv_store_hits_total'), hits);
    assert.equal((await failed(A)) + (await failed(B)), failedBefore);
    assert.ok((await metric(B, 'tokenkv_store_errors_total')) + (await metric(B, 'tokenkv_store_timeouts_total')) > 0);
    redis = null;
  });
});
