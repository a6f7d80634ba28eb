// save-stall.mjs — the longest decode-step stall while `--cache-dir` saves
// run every second under steady streaming traffic.
//
//   node bench/save-stall.mjs --bin build/tokenkv -m MODEL [--seconds 60] [--clients 4]
//        [--threads 2] [--ctx 4096] [--no-cache-dir]
//
// Starts `tokenkv serve --cache-dir D --save-interval 1` (without it when
// --no-cache-dir: the same load, no saves), runs `clients` streaming
// conversations (each turn: the history so far + a new question, 32 tokens,
// temperature 0, so every save has new prefixes to write) for `seconds`,
// and reports the gaps between streamed tokens as the clients see them
// (max, p99.9, p99), the server's tokenkv_step_seconds_max when it has one,
// and the save lines of its log.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const argv = process.argv.slice(2);
const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : dflt; };
const bin = opt('--bin', 'build/tokenkv');
const model = opt('-m', '/tmp/m/bench-125m-Q4_K_M.gguf');
const seconds = Number(opt('--seconds', '60'));
const nClients = Number(opt('--clients', '4'));
const threads = opt('--threads', '2');
const ctx = opt('--ctx', '4096');
const saves = !argv.includes('--no-cache-dir');

const dir = mkdtempSync(path.join(tmpdir(), 'tkv-stall-'));
const args = ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '-t', threads, '--ctx', ctx,
              '-np', String(nClients)];
if (saves) args.push('--cache-dir', path.join(dir, 'cache'), '--save-interval', '1');
const srv = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
srv.stderr.on('data', (d) => { log += d; });
const port = await new Promise((resolve, reject) => {
  const t = setInterval(() => {
    const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
    if (m) { clearInterval(t); resolve(Number(m[1])); }
    if (srv.exitCode !== null) { clearInterval(t); reject(new Error(log)); }
  }, 20);
});
const url = `http://127.0.0.1:${port}`;

const QUESTIONS = ['Tell me about the red ball.', 'What did the cat do next?', 'Where did they go then?',
                   'Why was the boy sad?', 'How did the dog help?', 'What did mom say?', 'Who found the toy?'];
const gaps = [];
let requests = 0, tokens = 0;

async function stream(prompt) {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 32, temperature: 0, stream: true }),
  });
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = '', text = '', last = null;
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const c = JSON.parse(ev.slice(6)).choices?.[0];
      if (!c || !c.text) continue;
      const now = performance.now();
      if (last !== null) gaps.push(now - last); // between two tokens of one stream: decode steps only
      last = now;
      text += c.text;
      tokens++;
    }
  }
  requests++;
  return text;
}

const end = Date.now() + seconds * 1000;
async function client(k) {
  while (Date.now() < end) {
    let history = `Once upon a time, in conversation ${k}-${requests}, a child asked a question.\n`;
    for (let turn = 0; turn < 6 && Date.now() < end; turn++) {
      const q = `${QUESTIONS[(k + turn) % QUESTIONS.length]}\n`;
      history += q + (await stream(history + q)) + '\n';
    }
  }
}
await Promise.all(Array.from({ length: nClients }, (_, k) => client(k)));

const metrics = await (await fetch(`${url}/metrics`)).text();
const stepMax = /^tokenkv_step_seconds_max (\S+)/m.exec(metrics);
const snapMax = /^tokenkv_cache_save_snapshot_seconds_max (\S+)/m.exec(metrics);
srv.kill('SIGTERM');
await new Promise((r) => srv.on('exit', r));
rmSync(dir, { recursive: true, force: true });

gaps.sort((a, b) => a - b);
const q = (p) => gaps[Math.min(gaps.length - 1, Math.floor(p * gaps.length))];
const saveMs = [...log.matchAll(/cache: saved to \S+ in ([\d.]+) ms/g)].map((m) => Number(m[1]));
console.log(JSON.stringify({
  saves: saves ? 'every 1 s' : 'none', seconds, clients: nClients, requests, tokens,
  gap_ms: { median: +q(0.5).toFixed(1), p99: +q(0.99).toFixed(1), p999: +q(0.999).toFixed(1),
            max: +gaps.at(-1).toFixed(1) },
  server_step_max_ms: stepMax ? +(1e3 * Number(stepMax[1])).toFixed(1) : null,
  snapshot_max_ms: snapMax ? +(1e3 * Number(snapMax[1])).toFixed(2) : null,
  save_lines: saveMs.length, save_ms_max: saveMs.length ? Math.max(...saveMs) : null,
  save_ms_median: saveMs.length ? saveMs.sort((a, b) => a - b)[saveMs.length >> 1] : null,
}, null, 1));
