// The llama-server-compatible surface: its flag names (-c, -np, -b, -a,
// --api-key-file, --cors-origin) and TOKENKV_* environment variables,
// GET /props, CORS for the allowed origin only (with the OPTIONS preflight),
// and the default model found from any working directory.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BIN, startServer, stopAndCheck, tail } from '../lib/server.mjs';

const ORIGIN = 'http://pages.example';
const KEY = 'from-a-file';

describe('llama-server flags, /props, CORS', () => {
  let dir = null;
  let server = null;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'tkv-surface-'));
    await writeFile(path.join(dir, 'key'), `${KEY}\n`);
    process.env.TOKENKV_MAX_TOKENS = '77'; // the environment sets what the command line does not
    try {
      server = await startServer(['-c', '1024', '-np', '2', '-b', '128', '-a', 'my-model', '--cors-origin', ORIGIN,
                                  '--api-key-file', path.join(dir, 'key')]);
    } finally {
      delete process.env.TOKENKV_MAX_TOKENS;
    }
  });
  after(async () => {
    if (server) await stopAndCheck(server);
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  const call = (route, init = {}) => fetch(`${server.url}${route}`, init);
  const auth = { Authorization: `Bearer ${KEY}` };

  it('flags by their llama-server names, and the environment', async () => {
    try {
      assert.equal((await call('/v1/models')).status, 401, 'the key from the file is required');
      const models = await (await call('/v1/models', { headers: auth })).json();
      assert.equal(models.data[0].id, 'my-model');
      const props = await (await call('/props', { headers: auth })).json();
      assert.equal(props.model_alias, 'my-model');
      assert.equal(props.total_slots, 2);
      assert.ok(props.n_ctx > 0 && props.n_ctx <= 1024, `n_ctx ${props.n_ctx}`);
      assert.equal(props.default_generation_settings.params.n_predict, 77);
      assert.match(props.build_info, /^tokenkv \d+\.\d+\.\d+$/);
      assert.equal(typeof props.chat_template, 'string');
      const over = await call('/v1/completions', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
                                                   body: JSON.stringify({ prompt: 'x', max_tokens: 78 }) });
      assert.equal(over.status, 400, 'TOKENKV_MAX_TOKENS=77 holds');
    } catch (e) {
      e.message = `${e.message}\n${tail(server.log())}`;
      throw e;
    }
  });

  it('CORS for the allowed origin only, with the preflight', async () => {
    const ok = await call('/v1/models', { headers: { ...auth, Origin: ORIGIN } });
    assert.equal(ok.headers.get('access-control-allow-origin'), ORIGIN);
    const other = await call('/v1/models', { headers: { ...auth, Origin: 'http://evil.example' } });
    assert.equal(other.status, 200);
    assert.equal(other.headers.get('access-control-allow-origin'), null);
    const pre = await call('/v1/chat/completions', { method: 'OPTIONS', headers: {
      Origin: ORIGIN, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type' } });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), ORIGIN);
    assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
    assert.match(pre.headers.get('access-control-allow-headers'), /Authorization/i);
    // streamed answers carry it too
    const s = await call('/v1/completions', { method: 'POST', headers: { ...auth, Origin: ORIGIN, 'Content-Type': 'application/json' },
                                              body: JSON.stringify({ prompt: 'Once', max_tokens: 2, stream: true }) });
    assert.equal(s.headers.get('access-control-allow-origin'), ORIGIN);
    await s.text();
  });
});

describe('the default model', () => {
  it('is found from any working directory', async () => {
    const child = spawn(path.resolve(BIN), ['serve', '--port', '0', '-t', '1'], { cwd: os.tmpdir(), stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
    const listening = await new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), 20000);
      child.stderr.on('data', (d) => {
        log += d;
        if (/listening on/.test(log)) {
          clearTimeout(timer);
          resolve(true);
        }
      });
      exited.then(() => resolve(false));
    });
    child.kill('SIGTERM');
    assert.equal(await exited, 0, log);
    assert.ok(listening, log);
    assert.match(log, /model stories260K/);
  });
});
