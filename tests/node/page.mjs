// page.mjs: the page of `iris serve` in headless Chromium (Debian's, /usr/bin/chromium) driven by
// the playwright-core npm package (scripts/setup installs both).
//
//   node tests/node/page.mjs PORT KEY IMAGE CAPTION SCREENSHOT
//
// PORT: a server of the demo model started with --api-key KEY; CAPTION: what `iris caption IMAGE`
// answers (greedy).  Run from the repository root by tests/test_page.c.  One server, one tab, in
// the order a user meets them; one line per check, "PASS" at the end, non-zero exit on the first
// failure:
//  1. the page loads (no key needed for it) and, the API answering 401, shows an error and the key
//     form, not a blank page; a wrong key is refused with an error; the right one lists the model
//     and is kept in sessionStorage;
//  2. IMAGE set on #image and "Describe this image in one sentence." sent: #answer streams the
//     CLI's caption, the statistics show time to first token and tokens/s;
//  3. a follow-up question goes with the whole conversation (3 messages) into a new #answer;
//  4. a grounding answer (served through page.route, since the demo model does not ground)
//     draws .box / .point elements where its 0-1000 coordinates say, with their labels;
//  5. a screenshot of that (SCREENSHOT), and no script errors;
//  6. a phone-sized viewport has no horizontal scrolling and the controls are in view.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const [port, key, image, caption, shot] = process.argv.slice(2);
if (!shot) {
  console.error('usage: node tests/node/page.mjs PORT KEY IMAGE CAPTION SCREENSHOT');
  process.exit(2);
}
let chromium;
try {
  chromium = createRequire(path.resolve('.cache/node/package.json'))('playwright-core').chromium;
} catch (e) {
  console.error('the playwright-core npm package is missing: run scripts/setup');
  process.exit(3);
}

function check(cond, what) {
  if (!cond) throw new Error('FAIL ' + what);
  console.log('ok ' + what);
}
const near = (a, b, tol) => Math.abs(a - b) <= tol;

async function captionAndFollowUp(page) {
  await page.setInputFiles('#image', image);
  await page.waitForFunction(() => document.querySelector('#stage-img').naturalWidth > 0, null, { timeout: 5000 });
  await page.click('#settings summary');
  await page.fill('#temperature', '0');
  await page.fill('#prompt', 'Describe this image in one sentence.');
  await page.click('#send');
  await page.waitForFunction(() => !document.querySelector('#send').disabled &&
    document.querySelector('#answer').textContent.length > 0, null, { timeout: 15000 });
  const answer = (await page.textContent('#answer')).trim();
  check(answer === caption, `#answer is the CLI's caption ("${answer}" vs "${caption}")`);
  const stats = await page.textContent('#stats');
  check(/first token \d+ ms/.test(stats) && /tok\/s/.test(stats), `statistics shown ("${stats}")`);

  const bodies = [];
  page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) bodies.push(r.postDataJSON()); });
  await page.fill('#prompt', 'How many squares are there?');
  await page.press('#prompt', 'Enter');
  await page.waitForFunction(() => !document.querySelector('#send').disabled &&
    document.querySelectorAll('.msg.assistant').length === 2, null, { timeout: 15000 });
  const sent = bodies[0];
  check(sent && sent.messages.length === 3 && sent.messages[1].content === caption && sent.stream === true,
        'the follow-up carries the conversation (user, assistant, user), streamed');
  check(Array.isArray(sent.messages[0].content) && sent.messages[0].content[0].type === 'image_url',
        'the first turn keeps its image');
  check(await page.locator('#answer').count() === 1 && (await page.textContent('#answer')).trim().length > 0,
        'one #answer: the latest');
}

