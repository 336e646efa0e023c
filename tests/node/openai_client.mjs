// openai_client.mjs: the official `openai` npm client against `iris serve`.
//
//   node tests/node/openai_client.mjs PORT MODEL_ID
//
// Run from the repository root (tests/test_server.c does it); the package is
// installed by scripts/setup into .cache/node.  Checks what users' scripts do:
// a chat with a data-URL image, the same request streamed (equal text with
// the same seed, usage in the last chunk), a text completion, the model
// list, and errors surfacing as the client's typed exceptions.  Prints one
// line per check and exits non-zero on the first failure.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const port = process.argv[2];
const modelId = process.argv[3];
if (!port || !modelId) {
  console.error('usage: node tests/node/openai_client.mjs PORT MODEL_ID');
  process.exit(2);
}
let OpenAI;
try {
  const require = createRequire(path.resolve('.cache/node/package.json'));
  OpenAI = require('openai').OpenAI;
} catch (e) {
  console.error('the openai npm package is missing: run scripts/setup (npm install --prefix .cache/node openai)');
  process.exit(3);
}

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 20000 });

function check(cond, what) {
  if (!cond) {
    console.error(`FAIL ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

const png = readFileSync('tests/fixtures/tiny/images/a.png').toString('base64');
const messages = [{
  role: 'user',
  content: [
    { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
    { type: 'text', text: 'Describe this image.' },
  ],
}];

const models = await client.models.list();
check(models.data.some((m) => m.id === modelId), 'models.list has the served model');

const chat = await client.chat.completions.create({ model: modelId, messages, max_tokens: 6, seed: 11, temperature: 0.9 });
const text = chat.choices[0].message.content;
check(typeof text === 'string' && chat.choices[0].message.role === 'assistant', 'chat with a data-URL image');
check(chat.usage && chat.usage.completion_tokens === 6 && chat.usage.prompt_tokens > 10, 'usage in the answer');
check(chat.choices[0].finish_reason === 'length', 'finish_reason length');

const stream = await client.chat.completions.create({
  model: modelId, messages, max_tokens: 6, seed: 11, temperature: 0.9, stream: true,
  stream_options: { include_usage: true },
});
let streamed = '';
let usage = null;
let finish = null;
let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta && c.delta.content) streamed += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
check(chunks >= 3, `streamed ${chunks} chunks`);
check(streamed === text, 'streamed text equals the non-streamed text (same seed)');
check(finish === 'length' && usage && usage.completion_tokens === 6, 'stream ends with finish_reason and usage');

const comp = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 4, seed: 3 });
check(typeof comp.choices[0].text === 'string' && comp.usage.completion_tokens === 4, 'text completion');

try {
  await client.chat.completions.create({ model: modelId, messages, temperature: 7 });
  check(false, 'temperature 7 refused');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature',
    `temperature 7 -> BadRequestError (${e.status} ${e.param})`);
}
try {
  await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] });
  check(false, 'unknown model refused');
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.status === 404, `unknown model -> NotFoundError (${e.status})`);
}
try {
  await client.chat.completions.create({
    model: modelId,
    messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,aGVsbG8=' } }] }],
  });
  check(false, 'a non-image refused');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.param === 'messages[0].content[0].image_url',
    `a non-image -> BadRequestError (${e.param})`);
}
console.log('PASS');
