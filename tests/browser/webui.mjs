// The web UI in a real headless browser (Debian's chromium through
// puppeteer-core; nothing downloads a browser). Against a server whose
// model is its own draft (SpecPrefill forced on, speculative decoding on):
// a chat answer streams in and equals the server's greedy answer; the
// SpecPrefill view highlights ceil(kept_tokens / chunk) chunks; the metrics
// page updates; completion and stop work; conversations survive a reload;
// model output with <script> / <img onerror> renders as text. Against a
// server with --api-key: the page asks for the key, refuses a wrong one,
// then works. Usage: node webui.mjs DRAFT_URL KEY_URL API_KEY SCREENSHOT_DIR
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(import.meta.url);
const puppeteer = require(path.join(process.env.SPECSTACK_NPM_DIR, "node_modules", "puppeteer-core"));
const [draftUrl, keyUrl, apiKey, shots] = process.argv.slice(2);
fs.mkdirSync(shots, { recursive: true });

let failures = 0;
function check(ok, what, detail = "") {
  if (ok) console.log(`ok: ${what}`);
  else {
    failures++;
    console.error(`FAIL: ${what}${detail ? `: ${detail}` : ""}`);
  }
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  // Root (CI containers) cannot use chromium's sandbox.
  args: [...(process.getuid?.() === 0 ? ["--no-sandbox"] : []), "--disable-gpu", "--disable-dev-shm-usage"],
});

/** A page that records dialogs, uncaught errors and console errors (CSP violations among them). */
async function openPage(context, url) {
  const page = await context.newPage();
  await page.setViewport({ width: 1280, height: 860 });
  page.problems = [];
  page.dialogs = 0;
  page.on("dialog", async (dialog) => {
    page.dialogs++;
    await dialog.dismiss();
  });
  page.on("pageerror", (error) => page.problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error" && !/status of 401/.test(message.text())) page.problems.push(`console: ${message.text()}`);
  });
  await page.goto(url, { waitUntil: "networkidle0" });
  return page;
}
const setField = (page, id, value) => page.$eval(`#${id}`, (el, v) => { el.value = v; }, value);
const text = (page, selector) => page.$eval(selector, (el) => el.textContent ?? "");
const shot = (page, name) => page.screenshot({ path: path.join(shots, `${name}.png`) });

async function postJson(url, body, key = "") {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
  });
  return response.json();
}

/** Sends a chat message and waits for its answer; returns the answer element's stats line. */
async function sendChat(page, message) {
  const before = await page.$$eval('#messages [data-testid="message-assistant"]', (els) => els.length);
  await page.type("#chat-input", message);
  await page.click("#chat-send");
  await page.waitForFunction(
    (n) => {
      const answers = document.querySelectorAll('#messages [data-testid="message-assistant"]');
      return answers.length > n && answers[answers.length - 1].getAttribute("data-done") === "true";
    },
    { timeout: 30000 },
    before,
  );
  return page.$$eval('#messages [data-testid="message-assistant"] .stats', (els) => els[els.length - 1].textContent ?? "");
}

const MESSAGE = "Tell me a story about a little dog named Max who found a red ball in the big park near his house.";
const SAMPLING = { temperature: 0, max_tokens: 48 };

