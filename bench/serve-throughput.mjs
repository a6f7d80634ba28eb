// serve-throughput.mjs — N concurrent streaming clients against an
// OpenAI-compatible server (tokenkv serve or llama-server): every request a
// distinct prompt of about --prompt-tokens tokens, --max-tokens generated
// (ignore_eos, so every request generates all of them), greedy.
//
//   node bench/serve-throughput.mjs --url http://127.0.0.1:8080 --clients N
//        [--rounds R] [--prompt-tokens 256] [--max-tokens 128] [--seed S] [--out results.json]
//
// Each client sends R requests one after another (distinct prompts); all
// clients start together. Reports, over the whole run:
//   aggregate generated tokens per second (tokens / wall time of the run),
//   TTFT p50/p99 (request sent -> first text chunk),
//   inter-token latency p50/p99 (gaps between a request's text chunks).
// One warm-up request (not counted) goes first.

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const url = args.url ?? 'http://127.0.0.1:8080';
const nClients = Number(args.clients ?? 4);
const rounds = Number(args.rounds ?? 1);
const promptTokens = Number(args['prompt-tokens'] ?? 256);
const maxTokens = Number(args['max-tokens'] ?? 128);
const seed = Number(args.seed ?? 1);

// Common short words: about one token each with a llama vocabulary, so a
// prompt of promptTokens * 0.97 words lands near promptTokens tokens.
const WORDS = ('the of and to in is was for on that with as it by at from his her they this be are or had ' +
  'not but which have one were all we when there can an their more so if about out up what some into time ' +
  'has two like other then them these than many first way been who now people my made over did down only ' +
  'after called water long little very just where most know get through back much before go good new ' +
  'write our used me man day too any same right look think also around another came come work three ' +
  'must because does part even place well such here take why help put different away again off went old')
  .split(' ');

function rng(s) { // xorshift32: the same prompts for every server
  let x = (s * 2654435761) >>> 0 || 1;
  return () => ((x ^= x << 13, x ^= x >>> 17, x ^= x << 5) >>> 0) / 4294967296;
}

function prompt(i) {
  const r = rng(seed * 100003 + i);
  const words = [`Request ${i}:`];
  for (let k = 0; k < Math.round(promptTokens * 0.97); k++) words.push(WORDS[Math.floor(r() * WORDS.length)]);
  return words.join(' ');
}

// One streamed completion: its send time, the arrival time of each text chunk.
async function request(p) {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      model: 'm', prompt: p, max_tokens: maxTokens, temperature: 0, stream: true, ignore_eos: true,
      stream_options: { include_usage: true },
    }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const times = [];
  let usage = null, buf = '';
  const dec = new TextDecoder();
  for await (const part of res.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      for (const line of ev.split('\n')) {
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const o = JSON.parse(line.slice(6));
        if (o.usage) usage = o.usage;
        if (o.choices?.[0]?.text) times.push(performance.now());
      }
    }
  }
  return { t0, times, tokens: usage?.completion_tokens ?? times.length, prompt_tokens: usage?.prompt_tokens };
}

function pct(v, q) {
  if (!v.length) return null;
  const s = [...v].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}

await request(prompt(-1)); // warm-up: page in the weights, start the threads

const start = performance.now();
const results = await Promise.all(Array.from({ length: nClients }, async (_, c) => {
  const out = [];
  for (let r = 0; r < rounds; r++) out.push(await request(prompt(c * rounds + r)));
  return out;
}));
const wall = (performance.now() - start) / 1000;
const all = results.flat();
const tokens = all.reduce((a, r) => a + r.tokens, 0);
const ttft = all.map((r) => r.times[0] - r.t0);
const itl = all.flatMap((r) => r.times.slice(1).map((t, i) => t - r.times[i]));
const summary = {
  clients: nClients, rounds, requests: all.length, wall_s: wall, generated_tokens: tokens,
  prompt_tokens_mean: all.reduce((a, r) => a + (r.prompt_tokens ?? 0), 0) / all.length,
  tok_per_s: tokens / wall,
  ttft_p50_ms: pct(ttft, 0.5), ttft_p99_ms: pct(ttft, 0.99),
  itl_p50_ms: pct(itl, 0.5), itl_p99_ms: pct(itl, 0.99),
};
if (args.out) (await import('node:fs')).writeFileSync(args.out, JSON.stringify(summary, null, 1));
console.log(JSON.stringify(summary));
