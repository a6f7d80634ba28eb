// Hardening, round 3 (issue 38), the shared store (--kv-store) against a
// hostile Redis: a fake one on a loopback socket, written here, that speaks
// just enough RESP. A reply that trickles in a byte at a time ends at the
// lookup's deadline (--kv-store-timeout-ms is per lookup, not per read) and
// three such lookups trip the breaker; a reply announcing a 100M-element
// array or a 2 GB string is refused before it is allocated. Every request is
// answered all the same.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import { it } from 'node:test';
import { get, post, startServer, stopAndCheck, tail } from '../lib/server.mjs';

// ~110 tokens on stories260K: one full 64-token block beyond what a fresh cache holds
const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park '
  + 'with her friends. One day, she saw a big red ball under a tall green tree. She ran to the tree, '
  + 'picked up the ball and threw it to her friend Tom. Tom laughed and kicked the ball back to her. ';

/**
 * A fake Redis on 127.0.0.1: answer(argv, socket) writes the reply of each command (argv: strings).
 * Resolves {port, commands (the names seen), close()}.
 */
async function fakeRedis(answer) {
  const commands = [];
  const sockets = new Set();
  const srv = net.createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => {});
    let buf = Buffer.alloc(0);
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) { // one whole command "*N\r\n" then N of "$LEN\r\nBYTES\r\n", or wait for more
        let at = 0;
        const line = () => {
          const e = buf.indexOf('\r\n', at);
          if (e < 0) return null;
          const s = buf.subarray(at, e).toString();
          at = e + 2;
          return s;
        };
        const head = line();
        if (head === null) return;
        const n = Number(head.slice(1));
        const argv = [];
        for (let i = 0; i < n; i++) {
          const l = line();
          if (l === null) return;
          const len = Number(l.slice(1));
          if (buf.length < at + len + 2) return;
          argv.push(buf.subarray(at, at + len).toString('latin1'));
          at += len + 2;
        }
        buf = buf.subarray(at);
        commands.push(argv[0].toUpperCase());
        answer(argv, sock);
      }
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return {
    port: srv.address().port,
    commands,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((r) => srv.close(r));
    },
  };
}

// p, or a failure naming what did not answer within ms (a hang guard, far above the expected time)
function within(ms, what, p) {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, guard]).finally(() => clearTimeout(timer));
}

async function metric(server, name) {
  const r = await get(server, '/metrics');
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(r.body);
  return m ? Number(m[1]) : NaN;
}

async function peakRss(server) {
  const m = /VmHWM:\s+(\d+) kB/.exec(await readFile(`/proc/${server.pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

/** A server on the fake, and n completions of distinct long prompts (each one lookup), each within a guard. */
async function against(t, answer, n, timeoutMs = 200) {
  const redis = await fakeRedis(answer);
  t.after(() => redis.close());
  const server = await startServer(['--kv-store', `redis://127.0.0.1:${redis.port}`, '--kv-store-timeout-ms', String(timeoutMs)]);
  t.after(() => server.stop());
  try {
    for (let i = 0; i < n; i++) {
      const r = await within(30000, `completion ${i}`,
        post(server, '/v1/completions', { prompt: `${i} ${STORY}`, max_tokens: 2, temperature: 0 }));
      assert.equal(r.status, 200, r.body);
    }
  } catch (e) {
    e.message = `${e.message}\n--- server ---\n${tail(server.log())}`;
    throw e;
  }
  return { redis, server };
}

it('a trickling reply ends at the lookup deadline; three in a row trip the breaker', async (t) => {
  const timers = new Set();
  t.after(() => { for (const x of timers) clearInterval(x); });
  const { redis, server } = await against(t, (argv, sock) => {
    if (argv[0] === 'EXISTS') sock.write(':1\r\n');
    else if (argv[0] === 'SET') sock.write('+OK\r\n');
    else if (argv[0] === 'GET') { // a 4000-byte value at a byte per 10 ms: 40 s, each read well within 200 ms
      sock.write('$4000\r\n');
      let sent = 0;
      const x = setInterval(() => {
        if (sock.destroyed || ++sent > 4000) return clearInterval(x);
        sock.write('x');
      }, 10);
      timers.add(x);
    } else sock.write('-ERR unknown\r\n');
  }, 4);
  assert.ok(redis.commands.includes('GET'), `the lookups got to their GETs: ${redis.commands.join(' ')}`);
  const store = (await get(server, '/metrics')).body.split('\n').filter((l) => l.startsWith('tokenkv_store')).join('\n');
  assert.ok(await metric(server, 'tokenkv_store_timeouts_total') >= 3, store);
  assert.ok(await metric(server, 'tokenkv_store_breaker_trips_total') >= 1, store);
  assert.equal(await metric(server, 'tokenkv_store_hits_total'), 0);
  await stopAndCheck(server);
});

it('a reply announcing a 100M-element array is refused before allocation', async (t) => {
  const { server } = await against(t, (argv, sock) => {
    sock.write(argv[0] === 'EXISTS' ? '*100000000\r\n:1\r\n' : '+OK\r\n');
  }, 1);
  assert.ok(await metric(server, 'tokenkv_store_replies_refused_total') >= 1);
  const peak = await peakRss(server);
  assert.ok(peak < 384 << 20, `peak RSS ${peak} bytes`);
  await stopAndCheck(server);
});

it('a value announced at 2 GB and streamed fast is refused past the largest value, not buffered whole',
  async (t) => {
    const chunk = Buffer.alloc(1 << 16, 0x61);
    const { server } = await against(t, (argv, sock) => {
      if (argv[0] === 'EXISTS') return sock.write(':1\r\n');
      if (argv[0] !== 'GET') return sock.write('+OK\r\n');
      sock.write('$2000000000\r\n');
      let sent = 0; // up to 1 GiB, as fast as the socket takes it, until the server hangs up
      const more = () => {
        while (!sock.destroyed && sent < 1 << 30) {
          sent += chunk.length;
          if (!sock.write(chunk)) return sock.once('drain', more);
        }
      };
      more();
    }, 1, 5000); // time enough to stream far past the largest value on a busy machine

    assert.ok(await metric(server, 'tokenkv_store_replies_refused_total') >= 1);
    const peak = await peakRss(server);
    assert.ok(peak < 384 << 20, `peak RSS ${peak} bytes`);
    await stopAndCheck(server);
  });
