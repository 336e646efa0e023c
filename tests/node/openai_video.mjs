// openai_video.mjs: the official `openai` npm client sends a video_url part to `iris serve`.
//
//   node tests/node/openai_video.mjs PORT MODEL_ID
//
// A chat with a data-URL video (the lossless fixture clip c_odd.mkv) and
// mm_processor_kwargs passed through the client's extra body fields, the same
// streamed (equal text, greedy), and a broken video surfacing as the client's
// BadRequestError naming the part.  Prints one line per check; exits non-zero
// on the first failure.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const port = process.argv[2];
const modelId = process.argv[3];
if (!port || !modelId) {
  console.error('usage: node tests/node/openai_video.mjs PORT MODEL_ID');
  process.exit(2);
}
let OpenAI;
try {
  const require = createRequire(path.resolve('.cache/node/package.json'));
  OpenAI = require('openai').OpenAI;
} catch (e) {
  console.error('the openai npm package is missing: run scripts/setup');
  process.exit(3);
}
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
function check(cond, what) {
  if (!cond) {
    console.error(`FAIL ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}
const clip = readFileSync('tests/fixtures/video/c_odd.mkv').toString('base64');
const messages = [{
  role: 'user',
  content: [
    { type: 'video_url', video_url: { url: `data:video/x-matroska;base64,${clip}` } },
    { type: 'text', text: 'What happens in this video?' },
  ],
}];
const body = { model: modelId, messages, max_tokens: 8, temperature: 0, mm_processor_kwargs: { fps: 2, max_frames: 16 } };
const r = await client.chat.completions.create(body);
check(r.choices[0].message.content.length > 0, 'chat with a video_url part answers');
check(r.usage.prompt_tokens > 45, `the prompt holds the video's tokens (${r.usage.prompt_tokens})`);
const s = await client.chat.completions.create({ ...body, stream: true });
let text = '';
for await (const ch of s) text += ch.choices[0]?.delta?.content ?? '';
check(text === r.choices[0].message.content, 'streamed equals non-streamed');
try {
  await client.chat.completions.create({
    model: modelId, max_tokens: 4,
    messages: [{ role: 'user', content: [{ type: 'video_url', video_url: { url: 'data:video/mp4;base64,AAAAGGZ0eXBpc29t' } }] }],
  });
  check(false, 'a broken video is refused');
} catch (e) {
  check(e.status === 400 && /video_url/.test(e.param ?? e.error?.param ?? ''), `a broken video is a 400 naming its part (${e.status} ${e.param})`);
}
console.log('PASS');
