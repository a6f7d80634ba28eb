// The web page at / in a real browser: Debian's chromium driven by
// playwright-core (which downloads no browser of its own). Without chromium
// the tests are skipped with a message; scripts/install-deps installs it.
//
//   TKV_CHROMIUM           the browser (default /usr/bin/chromium)
//   TKV_WEBUI_SCREENSHOT   a path: save a screenshot of the page there
//                          (docs/webui.png is made this way)
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, it } from 'node:test';
import { get, post, serverSuite, startServer, stopAndCheck, tokenize, waitFor } from '../lib/server.mjs';

const CHROMIUM = process.env.TKV_CHROMIUM || '/usr/bin/chromium';
let chromium = null;
let missing = null;
if (!existsSync(CHROMIUM)) {
  missing = `no browser at ${CHROMIUM}: install Debian's chromium (scripts/install-deps does) or set TKV_CHROMIUM`;
} else {
  try {
    ({ chromium } = await import('playwright-core'));
  } catch (e) {
    missing = `cannot load playwright-core (${e.message}): run 'npm ci --prefix tests/e2e'`;
  }
}

const SYSTEM = 'You are a friendly storyteller.';
const FIRST = 'Tell me about a cat.';
const SECOND = 'What did the cat do next?';
const MAX_TOKENS = 24;
// stories260K at temperature 0 runs past 2000 tokens after this, so only the stop button ends it early
const LONG = 'Tell me a long story.';
const LONG_TOKENS = 2000;
// the API calls the page is checked against run in a namespace of their own: they share nothing with the
// page's requests (greedy text does not depend on what is reused) and leave the tree the page shows alone
const ORACLE = { temperature: 0, max_tokens: MAX_TOKENS, cache_salt: 'oracle' };

async function launch() {
  // root (CI containers) cannot use chromium's sandbox
  // (and a container's small /dev/shm would crash it)
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}

/** A page that records console errors and uncaught exceptions. */
async function openPage(browser, url, viewport = { width: 1200, height: 820 }) {
  const page = await browser.newPage({ viewport });
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await page.goto(url);
  return { page, problems };
}

/** Wait until no reply is streaming and every reply has its usage line. */
async function settled(page) {
  await page.waitForFunction(() => {
    const send = document.querySelector('[data-testid=send]');
    const usage = [...document.querySelectorAll('.msg.assistant .usage')];
    return !send.disabled && usage.every((u) => u.textContent !== '…');
  }, null, { timeout: 60000 });
}

async function sendMessage(page, text, how = 'enter') {
  await page.fill('[data-testid=prompt-input]', text);
  if (how === 'enter') await page.press('[data-testid=prompt-input]', 'Enter');
  else await page.click('[data-testid=send]');
}

async function lastReply(page) {
  return page.locator('[data-testid=reply]').last().textContent();
}

