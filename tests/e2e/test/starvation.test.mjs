// Issue 22's goal for connections: with 600 slowloris connections (a header
// line every 2 s) and 2000 idle ones open, a normal client is still answered
// within 1 s, and the trickling ones are closed at the request deadline; 500
// unauthenticated 1 MB uploads keep the server under 100 MB resident.
//
// The attackers come from many loopback addresses (127.0.0.2 and up, fewer
// connections each than --max-connections-per-client): one address alone is
// stopped by that cap, so this is the distributed attack, which only a
// server that holds thousands of connections cheaply survives.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { serverSuite } from '../lib/server.mjs';

const SLOWLORIS = 600;
const IDLE = 2000;
const UPLOADS = 500;
const UPLOAD_BYTES = 1 << 20;
const PER_ADDRESS = 50; // under the default --max-connections-per-client (64)
const ANSWER_MS = 1000;
const RSS_LIMIT = 100 << 20;
// Under ASan (TKV_SANITIZED, set by e2e.cmake) the server's resident memory holds ASan's shadow and the freed
// blocks it quarantines: 35 MB idle against the release build's 10 MB. There the bound is on what the uploads
// add, the room the release build has under RSS_LIMIT from its idle size; the release build's run of this test
// checks the whole.
const SANITIZED = !!process.env.TKV_SANITIZED;
const RSS_GROWTH_LIMIT = 64 << 20;

// Open files this process may have (node raises its soft limit to the hard one at start).
function openFileLimit() {
  const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
  return !m || m[1] === 'unlimited' ? Infinity : Number(m[1]);
}

function rss(pid) {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

// The i-th attacker's address: 127.0.0.2 and on, PER_ADDRESS connections each.
function address(i) {
  return `127.0.0.${2 + Math.floor(i / PER_ADDRESS)}`;
}

// A connection from localAddress; resolves {sock, closed: Promise<ms open>} once connected.
function connect(port, localAddress) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const sock = net.connect({ port, host: '127.0.0.1', localAddress });
    sock.on('error', () => {});
    const closed = new Promise((r) => sock.on('close', () => r(Date.now() - t0)));
    sock.once('connect', () => resolve({ sock, closed, isOpen: () => !sock.destroyed && !sock.readableEnded }));
    sock.once('error', reject);
  });
}

async function connectAll(port, n, offset) {
  const out = [];
  for (let i = 0; i < n; i += 100) { // in waves: the listen backlog is finite
    const wave = [];
    for (let k = i; k < Math.min(n, i + 100); k++) wave.push(connect(port, address(offset + k)));
    out.push(...(await Promise.all(wave)));
  }
  return out;
}

async function canBind() {
  try {
    const c = await connect(9, '127.0.0.2'); // the discard port: connection refused is fine, EADDRNOTAVAIL is not
    c.sock.destroy();
    return true;
  } catch (e) {
    return e.code !== 'EADDRNOTAVAIL' && e.code !== 'EINVAL';
  }
}

const skip = openFileLimit() < SLOWLORIS + IDLE + 500
  ? `needs ${SLOWLORIS + IDLE + 500} open files (ulimit -n is ${openFileLimit()}); raise it to run this test`
  : !(await canBind()) ? 'cannot connect from 127.0.0.2 (loopback addresses other than 127.0.0.1 are Linux\'s)' : false;

// Time to answer one ordinary chat request from 127.0.0.1, on a connection of its own.
function answerTime(server) {
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0 });
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const req = http.request({ host: '127.0.0.1', port: server.port, path: '/v1/chat/completions', method: 'POST',
                               agent: false, timeout: 10000,
                               headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } },
                             (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => (res.statusCode === 200 ? resolve(Date.now() - t0)
        : reject(new Error(`status ${res.statusCode}: ${text}`))));
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 10 s')));
    req.on('error', reject);
    req.end(body);
  });
}

