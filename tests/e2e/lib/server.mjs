// Shared helpers of the end-to-end tests: start the real `tokenkv serve` on a
// free loopback port, talk to it, stop it and check how it ended.
//
// Environment (set by CTest, see tests/e2e/e2e.cmake; the defaults suit
// `npm test --prefix tests/e2e` after `cmake --build build`):
//   TKV_BIN         the built `tokenkv` binary (default build/tokenkv)
//   TKV_SHARED_DIR  ../shared beside the checkout (models/ and reference/)
//   TKV_MODEL       the default model (default $TKV_SHARED_DIR/models/stories260K.gguf)
import { spawn, execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function file(envName, fallback) {
  const v = process.env[envName] || fallback;
  if (!existsSync(v)) throw new Error(`${envName}: ${v} does not exist (build tokenkv first, or set ${envName})`);
  return v;
}

export const BIN = file('TKV_BIN', path.join(ROOT, 'build', 'tokenkv'));
export const SHARED = file('TKV_SHARED_DIR', path.join(ROOT, '..', 'shared'));
export const MODEL = file('TKV_MODEL', path.join(SHARED, 'models', 'stories260K.gguf'));
export const MODEL_ID = 'stories260K';

// The official client; a missing node_modules gets a message that says what to run.
let OpenAIClass;
try {
  OpenAIClass = (await import('openai')).default;
} catch (e) {
  throw new Error(`cannot load the 'openai' package (${e.message}); install the test dependencies with ` +
                  `'npm ci --prefix tests/e2e' (scripts/test does it when npm is available)`);
}
export const OpenAI = OpenAIClass;

// One thread unless a test asks for more (`-t N` in its options): the
// thread pool spins while it waits, which on a small, busy CI machine
// makes a multi-threaded server many times slower, not faster.
const THREADS = ['-t', '1'];
const START_TIMEOUT_MS = 30000; // generous: an ASan build starts slower
const STOP_TIMEOUT_MS = 15000;
const SANITIZER_REPORT = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer/;

/**
 * Start `tokenkv serve --port 0` with extra options; resolves once it
 * listens and GET /health answers 200. The result:
 *   pid, port, url ('http://127.0.0.1:PORT'), baseURL (url + '/v1'),
 *   log() (its stderr so far), client(opts) (an OpenAI client for it),
 *   stop() (SIGTERM, SIGKILL after a timeout; resolves {code, signal, log}),
 *   kill(sig) (that signal, default SIGKILL, and nothing else; resolves the same).
 */
export async function startServer(args = [], { model = MODEL } = {}) {
  const threads = args.includes('-t') || args.includes('--threads') ? [] : THREADS;
  const argv = ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', ...threads, ...args];
  const child = spawn(BIN, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  let stopping = false;
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  const listening = new Promise((resolve, reject) => {
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d) => {
      stderr += d;
      const m = /tokenkv serve: listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr);
      if (m) resolve(Number(m[1]));
    });
    child.on('error', reject);
    exited.then(({ code, signal }) =>
      reject(new Error(`tokenkv serve exited before listening (code ${code}, signal ${signal}):\n${stderr}`)));
    setTimeout(() => reject(new Error(`tokenkv serve did not listen within ${START_TIMEOUT_MS} ms:\n${stderr}`)),
               START_TIMEOUT_MS).unref();
  });

  let port;
  try {
    port = await listening;
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
  const url = `http://127.0.0.1:${port}`;
  let stopped = null;
  const keyAt = args.indexOf('--api-key');
  const apiKey = keyAt >= 0 ? args[keyAt + 1] : undefined;
  const server = {
    argv,
    pid: child.pid,
    apiKey,
    // what the helpers below send (the right key, where the server has one)
    auth: apiKey ? { Authorization: `Bearer ${apiKey}` } : {},
    port,
    url,
    baseURL: `${url}/v1`,
    // the log, with a note when the server was stopped by a signal this
    // test did not send (someone else's kill on a shared machine)
    log: () => (!stopping && /: (SIGINT|SIGTERM): shutting down/.test(stderr)
      ? `${stderr}NOTE: this server got a signal from outside the test\n` : stderr),
    client: (opts = {}) => new OpenAI({ baseURL: `${url}/v1`, apiKey: apiKey ?? 'none', ...opts }),
    stop() {
      if (stopped) return stopped;
      stopped = (async () => {
        if (child.exitCode === null && child.signalCode === null) {
          stopping = true;
          child.kill('SIGTERM');
          const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
          const r = await exited;
          clearTimeout(timer);
          return { ...r, log: stderr };
        }
        return { ...(await exited), log: stderr };
      })();
      return stopped;
    },
    // send `sig` (default SIGKILL: no shutdown, no save) and resolve once the
    // process is gone: {code, signal, log}; stop() then resolves the same
    kill(sig = 'SIGKILL') {
      if (stopped) return stopped;
      stopping = true;
      if (child.exitCode === null && child.signalCode === null) child.kill(sig);
      stopped = exited.then((r) => ({ ...r, log: stderr }));
      return stopped;
    },
  };
  // a test that dies still takes its server down (one listener per live server)
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  exited.then(() => process.removeListener('exit', killOnExit));

  try {
    await waitFor(async () => (await fetch(`${url}/health`)).status === 200, 'GET /health -> 200');
  } catch (e) {
    await server.stop();
    throw new Error(`${e.message}\n${stderr}`);
  }
  return server;
}

/**
 * Stop a server and require a clean end: exit status 0 after SIGTERM (it
 * shuts down by itself, no SIGKILL needed) and no sanitizer report.
 */
