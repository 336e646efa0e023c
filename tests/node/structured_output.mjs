// structured_output.mjs: response_format through the official `openai` npm client, answers
// checked with the `ajv` JSON Schema validator (draft 2020-12) and `ajv-formats` (format checks).
//
//   node tests/node/structured_output.mjs PORT MODEL_ID
//
// Run from the repository root (tests/test_grammar_server.c does it, against the tiny random
// model); the packages are installed by scripts/setup into .cache/node.  For bounded schemas
// at temperature 1 and several seeds: every answer parses, validates and finishes with "stop",
// and the same request streamed gives the same content.  json_object gives an object; a schema
// with an unsupported keyword is a 400 naming it.  Prints one line per check, "PASS" at the end;
// exits non-zero on the first failure.
import { createRequire } from 'node:module';
import path from 'node:path';

const port = process.argv[2];
const modelId = process.argv[3];
if (!port || !modelId) {
  console.error('usage: node tests/node/structured_output.mjs PORT MODEL_ID');
  process.exit(2);
}
let OpenAI, Ajv2020, addFormats;
try {
  const require = createRequire(path.resolve('.cache/node/package.json'));
  OpenAI = require('openai').OpenAI;
  Ajv2020 = require('ajv/dist/2020').default;
  addFormats = require('ajv-formats').default;
} catch (e) {
  console.error('the openai, ajv or ajv-formats npm package is missing: run scripts/setup');
  process.exit(3);
}

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);  // date, time, date-time, uuid, email checked, not ignored

function check(cond, what) {
  if (!cond) {
    console.error(`FAIL ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

const schemas = {
  item: {
    type: 'object',
    properties: {
      label: { type: 'string', minLength: 1, maxLength: 12 },
      count: { type: 'integer', minimum: 0, maximum: 1000 },
      colour: { enum: ['red', 'green', 'blue', 'light grey'] },
      box: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 999 }, minItems: 4, maxItems: 4 },
      visible: { type: 'boolean' },
    },
    required: ['label', 'count', 'box'],
    additionalProperties: false,
  },
  scene: {
    type: 'object',
    properties: {
      setting: { anyOf: [{ type: 'string', maxLength: 10 }, { type: 'null' }] },
      objects: {
        type: 'array',
        maxItems: 3,
        items: { $ref: '#/$defs/obj' },
      },
      pair: { type: 'array', prefixItems: [{ type: 'integer', minimum: -5, maximum: 5 }, { const: 'x' }], items: false },
    },
    required: ['setting', 'objects', 'pair'],
    additionalProperties: false,
    $defs: {
      obj: {
        type: 'object',
        properties: { name: { type: 'string', maxLength: 6 }, n: { type: ['integer', 'null'], minimum: 1, maximum: 9 } },
        required: ['name', 'n'],
        additionalProperties: false,
      },
    },
  },
  formats: {
    type: 'object',
    properties: {
      code: { type: 'string', pattern: '^[A-Z]{2}-\\d{3}(?:\\.[a-z]{1,4})?$' },
      word: { type: 'string', pattern: '^(?:red|dark (?:blue|grey))[!?]{0,2}$' },
      day: { type: 'string', format: 'date' },
      at: { type: 'string', format: 'date-time' },
      id: { type: 'string', format: 'uuid' },
      mail: { type: 'string', format: 'email' },
    },
    required: ['code', 'word', 'day', 'at', 'id', 'mail'],
    additionalProperties: false,
  },
};

const messages = [{ role: 'user', content: 'Describe the picture as JSON.' }];

for (const [name, schema] of Object.entries(schemas)) {
  const validate = ajv.compile(schema);
  for (const seed of [1, 2, 3, 4]) {
    const req = {
      model: modelId, messages, max_tokens: name === 'formats' ? 2000 : 400, seed, temperature: 1, top_p: 1, top_k: 0,
      response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
    };
    const a = await client.chat.completions.create(req);
    const text = a.choices[0].message.content;
    let value;
    try { value = JSON.parse(text); } catch (e) { value = undefined; }
    check(value !== undefined, `${name} seed ${seed} parses: ${text}`);
    check(validate(value), `${name} seed ${seed} validates${validate.errors ? ': ' + JSON.stringify(validate.errors) : ''}`);
    check(a.choices[0].finish_reason === 'stop', `${name} seed ${seed} finishes with stop`);
    const stream = await client.chat.completions.create({ ...req, stream: true });
    let streamed = '', finish = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (c && c.delta && c.delta.content) streamed += c.delta.content;
      if (c && c.finish_reason) finish = c.finish_reason;
    }
    check(streamed === text && finish === 'stop', `${name} seed ${seed} streamed equals non-streamed`);
  }
}

const obj = await client.chat.completions.create({
  model: modelId, messages, max_tokens: 600, seed: 5, temperature: 1, response_format: { type: 'json_object' },
});
if (obj.choices[0].finish_reason === 'stop') {
  const v = JSON.parse(obj.choices[0].message.content);
  check(typeof v === 'object' && v !== null && !Array.isArray(v), 'json_object gives an object');
} else {
  check(obj.choices[0].message.content.startsWith('{'), 'json_object (cut at max_tokens) starts an object');
}

let err = null;
try {
  await client.chat.completions.create({
    model: modelId, messages, max_tokens: 5,
    response_format: { type: 'json_schema', json_schema: { name: 'bad', schema: { type: 'string', pattern: '^a(?=b)' } } },
  });
} catch (e) {
  err = e;
}
check(err && err.status === 400 && /"pattern"/.test(err.message) && /lookahead/.test(err.message),
  `a pattern outside the subset is a 400 naming it (${err && err.message})`);
console.log('PASS');