serverSuite('starvation: slowloris and idle connections', [], (s) => {
  s.test(`${SLOWLORIS} slowloris and ${IDLE} idle connections: a normal client is answered within ${ANSWER_MS} ms`,
         async (server, t) => {
    if (skip) return t.skip(skip);
    const t0 = Date.now();
    const slow = await connectAll(server.port, SLOWLORIS, 0);
    const idle = await connectAll(server.port, IDLE, SLOWLORIS);
    const opened = Date.now() - t0;
    let line = 0;
    for (const c of slow) c.sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n');
    const trickle = setInterval(() => {
      line++;
      for (const c of slow) if (c.isOpen()) c.sock.write(`X-Line-${line}: y\r\n`);
    }, 2000);
    try {
      // every attacker holds a connection of the server's own (not only a place in its listen backlog)
      await waitForFiles(server.pid, SLOWLORIS + IDLE);
      const times = [];
      for (let i = 0; i < 5; i++) times.push(await answerTime(server));
      const stillOpen = [...slow, ...idle].filter((c) => c.isOpen()).length;
      assert.ok(stillOpen >= 0.95 * (SLOWLORIS + IDLE),
                `the attack held while we measured: ${stillOpen} of ${SLOWLORIS + IDLE} open (opened in ${opened} ms)`);
      assert.ok(Math.max(...times) < ANSWER_MS, `answered in ${times.join(', ')} ms`);
      console.log(`# answered in ${times.join(', ')} ms with ${stillOpen} attackers open; ` +
                  `server RSS ${(rss(server.pid) / 1048576).toFixed(1)} MB`);
      // the request deadline (10 s by default) closes every trickling connection
      const lasted = await Promise.race([Promise.all(slow.map((c) => c.closed)),
                                         new Promise((r) => setTimeout(() => r(null), 20000))]);
      assert.ok(lasted, `slowloris connections still open after 20 s: ${slow.filter((c) => c.isOpen()).length}`);
      assert.ok(Math.min(...lasted) >= 8000, `a trickling connection was closed early: ${Math.min(...lasted)} ms`);
    } finally {
      clearInterval(trickle);
      for (const c of [...slow, ...idle]) c.sock.destroy();
    }
  });
});

// Waits until the server holds at least n sockets.
async function waitForFiles(pid, n) {
  const end = Date.now() + 15000;
  let have = 0;
  while (Date.now() < end) {
    have = readdirSync(`/proc/${pid}/fd`).length;
    if (have >= n) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`the server accepted only ${have} of ${n} connections`);
}

// One body for every upload: 500 buffers of 1 MB filled in this process would
// keep its event loop from even connecting the last clients within the
// server's --request-timeout on a busy machine (those were cut before their
// headers came, and counted as lost 401s).
const UPLOAD_BODY = Buffer.alloc(UPLOAD_BYTES, 0x20);

// One upload without the key: headers, then 1 MB of body; resolves the status line (or what ended the
// connection without one: the error's code, or 'closed').
function upload(port, localAddress) {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host: '127.0.0.1', localAddress });
    let got = '';
    sock.on('error', (e) => resolve(got.split('\r\n')[0] || `error ${e.code}`));
    sock.on('data', (d) => { got += d; });
    sock.on('close', () => resolve(got.split('\r\n')[0] || 'closed'));
    sock.on('connect', () => {
      sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
                 `Content-Length: ${UPLOAD_BYTES}\r\nConnection: close\r\n\r\n`);
      sock.end(UPLOAD_BODY);
    });
  });
}

serverSuite('starvation: unauthenticated uploads', ['--api-key', 'sesame'], (s) => {
  s.test(`${UPLOADS} unauthenticated 1 MB uploads at once keep the server under 100 MB`, async (server, t) => {
    if (skip) return t.skip(skip);
    const before = rss(server.pid);
    const t0 = Date.now();
    let peak = before;
    const sampler = setInterval(() => { peak = Math.max(peak, rss(server.pid)); }, 20);
    let statuses;
    try {
      statuses = await Promise.all(Array.from({ length: UPLOADS }, (_, i) => upload(server.port, address(i))));
    } finally {
      clearInterval(sampler);
    }
    peak = Math.max(peak, rss(server.pid));
    const counts = {};
    for (const st of statuses) counts[st] = (counts[st] || 0) + 1;
    const mb = (b) => `${(b / 1048576).toFixed(1)} MB`;
    // printed before the checks, so that a failure shows both
    console.log(`# ${JSON.stringify(counts)}; RSS ${mb(before)} before, ${mb(peak)} at the peak` +
                `${SANITIZED ? ' (ASan)' : ''}; ${Date.now() - t0} ms`);
    assert.equal(counts['HTTP/1.1 401 Unauthorized'], UPLOADS, JSON.stringify(counts));
    if (SANITIZED) assert.ok(peak - before < RSS_GROWTH_LIMIT, `RSS grew by ${mb(peak - before)} under ASan`);
    else assert.ok(peak < RSS_LIMIT, `RSS peaked at ${mb(peak)}`);
  });
});
