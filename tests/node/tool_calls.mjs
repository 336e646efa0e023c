// tool_calls.mjs: tools and tool_choice through the official `openai` npm client, call
// arguments checked with the `ajv` JSON Schema validator (draft 2020-12).
//
//   node tests/node/tool_calls.mjs PORT MODEL_ID
//
// Run from the repository root (tests/test_tools_server.c does it, against the tiny random
// model); both packages are installed by scripts/setup into .cache/node.  At temperature 1 and
// several seeds: with tool_choice "required" or a named function every answer has tool_calls
// whose names are the tools' (the named one) and whose arguments parse and validate against
// the tool's parameters, content null, finish_reason "tool_calls"; the same request streamed
// assembles (delta.tool_calls by index) to the same calls, and its content never holds the
// <tool_call> markup; parallel_tool_calls false gives one call; a history with the calls and a
// tool result goes back in; "none" gives text; "auto" gives text or valid calls; an unknown
// tool in tool_choice and a parameters schema iris cannot honour are 400s naming them.  Prints
// one line per check, "PASS" at the end; exits non-zero on the first failure.
import { createRequire } from 'node:module';
import path from 'node:path';

const port = process.argv[2];
const modelId = process.argv[3];
if (!port || !modelId) {
  console.error('usage: node tests/node/tool_calls.mjs PORT MODEL_ID');
  process.exit(2);
}
let OpenAI, Ajv2020;
try {
  const require = createRequire(path.resolve('.cache/node/package.json'));
  OpenAI = require('openai').OpenAI;
  Ajv2020 = require('ajv/dist/2020').default;
} catch (e) {
  console.error('the openai or ajv npm package is missing: run scripts/setup');
  process.exit(3);
}

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const ajv = new Ajv2020({ strict: false });