try {
  // ------------------------------------------------------------ chat
  const page = await openPage(browser, draftUrl);
  check((await text(page, "#model-name")) !== "", "the page loads and names the model", await text(page, "#model-name"));
  await setField(page, "temperature", "0");
  await setField(page, "max_tokens", String(SAMPLING.max_tokens));
  // Every text length the answer passes through: a streamed answer grows in steps.
  await page.evaluate(() => {
    window.__lengths = new Set();
    new MutationObserver(() => {
      const answers = document.querySelectorAll('#messages [data-testid="message-assistant"] .content');
      const last = answers[answers.length - 1];
      if (last) window.__lengths.add(last.textContent.length);
    }).observe(document.getElementById("messages"), { subtree: true, childList: true, characterData: true });
  });
  // The tiny model can finish before the browser's first read, and then the
  // network hands the page the whole stream at once (one render: CI saw this
  // on 2026-12-07). So the page gets the server's stream one SSE event per
  // read, a few ms apart, whatever the network grouped: the check is then
  // about the UI (it renders as events arrive), the event count about the
  // server (it streams the answer in pieces).
  await page.evaluate(() => {
    const realFetch = window.fetch;
    window.__realFetch = realFetch;
    window.__contentEvents = 0;
    window.fetch = async (...args) => {
      const response = await realFetch(...args);
      if (!(response.headers.get("content-type") ?? "").includes("text/event-stream") || !response.body) return response;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      const encoder = new TextEncoder();
      let buffer = "";
      const body = new ReadableStream({
        async pull(controller) {
          for (;;) {
            const end = buffer.indexOf("\n\n");
            if (end >= 0) {
              const event = buffer.slice(0, end + 2);
              buffer = buffer.slice(end + 2);
              if (event.includes('"content"')) window.__contentEvents++;
              await new Promise((resolve) => setTimeout(resolve, 5));
              controller.enqueue(encoder.encode(event));
              return;
            }
            const next = await reader.read();
            if (next.done) {
              if (buffer) controller.enqueue(encoder.encode(buffer));
              controller.close();
              return;
            }
            buffer += decoder.decode(next.value, { stream: true });
          }
        },
        cancel: (reason) => reader.cancel(reason),
      });
      return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
    };
  });
  const stats = await sendChat(page, MESSAGE);
  const streamed = await page.evaluate(() => {
    window.fetch = window.__realFetch;
    return { lengths: [...window.__lengths].filter((n) => n > 0).length, events: window.__contentEvents };
  });
  check(streamed.events >= 2, "the server streams the chat answer in several events", `${streamed.events} content events`);
  check(streamed.lengths >= 2, "the chat answer streams in (grows over several renders)", `${streamed.lengths} distinct lengths`);
  const stored = await page.evaluate(() => JSON.parse(localStorage.getItem("specstack.conversations") ?? "[]"));
  const answer = stored[0]?.messages?.[1]?.content ?? "";
  const body = { messages: [{ role: "user", content: MESSAGE }], ...SAMPLING, specprefill_return_selection: true };
  const reference = await postJson(`${draftUrl}/v1/chat/completions`, body);
  check(answer.length > 0 && answer === reference.choices[0].message.content,
    "the streamed answer equals the server's greedy answer", `${JSON.stringify(answer)} vs ${JSON.stringify(reference.choices?.[0]?.message?.content)}`);
  check(/TTFT \d+ ms/.test(stats) && /tok\/s/.test(stats) && /completion \d+/.test(stats),
    "the answer shows TTFT, tokens/s and usage", stats);
  const sp = reference.usage.specprefill;
  check(sp?.applied === true && sp.selection, "SpecPrefill applied to the chat prompt (forced by the threshold)", JSON.stringify(sp));
  check(stats.includes(`kept ${sp.kept_tokens}/${sp.prompt_tokens}`), "the stats line shows usage.specprefill", stats);
  check(/spec decode accepted \d+\/\d+/.test(stats), "the stats line shows usage.speculative", stats);
  await shot(page, "chat");

  // ---------------------------------------------------- SpecPrefill view
  await page.click('[data-tab="selection"]');
  const view = await page.evaluate(() => ({
    applied: document.getElementById("selection-summary").dataset.applied,
    kept: document.querySelectorAll("#selection-prompt .chunk.kept").length,
    chunks: document.querySelectorAll("#selection-prompt .chunk[data-chunk]").length,
    prompt: document.getElementById("selection-prompt").textContent,
    summary: document.getElementById("selection-summary").textContent,
  }));
  const chunk = sp.selection.chunk_size;
  check(view.applied === "true", "the SpecPrefill view shows an applied selection", view.summary);
  check(view.kept === Math.ceil(sp.kept_tokens / chunk) && view.kept === sp.selection.kept.filter(Boolean).length,
    `highlighted chunks = ceil(kept_tokens / chunk) = ceil(${sp.kept_tokens} / ${chunk})`, `${view.kept} highlighted`);
  check(view.chunks === sp.selection.chunks.length && view.kept < view.chunks, "every chunk is drawn, not all kept", `${view.kept} of ${view.chunks}`);
  check(view.prompt === sp.selection.token_texts.join("") && view.prompt.includes(MESSAGE),
    "the view renders the whole prompt", JSON.stringify(view.prompt.slice(0, 80)));
  await shot(page, "specprefill");

  // ------------------------------------------------------- completion
  await page.click('[data-tab="completion"]');
  await setField(page, "completion-prompt", "Once upon a time");
  await page.click("#completion-send");
  await page.waitForSelector('#completion-output[data-done="true"]', { timeout: 30000 });
  const completion = await text(page, "#completion-output .content");
  const completionReference = await postJson(`${draftUrl}/v1/completions`, { prompt: "Once upon a time", ...SAMPLING });
  check(completion === completionReference.choices[0].text, "the completion playground streams the greedy completion", JSON.stringify(completion));

  // Stop: a throttled connection keeps the stream arriving slowly; Stop aborts the fetch.
  const cdp = await page.createCDPSession();
  await cdp.send("Network.enable");
  await cdp.send("Network.emulateNetworkConditions", { offline: false, latency: 0, downloadThroughput: 1500, uploadThroughput: 100000 });
  await setField(page, "max_tokens", "300");
  await page.click("#completion-send");
  await page.waitForFunction(() => (document.querySelector("#completion-output .content")?.textContent ?? "").length > 0, { timeout: 30000 });
  await page.click("#completion-stop");
  await page.waitForSelector('#completion-output[data-done="true"]', { timeout: 10000 });
  const stopped = await text(page, "#completion-output .stats");
  const partial = await text(page, "#completion-output .content");
  check(stopped.includes("stopped") && !(await page.$eval("#completion-send", (b) => b.disabled)),
    "Stop ends the stream and re-enables the playground", stopped);
  check(partial.length < 300, "a stopped answer keeps what had arrived", `${partial.length} chars`);
  await cdp.send("Network.emulateNetworkConditions", { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  await setField(page, "max_tokens", String(SAMPLING.max_tokens));

  // ---------------------------------------------------------- metrics
  await page.click('[data-tab="metrics"]');
  await page.waitForFunction(() => Number(document.getElementById("metrics-status").dataset.samples ?? 0) >= 2, { timeout: 10000 });
  const load = postJson(`${draftUrl}/v1/completions`, { prompt: "Once upon a time", max_tokens: 200, temperature: 0.8, ignore_eos: true });
  const updated = await page.waitForFunction(
    () => parseFloat(document.querySelector('[data-testid="value-tokens"]').textContent) > 0,
    { timeout: 15000 },
  ).then(() => true, () => false);
  await load;
  const values = await page.evaluate(() => Object.fromEntries(
    [...document.querySelectorAll('[data-testid^="value-"]')].map((el) => [el.dataset.testid, el.textContent])));
  check(updated, "the metrics page updates: generation tokens/s rises under load", JSON.stringify(values));
  check(parseFloat(values["value-specprefill"]) >= 1, "the SpecPrefill chart counts applied requests", values["value-specprefill"]);
  check(parseFloat(values["value-acceptance"]) >= 0, "the acceptance-rate chart has a value", values["value-acceptance"]);
  await shot(page, "metrics");

  // --------------------------------------------- conversations persist
  await page.reload({ waitUntil: "networkidle0" });
  const users = await page.$$eval('#messages [data-testid="message-user"]', (els) => els.map((el) => el.textContent));
  check(users.includes(MESSAGE), "the conversation survives a reload (localStorage)", JSON.stringify(users));
  check(page.problems.length === 0 && page.dialogs === 0, "no page errors, console errors or dialogs", page.problems.join("; "));

  // --------------------------------------------------------------- XSS
  // The answer's stream is replaced in the browser, so the renderer sees
  // exactly this model output. CSP would block inline handlers anyway; the
  // check that matters is that no element was created from model text.
  const xssPage = await openPage(browser, draftUrl);
  const evil = [
    "Here: <script>window.__xss = 1; alert('script')</script>\n",
    "<img src=x onerror=\"window.__xss = 2; alert('img')\">\n\n",
    "**<b>bold</b>** and `<i>code</i>` <svg onload=alert(3)>\n",
    "- <a href=\"javascript:alert(4)\">link</a>\n\n```html\n<img src=y onerror=alert(5)>\n```\n",
  ];
  const sse = [
    ...evil.map((piece) => ({ choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })),
    { choices: [{ index: 0, delta: {}, finish_reason: "stop" }] },
    { choices: [], usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7, prompt_tokens_details: { cached_tokens: 0 } } },
  ].map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`).join("") + "data: [DONE]\n\n";
  await xssPage.setRequestInterception(true);
  xssPage.on("request", (request) => {
    if (request.url().endsWith("/v1/chat/completions")) {
      request.respond({ status: 200, contentType: "text/event-stream", body: sse });
    } else request.continue();
  });
  await sendChat(xssPage, "Say something dangerous.");
  const rendered = await xssPage.evaluate(() => {
    const answers = document.querySelectorAll('#messages [data-testid="message-assistant"]');
    const last = answers[answers.length - 1];
    return {
      text: last.textContent,
      injected: last.querySelectorAll("script, img, svg, b, i, a").length,
      code: last.querySelector("pre code")?.textContent ?? "",
      xss: window.__xss ?? null,
    };
  });
  check(rendered.text.includes("<script>window.__xss = 1; alert('script')</script>") &&
    rendered.text.includes("<img src=x onerror=\"window.__xss = 2; alert('img')\">") &&
    rendered.text.includes("<svg onload=alert(3)>"), "model output with <script> and <img onerror> renders as text", rendered.text.slice(0, 200));
  check(rendered.injected === 0, "no element was created from model output", `${rendered.injected} elements`);
  check(rendered.code === "<img src=y onerror=alert(5)>", "a code fence renders its HTML as text", rendered.code);
  check(rendered.xss === null && xssPage.dialogs === 0, "no script ran and no dialog fired", `xss=${rendered.xss} dialogs=${xssPage.dialogs}`);
  await shot(xssPage, "xss");

  // ------------------------------------------------------------ API key
  const context = await browser.createBrowserContext();  // fresh localStorage
  const keyPage = await openPage(context, keyUrl);
  await keyPage.waitForSelector("#key-dialog[open]", { timeout: 10000 });
  check(true, "with --api-key the page asks for the key");
  await keyPage.type("#key-input", "wrong-key");
  await keyPage.click("#key-save");
  await keyPage.waitForFunction(() => document.getElementById("key-dialog").open &&
    document.getElementById("key-reason").textContent.includes("refused"), { timeout: 10000 });
  check(true, "a wrong key is refused and asked again");
  await keyPage.$eval("#key-input", (el) => { el.value = ""; });
  await keyPage.type("#key-input", apiKey);
  await keyPage.click("#key-save");
  await keyPage.waitForFunction(() => !document.getElementById("key-dialog").open &&
    document.getElementById("model-name").textContent !== "" && !document.getElementById("model-name").textContent.startsWith("("), { timeout: 10000 });
  check(await keyPage.evaluate(() => localStorage.getItem("specstack.apiKey")) === apiKey, "the key is kept in localStorage");
  await setField(keyPage, "max_tokens", "16");
  const keyStats = await sendChat(keyPage, "Hello there");
  check(/completion \d+/.test(keyStats) && !/error|401|key/i.test(keyStats), "chat works with the key (sent as a Bearer header)", keyStats);
  check(!/SpecPrefill/.test(keyStats), "a server without a draft shows no SpecPrefill usage", keyStats);
  await keyPage.click('[data-tab="metrics"]');
  await keyPage.waitForFunction(() => Number(document.getElementById("metrics-status").dataset.samples ?? 0) >= 1, { timeout: 10000 });
  check(true, "/metrics stays readable with --api-key (open, as in vLLM)");
  check(keyPage.problems.length === 0 && keyPage.dialogs === 0, "no page errors on the API-key server", keyPage.problems.join("; "));
  await context.close();
} catch (error) {
  failures++;
  console.error(`FAIL: ${error.stack ?? error}`);
} finally {
  await browser.close();
}
console.log(failures === 0 ? "all browser checks passed" : `${failures} browser check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
