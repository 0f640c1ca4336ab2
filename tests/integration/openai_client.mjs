// Drives a running specstack server with the official `openai` npm client:
// non-streaming and streaming, completions and chat, then 64 concurrent
// streams of which half are cancelled at random points. Exits non-zero on any
// mismatch. Usage: node openai_client.mjs BASE_URL MODEL EXPECTED_GREEDY_TEXT
import { createRequire } from 'node:module';
import path from 'node:path';
import { check, failures } from './checks.mjs';

const require = createRequire(import.meta.url);
const depsDir = process.env.SPECSTACK_NPM_DIR;
const { default: OpenAI, APIUserAbortError } = require(path.join(depsDir, 'node_modules', 'openai'));

const [baseURL, model, expected] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });

const prompt = 'Once upon a time';
// Completions, non-streaming: greedy text equals `specstack generate`.
const completion = await client.completions.create({ model, prompt, max_tokens: 32, temperature: 0 });
check(completion.choices[0].text === expected, `completions text matches generate (${JSON.stringify(completion.choices[0].text)})`);
check(completion.choices[0].finish_reason === 'length', 'completions finish_reason length');
check(completion.usage.completion_tokens === 32, 'completions usage.completion_tokens');
check(completion.usage.prompt_tokens > 0 && completion.usage.total_tokens === completion.usage.prompt_tokens + 32, 'completions usage totals');

// Completions, streaming, with usage in the last chunk.
let streamed = '';
let usage = null;
let finish = null;
const stream = await client.completions.create({ model, prompt, max_tokens: 32, temperature: 0, stream: true, stream_options: { include_usage: true } });
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices ?? []) {
    streamed += choice.text ?? '';
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
check(streamed === expected, 'streamed completions text matches generate');
check(finish === 'length', 'streamed completions finish_reason');
check(usage && usage.completion_tokens === 32, 'stream_options.include_usage reports usage');

// Prefix caching: the same prompt again reports cached tokens (the prompt is short: at least 0).
const again = await client.completions.create({ model, prompt: 'Once upon a time there was a little girl named Lily. She loved to play with her toys and her friends in the park every day.', max_tokens: 8, temperature: 0 });
const warm = await client.completions.create({ model, prompt: 'Once upon a time there was a little girl named Lily. She loved to play with her toys and her friends in the park every day.', max_tokens: 8, temperature: 0 });
check(warm.choices[0].text === again.choices[0].text, 'prefix-cached request gives identical greedy text');
check((warm.usage.prompt_tokens_details?.cached_tokens ?? 0) > 0, `cached_tokens reported (${warm.usage.prompt_tokens_details?.cached_tokens})`);

// Chat, non-streaming and streaming.
const messages = [{ role: 'user', content: 'Tell me a story about a dog.' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
check(chat.choices[0].message.role === 'assistant', 'chat message role');
check(typeof chat.choices[0].message.content === 'string' && chat.choices[0].message.content.length > 0, 'chat content');
let chatStreamed = '';
const chatStream = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stream: true });
for await (const chunk of chatStream) chatStreamed += chunk.choices[0]?.delta?.content ?? '';
check(chatStreamed === chat.choices[0].message.content, 'streamed chat equals non-streamed chat');

// n > 1 with logprobs.
const multi = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 1.0, seed: 7, n: 3, logprobs: 2 });
check(multi.choices.length === 3, 'n=3 returns 3 choices');
check(multi.choices.every((c) => c.logprobs && c.logprobs.tokens.length === 6 && c.logprobs.top_logprobs.length === 6), 'logprobs per token');

// 64 concurrent streams; cancel half of them at random points.
let completed = 0;
let cancelled = 0;
const tasks = [];
for (let i = 0; i < 64; i++) {
  tasks.push((async () => {
    const controller = new AbortController();
    const cancelAfter = i % 2 === 0 ? Math.floor(Math.random() * 6) : -1;
    let seen = 0;
    try {
      const s = await client.completions.create({ model, prompt: `Story number ${i}:`, max_tokens: 20 + (i % 17), temperature: 0.8, stream: true }, { signal: controller.signal });
      let done = false;
      for await (const chunk of s) {
        if (chunk.choices?.[0]?.finish_reason) done = true;
        if (cancelAfter >= 0 && seen++ === cancelAfter) controller.abort();
      }
      // An aborted stream may end quietly or throw, depending on where the abort lands.
      if (done && !controller.signal.aborted) completed++;
      else if (controller.signal.aborted) cancelled++;
    } catch (error) {
      if (controller.signal.aborted && (error instanceof APIUserAbortError || error.name === 'AbortError')) cancelled++;
      else throw error;
    }
  })());
}
await Promise.all(tasks);
check(completed + cancelled === 64, `64 streams: ${completed} completed, ${cancelled} cancelled`);
check(completed >= 32 && cancelled > 0, 'every uncancelled stream completed, the cancelled ones ended');

if (failures() > 0) {
  console.error(`${failures()} check(s) failed`);
  process.exit(1);
}
console.log('openai client: all checks passed');