function check(cond, what) {
  if (!cond) {
    console.error(`FAIL ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city — «météo» 天气.',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', minLength: 1, maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } },
        required: ['city'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'search_images',
      description: 'Find pictures.',
      parameters: {
        type: 'object',
        properties: {
          query: { type: 'string', maxLength: 10 },
          filters: {
            type: 'object',
            properties: {
              min_width: { type: 'integer', minimum: 0, maximum: 5000 },
              colors: { type: 'array', items: { enum: ['red', 'green', 'blue'] }, maxItems: 3 },
            },
            required: ['min_width'],
            additionalProperties: false,
          },
        },
        required: ['query', 'filters'],
        additionalProperties: false,
      },
    },
  },
  { type: 'function', function: { name: 'now', description: 'The time now.' } },
];
const validators = {};
for (const t of tools)
  validators[t.function.name] = ajv.compile(t.function.parameters || { type: 'object', properties: {}, additionalProperties: false });

const messages = [{ role: 'user', content: 'What is the weather in Paris, and find me pictures of it.' }];
const base = { model: modelId, messages, tools, max_tokens: 600, temperature: 1, top_p: 1, top_k: 0 };

function checkCalls(calls, what, only) {
  check(Array.isArray(calls) && calls.length >= 1, `${what}: has tool_calls`);
  for (const c of calls) {
    check(typeof c.id === 'string' && c.id.startsWith('call_') && c.type === 'function', `${what}: id ${c.id}, type`);
    const name = c.function.name;
    check(validators[name] !== undefined && (!only || name === only), `${what}: name ${name}`);
    let args;
    try { args = JSON.parse(c.function.arguments); } catch (e) { args = undefined; }
    check(args !== undefined, `${what}: ${name} arguments parse: ${c.function.arguments}`);
    const v = validators[name];
    check(v(args), `${what}: ${name} arguments validate${v.errors ? ': ' + JSON.stringify(v.errors) : ''}`);
  }
}

async function streamed(req) {
  const stream = await client.chat.completions.create({ ...req, stream: true });
  let content = '', finish = null;
  const calls = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta && c.delta.content) content += c.delta.content;
    for (const d of (c.delta && c.delta.tool_calls) || []) {
      if (!calls[d.index]) {
        check(d.id && d.function && d.function.name, 'a call\'s first delta has its id and name');
        calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } };
      }
      if (d.function && d.function.arguments) calls[d.index].function.arguments += d.function.arguments;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { content, calls, finish };
}

const same = (a, b) => JSON.stringify(a.map((c) => [c.function.name, c.function.arguments])) ===
  JSON.stringify(b.map((c) => [c.function.name, c.function.arguments]));

const choices = [
  ['required', 'required', null],
  ['named', { type: 'function', function: { name: 'search_images' } }, 'search_images'],
];
for (const [label, tool_choice, only] of choices) {
  for (const seed of [1, 2, 3]) {
    for (const parallel of [false, true]) {
      const what = `${label} seed ${seed} parallel ${parallel}`;
      const req = { ...base, seed, tool_choice, parallel_tool_calls: parallel };
      const a = await client.chat.completions.create(req);
      const ch = a.choices[0];
      if (parallel && ch.finish_reason === 'length') {
        // several calls may run past max_tokens: the complete ones still validate
        check(ch.message.tool_calls.length >= 2, `${what}: cut only after the first call`);
        checkCalls(ch.message.tool_calls.slice(0, -1), what, only);
        continue;
      }
      check(ch.finish_reason === 'tool_calls', `${what}: finishes with tool_calls (${ch.finish_reason})`);
      check(ch.message.content === null, `${what}: content null`);
      checkCalls(ch.message.tool_calls, what, only);
      if (!parallel) check(ch.message.tool_calls.length === 1, `${what}: one call`);
      const s = await streamed(req);
      check(s.finish === 'tool_calls' && s.content === '' && same(s.calls, ch.message.tool_calls),
        `${what}: streamed assembles to the same calls`);
    }
  }
}

// A round trip: the calls and a result go back in the history.
const first = await client.chat.completions.create({ ...base, seed: 7, tool_choice: 'required', parallel_tool_calls: false });
const call = first.choices[0].message.tool_calls[0];
const history = [
  ...messages,
  { role: 'assistant', content: null, tool_calls: first.choices[0].message.tool_calls },
  { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 21, sky: 'clear' }) },
];
for (const tool_choice of ['auto', 'required']) {
  const r = await client.chat.completions.create({ ...base, messages: history, seed: 8, tool_choice, parallel_tool_calls: false });
  const ch = r.choices[0];
  if (ch.message.tool_calls) {
    checkCalls(ch.message.tool_calls, `round trip (${tool_choice})`, null);
    check(ch.finish_reason === 'tool_calls', `round trip (${tool_choice}): finishes with tool_calls`);
  } else {
    check(tool_choice === 'auto' && typeof ch.message.content === 'string', `round trip (${tool_choice}): text`);
  }
  check(r.usage.prompt_tokens > 0, `round trip (${tool_choice}) answered`);
}

// none: text, whatever the model writes; auto: text or valid calls, no markup in content.
for (const seed of [1, 2]) {
  const n = await client.chat.completions.create({ ...base, seed, max_tokens: 40, tool_choice: 'none' });
  check(n.choices[0].message.tool_calls === undefined && typeof n.choices[0].message.content === 'string' &&
    n.choices[0].finish_reason !== 'tool_calls', `none seed ${seed}: text`);
  const a = await client.chat.completions.create({ ...base, seed, max_tokens: 200 });
  const m = a.choices[0].message;
  if (m.tool_calls) checkCalls(m.tool_calls, `auto seed ${seed}`, null);
  check(!(m.content || '').includes('<tool_call>'), `auto seed ${seed}: no markup in content`);
  const s = await streamed({ ...base, seed, max_tokens: 200 });
  check(!s.content.includes('<tool_call>') && s.content === (m.content || '') && same(s.calls, m.tool_calls || []),
    `auto seed ${seed}: streamed equals non-streamed`);
}

async function refused(req, re, what) {
  let err = null;
  try { await client.chat.completions.create(req); } catch (e) { err = e; }
  check(err && err.status === 400 && re.test(err.message), `${what} (${err && err.message})`);
}
await refused({ ...base, tool_choice: { type: 'function', function: { name: 'fly' } } }, /"fly"/,
  'an unknown tool in tool_choice is a 400 naming it');
await refused({
  ...base, tool_choice: 'required',
  tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', minProperties: 1 } } }],
}, /minProperties/, 'a parameters schema iris cannot honour is a 400 naming the keyword');
await refused({ ...base, n: 2 }, /'n'/, 'tools with n > 1 is a 400');
console.log('PASS');
