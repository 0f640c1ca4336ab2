// Drives a specstack server started with --draft D --spec-decode through the
// official `openai` npm client: greedy text with speculation (streamed and
// whole, completions and chat) equals the plain server's text, a request that
// turns speculation off gives the same text with nothing drafted,
// usage.speculative is present and consistent, and sampled n > 1 requests
// finish. Usage: node openai_specdecode_client.mjs BASE_URL MODEL EXPECTED_GREEDY_TEXT
// EXPECTED_CHAT_JSON (the greedy texts of a server without a draft; the chat
// one JSON-encoded).
import { createRequire } from 'node:module';
import path from 'node:path';
import { check, failures } from './checks.mjs';

const require = createRequire(import.meta.url);
const { default: OpenAI } = require(path.join(process.env.SPECSTACK_NPM_DIR, 'node_modules', 'openai'));

const [baseURL, model, expected, expectedChatJson] = process.argv.slice(2);
const expectedChat = JSON.parse(expectedChatJson);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
function checkSpeculative(usage, what, { drafted }) {
  const s = usage?.speculative;
  check(s && Number.isInteger(s.draft_tokens) && Number.isInteger(s.accepted_tokens), `${what}: usage.speculative present (${JSON.stringify(s)})`);
  if (!s) return;
  check(drafted ? s.draft_tokens > 0 : s.draft_tokens === 0, `${what}: draft_tokens ${drafted ? '> 0' : '== 0'}`);
  check(s.accepted_tokens >= 0 && s.accepted_tokens <= s.draft_tokens, `${what}: 0 <= accepted_tokens <= draft_tokens`);
  const rate = s.draft_tokens > 0 ? s.accepted_tokens / s.draft_tokens : 0;
  check(Math.abs(s.acceptance_rate - rate) < 1e-9, `${what}: acceptance_rate = accepted / drafted`);
}

const prompt = 'Once upon a time';
async function streamCompletion(extra) {
  let text = '';
  let usage = null;
  const stream = await client.completions.create({ model, prompt, max_tokens: 32, temperature: 0, stream: true, stream_options: { include_usage: true }, ...extra });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices ?? []) text += choice.text ?? '';
  }
  return { text, usage };
}

// Streaming, greedy: speculation on (the server's default) and off per request.
const on = await streamCompletion({});
check(on.text === expected, `streamed greedy text with speculation equals the plain server's (${JSON.stringify(on.text)})`);
checkSpeculative(on.usage, 'streamed, speculating', { drafted: true });
const off = await streamCompletion({ speculative_decoding: false });
check(off.text === expected, 'streamed greedy text with "speculative_decoding": false equals it too');
checkSpeculative(off.usage, 'streamed, speculation off', { drafted: false });

// Whole response.
const whole = await client.completions.create({ model, prompt, max_tokens: 32, temperature: 0 });
check(whole.choices[0].text === expected, 'non-streamed greedy text with speculation equals the plain server\'s');
checkSpeculative(whole.usage, 'non-streamed', { drafted: true });

// Chat, streamed, greedy.
const messages = [{ role: 'user', content: 'Tell me a story about a dog.' }];
let chatText = '';
let chatUsage = null;
const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true } });
for await (const chunk of chat) {
  if (chunk.usage) chatUsage = chunk.usage;
  chatText += chunk.choices[0]?.delta?.content ?? '';
}
check(chatText === expectedChat, `streamed chat with speculation equals the plain server's (${JSON.stringify(chatText)})`);
checkSpeculative(chatUsage, 'streamed chat', { drafted: true });

// Sampled, n = 3, with logprobs: every choice speculates and finishes.
const multi = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0.8, seed: 11, n: 3, logprobs: 1 });
check(multi.choices.length === 3 && multi.choices.every((c) => c.finish_reason === 'length' && c.logprobs.tokens.length === 12), 'sampled n=3 with logprobs: 3 choices of 12 tokens');
check(multi.usage.completion_tokens === 36, 'sampled n=3: usage.completion_tokens 36');
checkSpeculative(multi.usage, 'sampled n=3', { drafted: true });

// 16 concurrent sampled streams, half cancelled early.
let finished = 0;
await Promise.all(Array.from({ length: 16 }, async (_, i) => {
  const controller = new AbortController();
  try {
    const s = await client.completions.create({ model, prompt: `Story ${i}:`, max_tokens: 40, temperature: 0.8, stream: true }, { signal: controller.signal });
    let seen = 0;
    for await (const chunk of s) {
      if (i % 2 === 0 && ++seen === 3) controller.abort();
      if (chunk.choices?.[0]?.finish_reason) finished++;
    }
  } catch (error) {
    if (!controller.signal.aborted) throw error;
  }
}));
check(finished >= 8, `16 concurrent sampled streams: the ${finished} uncancelled ones finished`);

if (failures() > 0) {
  console.error(`${failures()} check(s) failed`);
  process.exit(1);
}
console.log('openai specdecode client: all checks passed');