async function grounding(page) {
  const answer = '```json\n[\n  {"bbox_2d": [100, 200, 500, 800], "label": "blue square"},\n' +
                 '  {"point_2d": [750, 250], "label": "dot"}\n]\n```';
  const pieces = answer.match(/[\s\S]{1,7}/g); // split mid-JSON, as tokens arrive
  const chunk = (delta) => 'data: ' + JSON.stringify({ id: 'x', object: 'chat.completion.chunk',
    choices: [{ index: 0, delta, finish_reason: null }] }) + '\n\n';
  const sse = chunk({ role: 'assistant', content: '' }) + pieces.map((p) => chunk({ content: p })).join('') +
    'data: ' + JSON.stringify({ choices: [], usage: { prompt_tokens: 9, completion_tokens: pieces.length } }) +
    '\n\ndata: [DONE]\n\n';
  let asked = null;
  await page.route('**/v1/chat/completions', (route) => {
    asked = route.request().postDataJSON();
    route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body: sse });
  });
  await page.fill('#prompt', 'blue square');
  await page.click('button[data-find]');
  await page.waitForFunction(() => !document.querySelector('#send').disabled && document.querySelector('.box'));
  await page.unroute('**/v1/chat/completions');
  const q = asked.messages[asked.messages.length - 1].content;
  check(q === 'Locate every instance that belongs to the following categories: "blue square". ' +
        'Report bbox coordinates in JSON format.', 'Find objects asks with Qwen\'s grounding prompt');
  check(await page.locator('.box').count() === 1 && await page.locator('.point').count() === 1,
        'one box and one point drawn');
  const img = await page.locator('#stage-img').boundingBox();
  const box = await page.locator('.box').boundingBox();
  const pt = await page.locator('.point').boundingBox();
  const rel = (v, o, s) => (v - o) / s * 1000;
  const got = [rel(box.x, img.x, img.width), rel(box.y, img.y, img.height),
               rel(box.x + box.width, img.x, img.width), rel(box.y + box.height, img.y, img.height)];
  const tol = 1000 * 3 / Math.min(img.width, img.height); // within the 2 px border and rounding
  check(near(got[0], 100, tol) && near(got[1], 200, tol) && near(got[2], 500, tol) && near(got[3], 800, tol),
        `the box is where the answer says: [${got.map((v) => v.toFixed(1))}] vs [100,200,500,800] ` +
        `(image ${img.width}x${img.height} px)`);
  const cx = rel(pt.x + pt.width / 2, img.x, img.width), cy = rel(pt.y + pt.height / 2, img.y, img.height);
  check(near(cx, 750, tol) && near(cy, 250, tol), `the point is at [${cx.toFixed(1)}, ${cy.toFixed(1)}]`);
  check((await page.locator('.box .box-label').textContent()) === 'blue square', 'the box has its label');
  fs.mkdirSync(path.dirname(shot), { recursive: true });
  await page.screenshot({ path: shot, fullPage: true });
  check(fs.statSync(shot).size > 1000, `screenshot saved to ${shot}`);
}

async function apiKey(page) {
  await page.goto(`http://127.0.0.1:${port}/`);
  for (const id of ['#image', '#prompt', '#send', '#model'])
    check(await page.locator(id).count() === 1, `the page has ${id}`);
  await page.waitForSelector('#error:not([hidden])', { timeout: 5000 });
  check(/API key/.test(await page.textContent('#error')) && await page.locator('#keyform').isVisible(),
        'a server with a key: the page shows an error and asks for the key');
  check((await page.textContent('body')).includes('Send'), 'the page is not blank');
  await page.fill('#apikey', 'wrong-' + key);
  await page.click('#keyform button');
  await page.waitForFunction(() => /refused/.test(document.querySelector('#error').textContent), null,
                             { timeout: 5000 });
  check(await page.locator('#error').isVisible(), 'a wrong key: the error says it was refused');
  await page.fill('#apikey', key);
  await page.click('#keyform button');
  await page.waitForFunction(() => document.querySelector('#model').options.length > 0, null, { timeout: 5000 });
  check(await page.locator('#error').isHidden() && await page.locator('#keyform').isHidden(),
        'the right key: the models are listed, the error gone');
  check(await page.evaluate(() => sessionStorage.getItem('iris-api-key')) === key, 'the key kept in sessionStorage');
}

async function phone(page) {
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`http://127.0.0.1:${port}/`);
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  check(wide <= 390, `a phone-sized screen scrolls no sideways (${wide} px wide)`);
  const send = await page.locator('#send').boundingBox();
  check(send && send.x >= 0 && send.x + send.width <= 390, 'the Send button is on screen');
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
                                        args: ['--no-sandbox', '--disable-gpu'] });
let rc = 0;
try {
  const page = await (await browser.newContext({ viewport: { width: 1100, height: 800 } })).newPage();
  page.setDefaultTimeout(8000);
  const problems = [];
  page.on('pageerror', (e) => problems.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
  await apiKey(page);
  problems.length = 0; /* Chromium logs the 401s of the key checks as console errors */
  await captionAndFollowUp(page);
  await grounding(page);
  check(problems.length === 0, `no script errors on the page (${problems.join('; ')})`);
  await phone(page);
  await page.screenshot({ path: shot.replace(/\.png$/, '-phone.png'), fullPage: true });
  console.log('PASS');
} catch (e) {
  console.error(e.message);
  rc = 1;
} finally {
  await browser.close();
}
process.exit(rc);
