// The chat and completion playgrounds. Conversations live in localStorage
// (specstack.conversations): [{id, title, messages: [{role, content, stats}]}].
import { renderMarkdown } from "./markdown.js";
import { streamAnswer } from "./answer.js";
import { requestFields } from "./settings.js";

const STORE = "specstack.conversations";

/**
 * @typedef {{role: "user" | "assistant", content: string, stats?: string}} Message
 * @typedef {{id: string, title: string, messages: Message[]}} Conversation
 */

/** @returns {Conversation[]} */
function loadConversations() {
  try {
    const parsed = JSON.parse(localStorage.getItem(STORE) ?? "[]");
    return Array.isArray(parsed) ? parsed : [];
  } catch {
    return [];  // a corrupt store starts over rather than breaking the page
  }
}

/** @param {Conversation[]} conversations */
function saveConversations(conversations) {
  localStorage.setItem(STORE, JSON.stringify(conversations));
}

/**
 * @param {string} id
 * @returns {any}
 */
const $ = (id) => document.getElementById(id);

/**
 * @typedef {object} PlaygroundHooks
 * @property {(usage: any) => void} onUsage every answer's final usage
 * @property {() => Promise<boolean>} askKey shows the API key dialog; true when a key was saved
 */

/** @param {PlaygroundHooks} hooks */
export function setupPlayground(hooks) {
  let conversations = loadConversations();
  /** @type {string} */
  let currentId = conversations[0]?.id ?? "";
  /** @type {AbortController | null} */
  let running = null;

  const current = () => conversations.find((c) => c.id === currentId);

  function newConversation() {
    const conversation = { id: `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`, title: "New chat", messages: [] };
    conversations.unshift(conversation);
    currentId = conversation.id;
    saveConversations(conversations);
    return conversation;
  }

  function renderList() {
    const list = $("conversation-list");
    list.replaceChildren(...conversations.map((c) => {
      const option = document.createElement("option");
      option.value = c.id;
      option.textContent = c.title;
      return option;
    }));
    list.value = currentId;
  }

  /**
   * @param {Message} message
   * @returns {HTMLElement}
   */
  function messageElement(message) {
    const element = document.createElement("div");
    element.className = `message ${message.role}`;
    element.dataset.testid = `message-${message.role}`;
    if (message.role === "user") {
      element.textContent = message.content;
    } else {
      const content = document.createElement("div");
      content.className = "content";
      content.appendChild(renderMarkdown(message.content));
      const stats = document.createElement("div");
      stats.className = "stats";
      stats.textContent = message.stats ?? "";
      element.append(content, stats);
    }
    return element;
  }

  function renderMessages() {
    const conversation = current();
    $("messages").replaceChildren(...(conversation?.messages ?? []).map(messageElement));
  }

  /**
   * @param {boolean} busy
   * @param {string} send
   * @param {string} stop
   */
  function setBusy(busy, send, stop) {
    $(send).disabled = busy;
    $(stop).disabled = !busy;
  }

  /**
   * Streams into `target`, asking for the API key and retrying once on a 401.
   * @param {"/v1/chat/completions" | "/v1/completions"} path
   * @param {Record<string, unknown>} body
   * @param {HTMLElement} target
   */
  async function run(path, body, target) {
    for (let attempt = 0; ; ++attempt) {
      running = new AbortController();
      const result = await streamAnswer(path, body, target, running.signal, hooks.onUsage);
      running = null;
      if (result.status === 401 && attempt === 0 && (await hooks.askKey())) {
        target.classList.remove("error");
        continue;
      }
      return result;
    }
  }

  async function sendChat() {
    const input = $("chat-input");
    const text = input.value.trim();
    if (!text || running) return;
    const conversation = current() ?? newConversation();
    if (conversation.messages.length === 0) conversation.title = text.slice(0, 40);
    conversation.messages.push({ role: "user", content: text });
    input.value = "";
    saveConversations(conversations);
    renderList();
    renderMessages();
    const target = document.createElement("div");
    target.className = "message assistant";
    target.dataset.testid = "message-assistant";
    $("messages").appendChild(target);
    setBusy(true, "chat-send", "chat-stop");
    const body = {
      ...requestFields(),
      messages: conversation.messages.map((m) => ({ role: m.role, content: m.content })),
    };
    const result = await run("/v1/chat/completions", body, target);
    setBusy(false, "chat-send", "chat-stop");
    if (result.text || !result.error) {
      conversation.messages.push({ role: "assistant", content: result.text, stats: result.stats });
      saveConversations(conversations);
    }
    target.dataset.done = "true";
  }

  async function sendCompletion() {
    const prompt = $("completion-prompt").value;
    if (!prompt || running) return;
    const target = $("completion-output");
    target.classList.remove("error");
    delete target.dataset.done;
    setBusy(true, "completion-send", "completion-stop");
    await run("/v1/completions", { ...requestFields(), prompt }, target);
    setBusy(false, "completion-send", "completion-stop");
    target.dataset.done = "true";
  }

  $("chat-form").addEventListener("submit", (/** @type {Event} */ e) => {
    e.preventDefault();
    sendChat();
  });
  $("chat-input").addEventListener("keydown", (/** @type {KeyboardEvent} */ e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      sendChat();
    }
  });
  // Aborting the fetch closes the connection; the server notices at its next
  // write (or heartbeat) and cancels the request in the engine.
  for (const id of ["chat-stop", "completion-stop"]) $(id).addEventListener("click", () => running?.abort());
  $("completion-send").addEventListener("click", sendCompletion);
  $("new-conversation").addEventListener("click", () => {
    newConversation();
    renderList();
    renderMessages();
  });
  $("delete-conversation").addEventListener("click", () => {
    conversations = conversations.filter((c) => c.id !== currentId);
    currentId = conversations[0]?.id ?? "";
    saveConversations(conversations);
    renderList();
    renderMessages();
  });
  $("conversation-list").addEventListener("change", () => {
    currentId = $("conversation-list").value;
    renderMessages();
  });
  renderList();
  renderMessages();
}
