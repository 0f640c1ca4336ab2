// Tool calling through the official `openai` npm client against a server
// whose chat template is Qwen3's (Hermes <tool_call> format), on a
// random-weight model: only the tool-call grammar makes its answers calls.
// tool_choice required / named (non-streaming, n > 1, parallel or not),
// streaming tool_call deltas reassembled by the client's stream helper,
// arguments validated by ajv against each function's parameters, a round
// trip (call -> role tool message -> answer), auto and none, and 400s.
// Usage: node openai_tools_client.mjs BASE_URL MODEL
import { createRequire } from 'node:module';
import path from 'node:path';
import { check, failures } from './checks.mjs';

const require = createRequire(import.meta.url);
const depsDir = process.env.SPECSTACK_NPM_DIR;
const { default: OpenAI } = require(path.join(depsDir, 'node_modules', 'openai'));
const Ajv = require(path.join(depsDir, 'node_modules', 'ajv'));
const ajv = new Ajv({ strict: false });

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather of a city',
      strict: true,
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['c', 'f'] } },
        required: ['city'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add',
      strict: true,
      parameters: {
        type: 'object',
        properties: { a: { type: 'integer', minimum: 0, maximum: 99 }, b: { type: 'integer', minimum: -9, maximum: 9 } },
        required: ['a', 'b'],
        additionalProperties: false,
      },
    },
  },
];
const schemaOf = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));
const messages = [{ role: 'user', content: 'What is the weather in Paris, and 2 + 3?' }];

function checkCalls(calls, what, { named, single } = {}) {
  check(Array.isArray(calls) && calls.length >= 1, `${what}: has tool_calls`);
  if (!Array.isArray(calls)) return;
  if (single) check(calls.length === 1, `${what}: exactly one call (${calls.length})`);
  for (const call of calls) {
    check(call.type === 'function' && /^call_[A-Za-z0-9]{24}$/.test(call.id), `${what}: id ${call.id}, type ${call.type}`);
    const name = call.function.name;
    check(name in schemaOf && (!named || name === named), `${what}: function ${name}`);
    let args;
    try {
      args = JSON.parse(call.function.arguments);
    } catch (e) {
      check(false, `${what}: arguments are JSON (${call.function.arguments})`);
      continue;
    }
    const ok = name in schemaOf && ajv.validate(schemaOf[name], args);
    check(ok, `${what}: ajv validates ${call.function.arguments}${ok ? '' : ' ' + ajv.errorsText()}`);
  }
}

// Non-streaming: required (n = 2, parallel), named, parallel_tool_calls false.
let seed = 1;
for (let i = 0; i < 3; i++) {
  const r = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', n: 2, temperature: 1, seed: seed++, max_tokens: 400 });
  for (const choice of r.choices) {
    check(choice.finish_reason === 'tool_calls', `required ${i}.${choice.index}: finish_reason ${choice.finish_reason}`);
    check(choice.message.content === null, `required ${i}.${choice.index}: content null`);
    checkCalls(choice.message.tool_calls, `required ${i}.${choice.index}`);
  }
}
const named = await client.chat.completions.create({ model, messages, tools, tool_choice: { type: 'function', function: { name: 'add' } }, parallel_tool_calls: false, temperature: 0, max_tokens: 300 });
check(named.choices[0].finish_reason === 'tool_calls', `named: finish_reason ${named.choices[0].finish_reason}`);
checkCalls(named.choices[0].message.tool_calls, 'named add, not parallel', { named: 'add', single: true });

// Streaming: the client's stream helper reassembles the tool_call deltas.
for (let i = 0; i < 3; i++) {
  const stream = client.chat.completions.stream({ model, messages, tools, tool_choice: 'required', temperature: 0.9, seed: seed++, max_tokens: 400 });
  let deltas = 0;
  stream.on('chunk', (chunk) => { deltas += chunk.choices[0]?.delta?.tool_calls?.length ?? 0; });
  const final = await stream.finalChatCompletion();
  check(deltas >= 2, `stream ${i}: ${deltas} tool_call deltas`);
  check(final.choices[0].finish_reason === 'tool_calls', `stream ${i}: finish_reason ${final.choices[0].finish_reason}`);
  checkCalls(final.choices[0].message.tool_calls, `stream ${i} (reassembled)`);
}

// Streamed token by token: the same greedy request whole and streamed gives
// the same calls, and the arguments arrive in several fragments.
{
  const request = { model, messages, tools, tool_choice: { type: 'function', function: { name: 'add' } }, temperature: 0, max_tokens: 300 };
  const whole = await client.chat.completions.create(request);
  const stream = client.chat.completions.stream(request);
  let fragments = 0;
  stream.on('chunk', (chunk) => {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) if (d.function?.arguments) fragments++;
  });
  const final = await stream.finalChatCompletion();
  const strip = (calls) => JSON.stringify((calls ?? []).map((c) => [c.function.name, c.function.arguments]));
  check(strip(final.choices[0].message.tool_calls) === strip(whole.choices[0].message.tool_calls),
    `streamed greedy calls equal the whole message's: ${strip(final.choices[0].message.tool_calls)} vs ${strip(whole.choices[0].message.tool_calls)}`);
  check(fragments > (whole.choices[0].message.tool_calls?.length ?? 0), `arguments streamed in ${fragments} fragments`);
}

// Round trip: the call and its result go back; the answer is an ordinary message.
const call = named.choices[0].message.tool_calls[0];
const answer = await client.chat.completions.create({
  model,
  tools,
  tool_choice: 'none',
  max_tokens: 8,
  temperature: 0,
  messages: [...messages, named.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '5' }],
});
check(answer.choices[0].message.role === 'assistant' && typeof answer.choices[0].message.content === 'string', 'round trip: assistant answers after the tool result');
check(answer.choices[0].message.tool_calls === undefined, 'round trip (tool_choice none): no tool_calls');

// auto: free text or calls; a call, once opened, is grammar-constrained, so
// whatever comes back is well formed.
const auto = await client.chat.completions.create({ model, messages, tools, temperature: 0, max_tokens: 40 });
const autoChoice = auto.choices[0];
if (autoChoice.message.tool_calls) checkCalls(autoChoice.message.tool_calls, 'auto');
else check(typeof autoChoice.message.content === 'string' && autoChoice.finish_reason !== 'tool_calls', `auto: text answer (${autoChoice.finish_reason})`);

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
await expect400({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', "'nope'", 'unknown tool_choice name');
await expect400({ tools: [tools[0], tools[0]] }, 'tools', 'declared twice', 'duplicate names');
await expect400({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'frog' } } } } }] }, 'tools', 'frog', 'bad parameters schema');

process.exit(failures() > 0 ? 1 : 0);
