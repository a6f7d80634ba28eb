// fair-probe.mjs — issue 38's fairness measure: four n=16, max_tokens 2043 completions from
// 127.0.0.1, then (1.5 s later) a 16-token probe from 127.0.0.2; prints the probe's status and time.
//   tokenkv serve -m ../shared/models/stories260K.gguf --port 8080 &  node bench/fair-probe.mjs 8080
import http from 'node:http';
const port = Number(process.argv[2]);
function post(body, localAddress) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const t0 = Date.now();
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', localAddress,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      let out = '';
      res.on('data', (d) => { out += d; });
      res.on('end', () => resolve({ status: res.statusCode, ms: Date.now() - t0, out }));
    });
    req.on('error', reject);
    req.end(data);
  });
}
const big = [];
for (let i = 0; i < 4; i++)
  big.push(post({ prompt: `Once upon a time ${i}`, n: 16, max_tokens: 2043, ignore_eos: true }, '127.0.0.1'));
await new Promise((r) => setTimeout(r, 1500));
const p = await post({ prompt: 'The cat', max_tokens: 16 }, '127.0.0.2');
console.log(`probe: status ${p.status}, ${p.ms} ms`);
process.exit(0);
