// serve-workload.mjs — a multi-client workload against a running `tokenkv serve`.
//
//   node bench/serve-workload.mjs --url http://127.0.0.1:8080 [--workload reference|mixed]
//        [--clients 4] [--turns 3] [--max-tokens 32] [--out results.json] [--native] [--llama-server]
//        [--no-cache-prompt]
//
// Clients share one system prompt and hold multi-turn conversations: each
// turn's prompt is the previous prompt, the previous answer and a new
// question. The `mixed` workload adds branches (a turn that continues from an
// earlier turn), returns to the main line, and requests cancelled midway and
// then retried. All requests stream (TTFT is the first content chunk).
//
// It reports prompt tokens, cached tokens (usage.prompt_tokens_details) and
// the ideal: what a cache that remembers every computed token could reuse,
// computed here from the token ids (/tokenize, and the generated ids the
// server lists with the return_tokens extension).
//
// --native sends the same requests to the native /completion endpoint
// (n_predict, return_tokens, cache_prompt) and reads the prompt and cached
// tokens from the last event (tokens_evaluated, timings.cache_n): the form
// llama-server answers, whose streamed /v1/completions carry neither usage
// nor token ids. --llama-server is --native against a llama-server; run
// tokenkv with --native beside it to compare like with like.
//
// Prompt tokens computed: the timings' prompt_n where the server gives it
// (llama-server's and tokenkv's native events), else prompt_tokens less
// cached_tokens. --no-cache-prompt sends cache_prompt: false (native): a
// llama-server that reuses nothing, the twin of tokenkv's --no-prefix-cache.
// After the run, a server that answers GET /v1/cache (tokenkv) has its
// checkpoint figures recorded in the summary.

const FLAGS = ['native', 'llama-server', 'no-cache-prompt'];
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (!a.startsWith('--') ? acc
    : FLAGS.includes(a.slice(2)) ? [...acc, [a.slice(2), true]] : [...acc, [a.slice(2), all[i + 1]]]), []));
const native = !!(args.native || args['llama-server']);
const url = args.url ?? 'http://127.0.0.1:8080';
const workload = args.workload ?? 'reference';
const nClients = Number(args.clients ?? 4);
const nTurns = Number(args.turns ?? 3);
const maxTokens = Number(args['max-tokens'] ?? 32);
const cachePrompt = !args['no-cache-prompt'];

const SYSTEM =
  'You are a kind storyteller for small children. Your stories are short and happy. ' +
  'They have a little girl or a little boy in them, a friend, and a dog or a cat. ' +
  'Something small goes wrong, and the friends fix it together. ' +
  'At the end everyone is happy and they learn to share, to be kind, and to say sorry. ' +
  'Use easy words. Do not use scary things. Keep every sentence short.\n';
const QUESTIONS = [
  'Tell me a story about a red ball.', 'What did the cat do next?', 'Where did they go after that?',
  'Tell me a story about a big tree.', 'Why was the boy sad?', 'How did the dog help?',
  'Tell me a story about the sun.', 'What did mom say?', 'What happened at the park?',
  'Tell me a story about a small boat.', 'Who found the toy?', 'What did they eat?',
];

