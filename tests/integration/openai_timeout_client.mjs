// The official `openai` npm client against request timeouts: a stream cut by
// its `timeout` yields its tokens and a "timeout" finish, then raises the
// server's error event as an APIError; a non-streamed one is a 504 APIError;
// usage.timing does not bother the client. Exits non-zero on any mismatch.
// Usage: node openai_timeout_client.mjs BASE_URL MODEL
import { createRequire } from 'node:module';
import path from 'node:path';
import { check, failures } from './checks.mjs';

const require = createRequire(import.meta.url);
const { default: OpenAI, APIError } = require(path.join(process.env.SPECSTACK_NPM_DIR, 'node_modules', 'openai'));

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const prompt = 'Once upon a time';
const long = { model, prompt, max_tokens: 480, ignore_eos: true };

// Streamed: tokens, then finish_reason "timeout", then the error event.
let text = '';
let finish = null;
let raised = null;
try {
  const stream = await client.completions.create({ ...long, stream: true, timeout: 0.1 });
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
} catch (error) {
  raised = error;
}
check(text.length > 0, `tokens streamed before the timeout (${text.length} chars)`);
check(finish === 'timeout', `the last chunk's finish_reason is timeout (${finish})`);
check(raised instanceof APIError && raised.error?.type === 'timeout', `the error event raises an APIError of type timeout (${raised})`);

// Non-streamed: a 504 APIError.
try {
  await client.completions.create({ ...long, timeout: 0.05 });
  check(false, 'a non-streamed timeout raises');
} catch (error) {
  check(error instanceof APIError && error.status === 504 && error.error?.type === 'timeout', `non-streamed timeout: 504 APIError (${error})`);
}

// A normal request: usage.timing rides along.
const done = await client.completions.create({ model, prompt, max_tokens: 8 });
const timing = done.usage?.timing;
check(done.choices[0].finish_reason === 'length' && timing && timing.ttft_ms >= timing.queue_ms && timing.total_ms >= timing.ttft_ms,
      `usage.timing ${JSON.stringify(timing)}`);
process.exit(failures() === 0 ? 0 : 1);
