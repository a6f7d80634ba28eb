// HTTP framing and early answers, with raw sockets (RFC 9112): conflicting
// Content-Length headers, Content-Length with Transfer-Encoding (the
// request-smuggling shape) and unknown transfer codings get one 400 and the
// connection closed, never a hang and never an answer to a request hidden in
// a body; a wrong API key, a POST that is not JSON and a body announced over
// --max-body are answered from the headers, before any of the body is sent;
// HEAD and OPTIONS are answered.
import assert from 'node:assert/strict';
import net from 'node:net';
import { serverSuite } from '../lib/server.mjs';

const KEY = 'framing-key';

// Send raw bytes; resolve what came back by the time the server closed the
// connection (or 3 s passed: {timedOut: true}).
function raw(server, bytes) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(server.port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => {
      sock.destroy();
      resolve({ text: got, timedOut: true });
    }, 3000);
    sock.on('data', (d) => { got += d.toString('latin1'); });
    sock.on('close', () => {
      clearTimeout(timer);
      resolve({ text: got, timedOut: false });
    });
    sock.on('error', (e) => (e.code === 'ECONNRESET' ? null : reject(e)));
    sock.write(bytes);
  });
}

const statuses = (text) => [...text.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => Number(m[1]));
const head = (lines) => `${lines.join('\r\n')}\r\n\r\n`;
const body = '{"prompt": "Once", "max_tokens": 1}';

serverSuite('HTTP framing', ['--api-key', KEY, '--max-body', '4096'], (s) => {
  s.test('broken framing: one 400, then the connection closes', async (server) => {
    const auth = `Authorization: Bearer ${KEY}`;
    const cases = [
      head(['POST /v1/completions HTTP/1.1', 'Host: x', auth, 'Content-Type: application/json',
            'Content-Length: 5', `Content-Length: ${body.length}`]) + body,
      head(['POST /v1/completions HTTP/1.1', 'Host: x', auth, 'Content-Type: application/json',
            'Transfer-Encoding: gzip']) + 'xxxx',
      // Content-Length with chunked, and a second request after the chunked body's end
      head(['POST /v1/completions HTTP/1.1', 'Host: x', auth, 'Content-Type: application/json', 'Content-Length: 40',
            'Transfer-Encoding: chunked']) + `0\r\n\r\n${head(['GET /v1/models HTTP/1.1', 'Host: x', auth])}`,
    ];
    for (const c of cases) {
      const r = await raw(server, c);
      assert.equal(r.timedOut, false, `the server hung on:\n${c}\ngot:\n${r.text}`);
      assert.deepEqual(statuses(r.text), [400], r.text);
      assert.match(r.text, /"code":"bad_framing"/);
    }
  });

  s.test('decided from the headers: 401, 415, 413, the body read and dropped', async (server) => {
    const post = (extra) => head(['POST /v1/completions HTTP/1.1', 'Host: x', ...extra]);
    const json = 'Content-Type: application/json';
    // a big body with a wrong key or over --max-body: the answer comes whole (no reset), after it
    const big = 'x'.repeat(3000000);
    let r = await raw(server, post(['Authorization: Bearer wrong', json, `Content-Length: ${big.length}`]) + big);
    assert.deepEqual(statuses(r.text), [401], r.text);
    r = await raw(server, post([`Authorization: Bearer ${KEY}`, json, `Content-Length: ${big.length}`]) + big);
    assert.deepEqual(statuses(r.text), [413], r.text);
    for (const type of ['Content-Type: text/plain', 'Content-Type: application/x-www-form-urlencoded', null]) {
      r = await raw(server, post([`Authorization: Bearer ${KEY}`, ...(type ? [type] : []), `Content-Length: ${body.length}`])
        + body);
      assert.deepEqual(statuses(r.text), [415], `${type}: ${r.text}`);
    }
    // JSON with a charset is JSON
    r = await raw(server, post([`Authorization: Bearer ${KEY}`, 'Content-Type: application/json; charset=utf-8',
                                `Content-Length: ${body.length}`, 'Connection: close']) + body);
    assert.deepEqual(statuses(r.text), [200], r.text);
  });

  // Issue 38, items 9 and 11: the answer goes out before the body is read,
  // and the close is graceful: the socket drains what the client still sends.
  s.test('401 and 413 come before the body, and reach a client that reads only after sending it all',
    async (server) => {
      const post = (extra, length) => head(['POST /v1/completions HTTP/1.1', 'Host: x', 'Content-Type: application/json',
                                            ...extra, `Content-Length: ${length}`]);
      const refusals = [[['Authorization: Bearer wrong'], 401], [[`Authorization: Bearer ${KEY}`], 413]];
      // headers and 64 KB of an announced 4 MB: the answer comes while the client has the rest to send
      for (const [extra, status] of refusals) {
        const r = await new Promise((resolve) => {
          const sock = net.connect(server.port, '127.0.0.1');
          let got = '';
          const timer = setTimeout(() => { sock.destroy(); resolve(got); }, 3000);
          sock.on('error', () => {});
          sock.on('data', (d) => {
            got += d.toString('latin1');
            if (/\r\n\r\n[^]*\}$/.test(got)) { clearTimeout(timer); sock.destroy(); resolve(got); }
          });
          sock.write(post(extra, 4 << 20) + ' '.repeat(64 << 10));
        });
        assert.deepEqual(statuses(r), [status], `no answer before the body's end: ${r.slice(0, 300)}`);
      }
      // 8 MB sent before anything is read: a close with the body unread would reset the connection and
      // the client would lose the answer; the drain lets its writes finish and the answer wait for it
      for (const [extra, status] of refusals) {
        const r = await new Promise((resolve) => {
          const sock = net.connect(server.port, '127.0.0.1');
          let got = '', err = null;
          sock.pause();
          sock.on('error', (e) => { err = e.code; });
          sock.on('data', (d) => { got += d.toString('latin1'); });
          sock.on('close', () => resolve({ got, err }));
          sock.write(post(extra, 8 << 20));
          sock.write(Buffer.alloc(8 << 20, 0x20), () => setTimeout(() => sock.resume(), 200));
        });
        assert.deepEqual(statuses(r.got), [status], `${r.err}: ${r.got.slice(0, 300)}`);
        assert.equal(r.err, null);
      }
    });

  s.test('HEAD and OPTIONS', async (server) => {
    let r = await raw(server, head(['HEAD /health HTTP/1.1', 'Host: x', 'Connection: close']));
    assert.deepEqual(statuses(r.text), [200], r.text);
    assert.ok(r.text.endsWith('\r\n\r\n'), 'no body');
    r = await raw(server, head(['HEAD /v1/models HTTP/1.1', 'Host: x', `Authorization: Bearer ${KEY}`, 'Connection: close']));
    assert.deepEqual(statuses(r.text), [200], r.text);
    r = await raw(server, head(['OPTIONS /v1/chat/completions HTTP/1.1', 'Host: x', 'Connection: close']));
    assert.deepEqual(statuses(r.text), [204], r.text);
    assert.match(r.text, /^Allow: GET, HEAD, POST, OPTIONS/m);
  });
});