// A request that reads nothing but its answer (/tokenize): tried again when the socket closes under it (a kept-alive
// connection the server closed as the client reused it: llama-server's, on a loaded machine).
async function post(path, body, tries = 3) {
  let r;
  try {
    r = await fetch(url + path, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
  } catch (e) {
    if (tries > 1 && e.cause?.code === 'UND_ERR_SOCKET') return post(path, body, tries - 1);
    throw e;
  }
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}: ${await r.text()}`);
  return r.json();
}

const tokenize = async (text) => (await post('/tokenize', {content: text, add_special: true})).tokens;

// Stream one completion; cancelAfter: abort after that many content chunks.
async function complete(prompt, cancelAfter) {
  const ctl = new AbortController();
  const t0 = performance.now();
  const body = native
    ? {prompt, n_predict: maxTokens, temperature: 0, stream: true, return_tokens: true, cache_prompt: cachePrompt}
    : {prompt, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: {include_usage: true},
       return_tokens: true};
  const r = await fetch(url + (native ? '/completion' : '/v1/completions'), {
    method: 'POST', signal: ctl.signal, headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`completion: HTTP ${r.status}: ${await r.text()}`);
  let text = '', ttft = null, usage = null, tokens = null, chunks = 0, buf = '';
  const dec = new TextDecoder();
  try {
    for await (const part of r.body) {
      buf += dec.decode(part, {stream: true});
      let k;
      while ((k = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, k);
        buf = buf.slice(k + 2);
        if (!ev.startsWith('data: ')) continue;
        const data = ev.slice(6);
        if (data === '[DONE]') continue;
        const j = JSON.parse(data);
        if (j.usage) usage = {...j.usage, computed: j.timings?.prompt_n};
        if (native) { // one event per token; the last (stop) has the counts, and with tokenkv every id
          if (j.content) {
            if (ttft === null) ttft = performance.now() - t0;
            text += j.content;
            chunks++;
          }
          if (!j.stop) tokens = (tokens ?? []).concat(j.tokens ?? []);
          else {
            if (j.tokens?.length) tokens = j.tokens;
            usage = {prompt_tokens: j.tokens_evaluated, completion_tokens: j.tokens_predicted,
                     prompt_tokens_details: {cached_tokens: j.timings?.cache_n}, computed: j.timings?.prompt_n};
          }
        }
        for (const c of j.choices ?? []) {
          if (c.text) {
            if (ttft === null) ttft = performance.now() - t0;
            text += c.text;
            chunks++;
          }
          if (c.tokens) tokens = c.tokens;
        }
        if (cancelAfter !== undefined && chunks >= cancelAfter) {
          ctl.abort();
          return {text, ttft, cancelled: true, ms: performance.now() - t0};
        }
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  }
  return {text, ttft: ttft ?? performance.now() - t0, usage, tokens, cancelled: false, ms: performance.now() - t0};
}

// The plan of each client: a list of turns, each naming the turn it continues.
function plan(c) {
  const turns = [];
  for (let t = 0; t < nTurns; t++) turns.push({from: t - 1, q: QUESTIONS[(c * nTurns + t) % QUESTIONS.length]});
  if (workload === 'mixed') {
    if (c % 2 === 1) turns.push({from: 0, q: 'Tell it again, but with a dog.', branch: true}); // a branch off turn 1
    if (c % 2 === 1) turns.push({from: nTurns - 1, q: 'And then?', ret: true});             // back to the main line
    if (c % 4 === 2) turns[1].cancelAfter = 3;                                                // cancelled, then retried
  }
  return turns;
}

const cache = [];  // token lists the server computed: prompt + generated ids but the last
const records = [];

function ideal(tokens) {
  let best = 0;
  for (const c of cache) {
    let i = 0;
    while (i < c.length && i < tokens.length && c[i] === tokens[i]) i++;
    if (i > best) best = i;
  }
  return Math.min(best, tokens.length - 1); // the last prompt token is always decoded again
}

async function client(c) {
  const turns = plan(c);
  const prompts = [];
  for (let t = 0; t < turns.length; t++) {
    const tu = turns[t];
    const base = tu.from < 0 ? SYSTEM : prompts[tu.from].prompt + prompts[tu.from].answer + '\n';
    const prompt = base + 'User: ' + tu.q + '\nAssistant:';
    const toks = await tokenize(prompt);
    const rec = {client: c, turn: t + 1, branch: !!tu.branch, ret: !!tu.ret, prompt_tokens: toks.length};
    // the ideal of requests served one after the other: every prompt that
    // arrived earlier counts as computed from the moment it arrived
    rec.ideal = ideal(toks);
    cache.push(toks);
    if (tu.cancelAfter !== undefined) {
      const x = await complete(prompt, tu.cancelAfter);
      records.push({...rec, cancelled: true, ttft_ms: x.ttft, cached: null});
      rec.ideal = ideal(toks); // the retry can reuse the prompt the cancelled request computed
    }
    const r = await complete(prompt);
    cache.push(toks.concat(r.tokens ?? []).slice(0, -1));
    prompts[t] = {prompt, answer: r.text};
    const cached = r.usage?.prompt_tokens_details?.cached_tokens ?? 0;
    records.push({...rec, cancelled: false, ttft_ms: r.ttft, ms: r.ms, cached,
                  computed: r.usage?.computed ?? (r.usage?.prompt_tokens ?? rec.prompt_tokens) - cached,
                  usage_prompt: r.usage?.prompt_tokens, completion_tokens: r.usage?.completion_tokens ?? 0, text: r.text});
  }
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

const t0 = performance.now();
await Promise.all(Array.from({length: nClients}, (_, c) => client(c)));
const wall = (performance.now() - t0) / 1000;
const done = records.filter((r) => !r.cancelled);
const sum = (f) => done.reduce((a, r) => a + f(r), 0);
const summary = {
  workload, api: native ? 'native' : 'openai', clients: nClients, requests: done.length, cancelled: records.length - done.length,
  prompt_tokens: sum((r) => r.prompt_tokens), cached_tokens: sum((r) => r.cached), ideal_tokens: sum((r) => r.ideal),
  computed_tokens: sum((r) => r.computed),
  completion_tokens: sum((r) => r.completion_tokens), wall_s: wall,
  ttft_p50_ms: pct(done.map((r) => r.ttft_ms), 50), ttft_p99_ms: pct(done.map((r) => r.ttft_ms), 99),
};
summary.cached_share = summary.cached_tokens / summary.prompt_tokens;
summary.ideal_share = summary.ideal_tokens / summary.prompt_tokens;
summary.tokens_per_s = summary.completion_tokens / wall;
summary.mismatched_usage = done.filter((r) => r.usage_prompt !== r.prompt_tokens).length;
try { // tokenkv's cache figures (checkpoints of a hybrid); other servers have no /v1/cache
  const c = await fetch(url + '/v1/cache');
  if (c.ok) summary.cache = await c.json();
} catch { /* none */ }
const out = {summary, records};
if (args.out) (await import('node:fs')).writeFileSync(args.out, JSON.stringify(out, null, 1));
console.log(JSON.stringify(summary));
