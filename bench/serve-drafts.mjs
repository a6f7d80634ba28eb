// serve-drafts.mjs — generation speed of a server on three workloads where
// drafts from the cache can pay or cost (tokenkv serve --draft N against
// --draft 0, or llama-server with and without --spec-type ngram-*):
//   retry  each client sends its request twice; the second (timed) finds
//          its whole answer in the cache (tokenkv's prefix tree)
//   copy   the prompt is a passage, a newline and the passage's first
//          words: an answer that copies the rest of the passage can take
//          it from the prompt (n-gram drafts)
//   none   a distinct random prompt per request, nothing to copy
//   mixed  as none, with each request's length drawn from max-tokens/2 to
//          3 max-tokens/2 (the same for every server): answers of one
//          length keep closed-loop clients in lock step, so that their
//          prompts arrive in one step, until drafts end some answers a step
//          early; with lengths that vary, as a service's do, neither server
//          runs in lock step
//   story  for a trained model (../shared/models/stories260K.gguf): the
//          prompt is the model's own greedy story (made untimed from an
//          opening line), a newline and the opening again, so an answer
//          that retells the story copies it from the prompt
// C clients at once, R timed requests each, greedy, ignore_eos, non-streamed.
// --temperature T > 0 samples instead (top_k 40), each request with a seed
// of its own drawn from its prompt: a retry sends the same seed, as a
// client's retry of the same request does.
//
//   node bench/serve-drafts.mjs --url http://127.0.0.1:8080 [--clients 4] [--rounds 2]
//        [--prompt-words 120] [--max-tokens 96] [--seed 1] [--workloads retry,copy,none] [--route openai|native]
//        [--temperature 0]
//
// --route native sends llama-server's POST /completion (n_predict) instead of /v1/completions.
//
// Prints, per workload: generated tokens per second over the timed requests
// (their completion tokens / the wall time from the first sent to the last
// answered), a digest of the answers' texts (the same answers give the same
// digest, whatever the server did to produce them), and, from /metrics where
// the server has them, tokenkv's drafted, accepted and known token counters
// over that time.

import { createHash } from 'node:crypto';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const url = args.url ?? 'http://127.0.0.1:8080';
const nClients = Number(args.clients ?? 4);
const rounds = Number(args.rounds ?? 2);
const promptWords = Number(args['prompt-words'] ?? 120);
const maxTokens = Number(args['max-tokens'] ?? 96);
const seed = Number(args.seed ?? 1);
const workloads = (args.workloads ?? 'retry,copy,none').split(',');
const native = (args.route ?? 'openai') === 'native';
const temperature = Number(args.temperature ?? 0);

const WORDS = ('the of and to in is was for on that with as it by at from his her they this be are or had ' +
  'not but which have one were all we when there can an their more so if about out up what some into time ' +
  'has two like other then them these than many first way been who now people my made over did down only ' +
  'after called water long little very just where most know get through back much before go good new').split(' ');

function rng(s) { // xorshift32: the same prompts for every server
  let x = (s * 2654435761) >>> 0 || 1;
  return () => ((x ^= x << 13, x ^= x >>> 17, x ^= x << 5) >>> 0) / 4294967296;
}

const NAMES = 'Lily Tom Ben Sue Max Anna Tim Mia Sam Lucy Jack Kate Bob Amy Joe Sara'.split(' ');
const THINGS = 'dog ball cat tree park cake boat bird toy box car doll kite sun flower book'.split(' ');

// The opening line of story (client, round).
function opening(c, k) {
  const r = rng(seed * 7919 + c * 131 + k * 17 + 3);
  const name = NAMES[Math.floor(r() * NAMES.length)], thing = THINGS[Math.floor(r() * THINGS.length)];
  return `Once upon a time, there was a little girl named ${name}. She liked to play with her ${thing}.`;
}
const stories = new Map(); // "c,k" -> the opening and the model's greedy continuation of it

function words(key, n) {
  const r = rng(key);
  return Array.from({ length: n }, () => WORDS[Math.floor(r() * WORDS.length)]).join(' ');
}

// The prompt of request (workload, client, round).
function prompt(w, c, k) {
  if (w === 'story') return `${stories.get(`${c},${k}`)}\n${opening(c, k)}`;
  const key = seed * 1000003 + c * 1009 + k * 17 + ({ copy: 7, none: 13, mixed: 19 }[w] ?? 0);
  if (w === 'copy') {
    const passage = words(key, promptWords);
    return `${passage}\n${passage.split(' ').slice(0, 12).join(' ')}`;
  }
  return words(key, promptWords);
}

// The length of request (workload, client, round).
function length(w, c, k) {
  if (w !== 'mixed') return maxTokens;
  const r = rng(seed * 104729 + c * 1013 + k * 31 + 5);
  return Math.round(maxTokens / 2 + r() * maxTokens);
}

// The sampling fields of the request for prompt p: greedy, or --temperature with a seed of the prompt's.
function sampling(p) {
  if (!(temperature > 0)) return { temperature: 0 };
  return { temperature, top_k: 40, seed: createHash('sha256').update(p).digest().readUInt32LE(0) & 0x7fffffff };
}

async function complete(p, n = maxTokens) {
  const body = native ? { prompt: p, n_predict: n, ignore_eos: true, ...sampling(p) }
                      : { model: 'm', prompt: p, max_tokens: n, ignore_eos: true, ...sampling(p) };
  const res = await fetch(`${url}${native ? '/completion' : '/v1/completions'}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const j = await res.json();
  return native ? { tokens: j.tokens_predicted, text: j.content }
                : { tokens: j.usage.completion_tokens, text: j.choices[0].text };
}

async function counters() {
  try {
    const m = await (await fetch(`${url}/metrics`)).text();
    const v = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(m)?.[1] ?? NaN);
    return { drafted: v('tokenkv_draft_tokens_total'), accepted: v('tokenkv_draft_accepted_tokens_total'),
             known: v('tokenkv_draft_known_tokens_total') };
  } catch {
    return { drafted: NaN, accepted: NaN, known: NaN };
  }
}

await complete('warm up'); // not counted
const rows = [];
for (const w of workloads) {
  if (w === 'story') // untimed: the model writes each story from its opening
    await Promise.all(Array.from({ length: nClients }, async (_, c) => {
      for (let k = 0; k < rounds; k++) stories.set(`${c},${k}`, opening(c, k) + (await complete(opening(c, k))).text);
    }));
  if (w === 'retry') // the first sends, not timed: the answers go into the cache
    await Promise.all(Array.from({ length: nClients }, async (_, c) => {
      for (let k = 0; k < rounds; k++) await complete(prompt(w, c, k));
    }));
  const c0 = await counters();
  const t0 = performance.now();
  const texts = [];
  const done = await Promise.all(Array.from({ length: nClients }, async (_, c) => {
    let tokens = 0;
    for (let k = 0; k < rounds; k++) {
      const a = await complete(prompt(w, c, k), length(w, c, k));
      tokens += a.tokens;
      texts[c * rounds + k] = a.text;
    }
    return tokens;
  }));
  const s = (performance.now() - t0) / 1000;
  const c1 = await counters();
  const tokens = done.reduce((a, b) => a + b, 0);
  const digest = createHash('sha256').update(JSON.stringify(texts)).digest('hex').slice(0, 12);
  rows.push({ workload: w, clients: nClients, tokens, seconds: +s.toFixed(3), tok_s: +(tokens / s).toFixed(1), digest,
              drafted: c1.drafted - c0.drafted, accepted: c1.accepted - c0.accepted, known: c1.known - c0.known });
}
console.log(JSON.stringify(rows));
