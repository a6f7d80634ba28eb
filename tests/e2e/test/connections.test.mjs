// Connection limits: one client address cannot hold more than
// --max-connections-per-client connections (the next is closed at once,
// and serving resumes when it lets go), and a connection that stays silent
// for --idle-timeout seconds is closed.
import assert from 'node:assert/strict';
import net from 'node:net';
import { post, serverSuite } from '../lib/server.mjs';

// A raw connection: resolves {sock, closed} where closed resolves with the ms it stayed open.
function open(server) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const sock = net.connect(server.port, '127.0.0.1');
    const closed = new Promise((r) => sock.on('close', () => r(Date.now() - t0)));
    sock.on('error', () => {});
    sock.on('connect', () => resolve({ sock, closed }));
    setTimeout(() => reject(new Error('connect timed out')), 5000);
  });
}

serverSuite('connection limits', ['--max-connections-per-client', '3', '--idle-timeout', '2'], (s) => {
  s.test('a client holding its limit gets its next connection closed; letting go serves again', async (server) => {
    const held = await Promise.all([open(server), open(server), open(server)]);
    const extra = await open(server);
    const lasted = await Promise.race([extra.closed, new Promise((r) => setTimeout(() => r(-1), 1500))]);
    assert.ok(lasted >= 0 && lasted < 1500, `the fourth connection stayed open (${lasted})`);
    for (const h of held) h.sock.destroy();
    await Promise.all(held.map((h) => h.closed));
    const r = await post(server, '/v1/completions', { prompt: 'Once', max_tokens: 2 });
    assert.equal(r.status, 200, r.body);
  });

  s.test('a silent connection is closed after the idle timeout', async (server) => {
    const c = await open(server);
    const lasted = await Promise.race([c.closed, new Promise((r) => setTimeout(() => r(-1), 8000))]);
    assert.ok(lasted >= 1500 && lasted < 8000, `closed after ${lasted} ms`);
  });
});