if (missing) {
  describe('web page', () => {
    it('runs in chromium', (t) => t.skip(missing));
  });
} else {
  serverSuite('web page in chromium', [], (s) => {
    s.test('chat, cache view and stop, without a JavaScript error', async (server, t) => {
      const browser = await launch();
      t.after(() => browser.close());
      const { page, problems } = await openPage(browser, `${server.url}/`);
      const chats = [];
      page.on('request', (r) => {
        if (r.url().endsWith('/v1/chat/completions')) chats.push(JSON.parse(r.postData()));
      });
      assert.equal(await page.title(), 'tokenkv');
      await page.click('summary'); // the settings
      await page.fill('#system-prompt', SYSTEM);
      await page.fill('#temperature', '0');
      await page.fill('#max-tokens', String(MAX_TOKENS));

      // a first turn, sent with Enter, streamed: the same text as the API's for the same request
      await sendMessage(page, FIRST, 'enter');
      await settled(page);
      const reply1 = await lastReply(page);
      const messages1 = [{ role: 'system', content: SYSTEM }, { role: 'user', content: FIRST }];
      assert.equal(chats.length, 1);
      assert.deepEqual(chats[0], { messages: messages1, stream: true, stream_options: { include_usage: true },
                                   temperature: 0, max_tokens: MAX_TOKENS });
      const api1 = await post(server, '/v1/chat/completions', { messages: messages1, ...ORACLE });
      assert.equal(api1.status, 200, api1.body);
      assert.ok(api1.json.choices[0].message.content.length > 0);
      assert.equal(reply1, api1.json.choices[0].message.content);

      // a second turn (the send button) reuses the first turn's cells
      await sendMessage(page, SECOND, 'button');
      await settled(page);
      assert.equal(await page.locator('[data-testid=reply]').count(), 2);
      const messages2 = [...messages1, { role: 'assistant', content: reply1 }, { role: 'user', content: SECOND }];
      assert.deepEqual(chats[1].messages, messages2);
      const firstPrompt = (await post(server, '/apply-template', { messages: messages1 }, server.auth)).json.prompt;
      const firstLen = (await tokenize(server, firstPrompt)).length;
      const cached = Number(await page.textContent('[data-testid=cached-tokens]'));
      assert.ok(cached >= firstLen - 1, `the second turn reused ${cached} tokens; the first turn's prompt is ${firstLen}`);
      const api2 = await post(server, '/v1/chat/completions', { messages: messages2, ...ORACLE });
      assert.equal(await lastReply(page), api2.json.choices[0].message.content);

      // the totals follow the cache (nothing runs now, so it stays put; the page polls every second): cells
      // used as /v1/cache counts them, and a drawn node per node of the tree (the default namespace's)
      const view = (await get(server, '/v1/cache')).json;
      await page.waitForFunction(([used, nodes]) =>
        document.querySelector('[data-testid=cache-cells]').textContent === String(used) &&
        document.querySelectorAll('[data-testid=cache-tree] rect.node').length === nodes,
      [view.cells.used, view.tree.length], { timeout: 10000 });
      assert.ok(view.tree.length > 0);
      // the conversation's path marked, a node's text on click
      const tree = page.getByTestId('cache-tree');
      await page.waitForFunction(() => document.querySelectorAll('[data-testid=cache-tree] rect.on-path').length > 0,
                                 null, { timeout: 10000 });
      const onPath = tree.locator('g:has(rect.on-path)').first();
      const id = Number(await onPath.getAttribute('data-node'));
      await onPath.click();
      await page.waitForFunction(() => document.querySelector('#node-detail pre') !== null, null, { timeout: 10000 });
      const node = (await get(server, '/v1/cache?detail=1')).json.tree.find((n) => n.id === id);
      assert.equal(node.depth, 0, 'the conversation\'s path starts at a root');
      assert.equal(await page.textContent('#node-detail pre'), node.text + (node.text_truncated ? ' …' : ''));

      // a long reply, stopped: streaming ends, the server cancels it (499, far fewer tokens) and stays healthy
      await page.click('#new-chat');
      assert.equal(await page.locator('[data-testid=reply]').count(), 0);
      await page.fill('#max-tokens', String(LONG_TOKENS));
      // the stop button is clicked by the page itself, in the microtask that follows the first text of the reply:
      // a check from here takes a round trip to the browser, and on a busy machine the 2000 tokens of
      // stories260K streamed to their end within it (a CI failure); the page shows a text only while busy
      await page.evaluate(() => {
        window.stopClicked = null;
        const observer = new MutationObserver(() => {
          const r = [...document.querySelectorAll('[data-testid=reply]')].pop();
          if (!r || r.textContent.length === 0) return;
          observer.disconnect();
          const stop = document.querySelector('[data-testid=stop]');
          window.stopClicked = !stop.disabled;
          if (!stop.disabled) stop.click();
        });
        observer.observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
      });
      await sendMessage(page, LONG);
      await page.waitForFunction(() => window.stopClicked !== null, null, { timeout: 30000 });
      const clicked = await page.evaluate(() => window.stopClicked);
      assert.equal(clicked, true, 'the stop button is enabled while the reply streams');
      await settled(page);
      assert.equal(await page.isEnabled('[data-testid=stop]'), false);
      assert.equal(await page.locator('.msg.assistant').last().getAttribute('class'), 'msg assistant stopped');
      await waitFor(() => /POST \/v1\/chat\/completions 499 .*generated=\d+/.test(server.log()),
                    'the stopped request\'s 499 log line', 10000);
      const generated = Number(/POST \/v1\/chat\/completions 499 .*generated=(\d+)/.exec(server.log())[1]);
      assert.ok(generated < LONG_TOKENS, `the stopped reply generated ${generated} of ${LONG_TOKENS} tokens`);
      await waitFor(async () => (await get(server, '/v1/cache?check=1')).json.sequences.length === 0,
                    'the stopped request to leave its sequence', 10000);
      assert.equal((await get(server, '/v1/cache?check=1')).json.check, 'ok');
      assert.equal((await get(server, '/health')).status, 200);
      // and the page goes on: a new message gets a reply
      await page.fill('#max-tokens', '8');
      await sendMessage(page, FIRST);
      await settled(page);
      assert.ok((await lastReply(page)).length > 0);
      assert.deepEqual(problems, []);
      if (process.env.TKV_WEBUI_SCREENSHOT) {
        await page.waitForTimeout(1500); // a poll of the cache after the last reply
        await page.screenshot({ path: process.env.TKV_WEBUI_SCREENSHOT });
      }
    });

    s.test('a narrow screen: one column, nothing wider than the screen, keyboard focus visible', async (server, t) => {
      const browser = await launch();
      t.after(() => browser.close());
      const { page, problems } = await openPage(browser, `${server.url}/`, { width: 375, height: 700 });
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `the page is ${overflow}px wider than a 375px screen`);
      const chat = await page.locator('section.chat').boundingBox();
      const cache = await page.locator('section.cache').boundingBox();
      assert.ok(cache.y >= chat.y + chat.height, 'the cache pane comes below the chat on a narrow screen');
      // Tab reaches the message box, and focus shows
      await page.focus('[data-testid=prompt-input]');
      const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
      assert.notEqual(outline, 'none');
      for (const id of ['send', 'stop']) {
        assert.equal(await page.getByTestId(id).evaluate((e) => e.tagName), 'BUTTON');
      }
      // Shift+Enter is a new line, not a send
      await page.fill('[data-testid=prompt-input]', 'one');
      await page.press('[data-testid=prompt-input]', 'Shift+Enter');
      await page.keyboard.type('two');
      assert.equal(await page.inputValue('[data-testid=prompt-input]'), 'one\ntwo');
      assert.equal(await page.locator('.msg').count(), 0);
      assert.deepEqual(problems, []);
    });
  });

  describe('web page with --api-key', () => {
    it('is served without the key, asks for it and then uses it', async (t) => {
      const server = await startServer(['--api-key', 'web-secret']);
      t.after(() => stopAndCheck(server));
      const page0 = await fetch(`${server.url}/`);
      assert.equal(page0.status, 200);
      assert.match(page0.headers.get('content-type'), /^text\/html/);
      assert.equal((await fetch(`${server.url}/app.js`)).status, 200);
      assert.equal((await fetch(`${server.url}/v1/cache`)).status, 401);
      const browser = await launch();
      t.after(() => browser.close());
      const { page, problems } = await openPage(browser, `${server.url}/`);
      await page.waitForSelector('#key-form:not([hidden])');
      await page.fill('#key-input', 'wrong');
      await page.press('#key-input', 'Enter');
      await page.waitForFunction(() => document.querySelector('#key-error').textContent.includes('refused'));
      await page.fill('#key-input', 'web-secret');
      await page.click('#key-form button');
      await page.waitForSelector('#key-form', { state: 'hidden' });
      await page.waitForFunction(() => document.querySelector('#model').textContent.includes('stories260K'));
      assert.equal(await page.evaluate(() => sessionStorage.getItem('tokenkv-api-key')), 'web-secret');
      await page.click('summary');
      await page.fill('#max-tokens', '8');
      await sendMessage(page, FIRST);
      await settled(page);
      assert.ok((await lastReply(page)).length > 0);
      // the only errors are the browser's notes on the 401s that made the page ask
      assert.deepEqual(problems.filter((p) => !/status of 401/.test(p)), []);
      assert.ok(problems.length > 0, 'the first calls, without a key, were refused');
    });
  });
}