export async function stopAndCheck(server) {
  const { code, signal, log } = await server.stop();
  assert.ok(!SANITIZER_REPORT.test(log), `sanitizer report in the server's stderr:\n${log}`);
  assert.equal(signal, null, `the server was killed by ${signal} (did not stop on SIGTERM):\n${tail(log)}`);
  assert.equal(code, 0, `the server exited with status ${code}:\n${tail(log)}`);
  assert.match(log, /SIGTERM: shutting down/);
}

/** Kill a server's process with a signal (default SIGKILL), no checks: see server.kill(). */
export function kill(server, sig = 'SIGKILL') {
  return server.kill(sig);
}

export function tail(s, n = 6000) {
  return s.length > n ? `...${s.slice(-n)}` : s;
}

// A test body that, when it fails, appends the tail of the server's log (getServer() gives the server, which a
// before() hook may start after the test is declared) to the failure's message.
export function withLog(getServer, fn) {
  return async () => {
    try {
      await fn();
    } catch (e) {
      const server = getServer();
      if (server) e.message = `${e.message}\n--- server stderr ---\n${tail(server.log())}`;
      throw e;
    }
  };
}

/**
 * A describe() block with one server for its tests (started before the
 * first, stopped and checked after the last). `body(ctx)` declares tests
 * with ctx.test(name, async (server) => ...); a failing test gets the
 * server's stderr appended to its error.
 */
export function serverSuite(name, args, body, opts = {}) {
  describe(name, () => {
    let server = null;
    before(async () => {
      server = await startServer(args, opts);
    });
    after(async () => {
      if (server) await stopAndCheck(server);
    });
    body({
      test(title, fn) {
        it(title, async (t) => {
          try {
            await fn(server, t);
          } catch (e) {
            if (server && e && typeof e === 'object') {
              try {
                e.message = `${e.message}\n--- server stderr (${server.argv.join(' ')}) ---\n${tail(server.log())}`;
              } catch { /* a read-only message: report the error as it is */ }
            }
            throw e;
          }
        });
      },
      get server() {
        return server;
      },
    });
  });
}

export async function waitFor(pred, what, timeoutMs = 10000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await pred()) return;
    } catch { /* not yet */ }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

// ---- raw HTTP -----------------------------------------------------------------

/** POST a JSON value (or a raw string body); resolves {status, headers, body, json}. */
export async function post(server, route, body, headers = {}) {
  const res = await fetch(server.url + route, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  return answer(res);
}

export async function get(server, route, headers = {}) {
  return answer(await fetch(server.url + route, { headers }));
}

async function answer(res) {
  const body = await res.text();
  let json;
  try {
    json = JSON.parse(body);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, body, json };
}

/** The token ids of text, as the server tokenizes a prompt (with BOS). */
export async function tokenize(server, content, extra = {}) {
  const r = await post(server, '/tokenize', { content, ...extra }, server.auth);
  assert.equal(r.status, 200, r.body);
  return r.json.tokens;
}

export function commonPrefix(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/** The OpenAI error object: {error: {message, type, param, code}}, all four keys present. */
export function assertErrorBody(json, { type = 'invalid_request_error', param, code } = {}) {
  assert.ok(json && typeof json === 'object' && json.error, `not an error body: ${JSON.stringify(json)}`);
  const e = json.error;
  assert.deepEqual(Object.keys(e).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(e.type, type);
  if (param !== undefined) assert.equal(e.param, param);
  if (code !== undefined) assert.equal(e.code, code);
}

// ---- the CLI as the oracle --------------------------------------------------------

function run(args) {
  return new Promise((resolve, reject) => {
    execFile(BIN, args, { maxBuffer: 1 << 24 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${BIN} ${args.join(' ')} failed: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/** `tokenkv run` greedy text (the CLI ends its output with one newline of its own). */
export async function cliText(prompt, n, model = MODEL) {
  const out = await run(['run', '-m', model, '-p', prompt, '-n', String(n), '--temp', '0', ...THREADS]);
  assert.ok(out.endsWith('\n'), 'tokenkv run ends its output with a newline');
  return out.slice(0, -1);
}

/** `tokenkv run --ids` greedy token ids. */
export async function cliIds(prompt, n, model = MODEL) {
  return JSON.parse(await run(['run', '-m', model, '-p', prompt, '-n', String(n), '--temp', '0', '--ids', ...THREADS]));
}

/**
 * The text a completion of `prompt` must read: `tokenkv run --ids` gives the
 * greedy tokens, and the text is what the prompt's tokens followed by them
 * decode to, less what the prompt's tokens alone decode to (a completion
 * continues its prompt: prompt + completion reads as the whole; so a first
 * word keeps its leading space, which `tokenkv run`, printing a text of its
 * own, leaves out).
 */
export async function continuation(server, prompt, n, model = MODEL) {
  const [ids, promptIds] = await Promise.all([cliIds(prompt, n, model), tokenize(server, prompt)]);
  const decode = async (tokens) => {
    const r = await post(server, '/detokenize', { tokens }, server.auth);
    assert.equal(r.status, 200, r.body);
    return r.json.content;
  };
  const [head, whole] = await Promise.all([decode(promptIds), decode([...promptIds, ...ids])]);
  assert.ok(whole.startsWith(head), `${JSON.stringify(whole)} starts with ${JSON.stringify(head)}`);
  return whole.slice(head.length);
}

/** The reference (llama.cpp) greedy continuation of a prompt: {prompt, tokens, greedy}. */
export function reference(model, prompt) {
  const file = path.join(SHARED, 'reference', `${model}.generate.jsonl`);
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const r = JSON.parse(line);
    if (r.prompt === prompt) return { prompt: r.prompt, tokens: r.tokens, greedy: r.greedy };
  }
  throw new Error(`no reference for '${prompt}' in ${file}`);
}
