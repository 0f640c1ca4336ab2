// Structured outputs through the official `openai` npm client, validated by
// an independent JSON-schema validator (ajv): chat and completions with
// response_format json_schema (non-streaming, streaming, n > 1), json_object,
// the `grammar` extension in extra_body, and the 400s for a bad schema, an
// unsupported keyword, a grammar syntax error and both at once. The model has
// random weights, so only the constraint makes the output JSON.
// Usage: node openai_structured_client.mjs BASE_URL MODEL
import { createRequire } from 'node:module';
import path from 'node:path';
import { check, failures } from './checks.mjs';

const require = createRequire(import.meta.url);
const depsDir = process.env.SPECSTACK_NPM_DIR;
const { default: OpenAI } = require(path.join(depsDir, 'node_modules', 'openai'));
let Ajv;
try {
  Ajv = require(path.join(depsDir, 'node_modules', 'ajv'));
} catch (e) {
  console.error(`FAIL: ajv is not installed under ${depsDir} (run scripts/setup.sh)`);
  process.exit(1);
}
const ajv = new Ajv({ strict: false });

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });

const schemas = {
  person: {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 8 },
      age: { type: 'integer' },
      tags: { type: 'array', items: { enum: ['red', 'green'] }, maxItems: 2 },
      ok: { type: 'boolean' },
    },
    required: ['name', 'age'],
    additionalProperties: false,
  },
  items: {
    type: 'array',
    items: { type: 'object', properties: { id: { type: 'integer' }, kind: { enum: ['a', 'b'] } }, required: ['id', 'kind'], additionalProperties: false },
    minItems: 1,
    maxItems: 3,
  },
  choice: { anyOf: [{ type: 'null' }, { type: 'string', maxLength: 4 }, { type: 'number' }] },
};

function validates(name, text, what) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    check(false, `${what}: output is JSON (${JSON.stringify(text)})`);
    return;
  }
  const ok = ajv.validate(schemas[name], doc);
  check(ok, `${what}: ajv validates against ${name}${ok ? '' : ' ' + ajv.errorsText() + ' ' + text}`);
}

const format = (name) => ({ type: 'json_schema', json_schema: { name, strict: true, schema: schemas[name] } });
const messages = [{ role: 'user', content: 'Give me JSON.' }];
let seed = 1;
for (const name of Object.keys(schemas)) {
  // Chat, non-streaming, greedy and sampled with n = 2.
  const greedy = await client.chat.completions.create({ model, messages, response_format: format(name), temperature: 0, max_tokens: 300 });
  check(greedy.choices[0].finish_reason === 'stop', `chat ${name} greedy finish_reason stop`);
  validates(name, greedy.choices[0].message.content, `chat ${name} greedy`);
  const sampled = await client.chat.completions.create({ model, messages, response_format: format(name), temperature: 1, n: 2, seed: seed++, max_tokens: 300 });
  for (const choice of sampled.choices) validates(name, choice.message.content, `chat ${name} sampled choice ${choice.index}`);
  // Chat, streaming: the concatenated deltas validate.
  for (let i = 0; i < 3; i++) {
    const stream = await client.chat.completions.create({ model, messages, response_format: format(name), temperature: 0.8, seed: seed++, max_tokens: 300, stream: true });
    let text = '';
    let finish = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      text += choice.delta.content ?? '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    check(finish === 'stop', `chat ${name} stream ${i} finish_reason stop`);
    validates(name, text, `chat ${name} stream ${i}`);
  }
  // Completions.
  const completion = await client.completions.create({ model, prompt: 'JSON:', response_format: format(name), temperature: 0.7, seed: seed++, max_tokens: 300 });
  validates(name, completion.choices[0].text, `completions ${name}`);
}

// json_object: any object.
const object = await client.chat.completions.create({ model, messages, response_format: { type: 'json_object' }, temperature: 0, max_tokens: 400 });
if (object.choices[0].finish_reason === 'stop') {
  const doc = JSON.parse(object.choices[0].message.content);
  check(doc !== null && typeof doc === 'object' && !Array.isArray(doc), 'json_object: an object');
} else {
  // Random weights may write one long string; what was written must still be an object's start.
  check(object.choices[0].message.content.startsWith('{'), 'json_object: starts an object');
}

// The grammar extension (extra_body, as llama-server's "grammar").
const yesno = await client.completions.create({ model, prompt: 'Answer:', max_tokens: 10, temperature: 1, seed: 5, extra_body: { grammar: 'root ::= ("yes" | "no") "!"' } });
check(['yes!', 'no!'].includes(yesno.choices[0].text), `grammar: ${JSON.stringify(yesno.choices[0].text)}`);

// Errors: 400 with param.
async function expect400(body, param, needle, what) {
  try {
    await client.chat.completions.create({ model, messages, max_tokens: 5, ...body });
    check(false, `${what}: expected a 400`);
  } catch (e) {
    check(e.status === 400, `${what}: status ${e.status}`);
    check(e.error?.param === param, `${what}: param ${e.error?.param}`);
    check((e.error?.message ?? '').includes(needle), `${what}: message ${JSON.stringify(e.error?.message)}`);
  }
}
await expect400({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'number', minimum: 1.5 } } } }, 'response_format', "'minimum'", 'unsupported: a fractional bound on a number');
await expect400({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'frog' } } } }, 'response_format', 'frog', 'invalid schema');
await expect400({ extra_body: { grammar: 'root ::= "a' } }, 'grammar', 'line 1', 'grammar syntax error');
await expect400({ response_format: { type: 'json_object' }, extra_body: { grammar: 'root ::= "a"' } }, 'grammar', 'cannot be combined', 'both at once');

process.exit(failures() > 0 ? 1 : 0);