describe('web page, served', () => {
  it('/ and its assets with their types; --no-webui turns it off', async (t) => {
    const on = await startServer([]);
    t.after(() => stopAndCheck(on));
    for (const [path, type] of [['/', /^text\/html/], ['/app.js', /^text\/javascript/], ['/style.css', /^text\/css/]]) {
      const r = await fetch(on.url + path);
      assert.equal(r.status, 200, path);
      assert.match(r.headers.get('content-type'), type, path);
      assert.match(r.headers.get('content-security-policy'), /default-src 'self'/);
      assert.ok((await r.text()).length > 100);
    }
    const html = await (await fetch(`${on.url}/`)).text();
    assert.ok(!/https?:\/\//.test(html.replace(/http:\/\/www\.w3\.org\/[^"]*/g, '')), 'the page loads nothing from elsewhere');
    assert.equal((await fetch(`${on.url}/nope.js`)).status, 404);
    // the page's files are routes of the table: another method is a 405 naming GET
    const wrong = await post(on, '/index.html', {});
    assert.equal(wrong.status, 405);
    assert.match(wrong.json.error.message, /use GET/);
    const off = await startServer(['--no-webui']);
    t.after(() => stopAndCheck(off));
    const r = await get(off, '/');
    assert.equal(r.status, 404);
    assert.equal(r.json.error.code, 'not_found');
    assert.equal((await get(off, '/app.js')).status, 404);
    assert.equal((await post(off, '/index.html', {})).status, 404);
  });
});
