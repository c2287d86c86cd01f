// holdline live demo: the chat on the left, the runtime's state on the right, all from
// the session's WebSocket stream (resumed by cursor after any reconnect).
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  session: null, // {session_id, token}
  cursor: null,
  ws: null,
  retry: 0,
  seenEvents: new Set(),
  attempts: new Map(), // operation_id -> [{attempt, outcome, http_status}]
  snapshot: null,
  typing: false,
  typingTimer: null,
  faults: new Map(), // toggle name -> fault_id
};

const FAULTS = {
  latency: { latency_ms: 2500 },
  "5xx": { status: 503 },
  "429": { status: 429, retry_after_s: 1 },
  timeout: { timeout_after_commit: true },
};

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function human(status) {
  return (status || "").replace(/_/g, " ");
}

async function api(method, path, body) {
  const headers = { "Content-Type": "application/json" };
  if (state.session) headers.Authorization = `Bearer ${state.session.token}`;
  const response = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw Object.assign(new Error(data.detail || data.title || response.status), { status: response.status });
  return data;
}

// ---------------------------------------------------------------- session

async function startSession(fresh) {
  const saved = !fresh && JSON.parse(localStorage.getItem("holdline.session") || "null");
  if (saved) {
    state.session = saved;
    try {
      await api("GET", `/v1/sessions/${saved.session_id}`);
    } catch (err) {
      state.session = null;
    }
  }
  if (!state.session) {
    const user = `visitor-${Math.random().toString(36).slice(2, 8)}`;
    const created = await api("POST", "/v1/sessions", { user_id: user, tenant_id: "demo" });
    state.session = { session_id: created.session_id, token: created.token };
    localStorage.setItem("holdline.session", JSON.stringify(state.session));
  }
  state.cursor = null;
  state.seenEvents.clear();
  state.attempts.clear();
  $("messages").replaceChildren();
  $("timeline").replaceChildren();
  $("session-id").textContent = state.session.session_id;
  connect();
}

// ---------------------------------------------------------------- stream

async function connect() {
  if (state.ws) { state.ws.onclose = null; state.ws.close(); state.ws = null; }
  const session = state.session;
  const retry = () => {
    setConn(false);
    const delay = Math.min(5000, 250 * 2 ** state.retry++);
    setTimeout(() => { if (state.session === session && !state.ws) connect(); }, delay);
  };
  // A one-time ticket opens the socket, never the session token: a URL ends up in logs.
  let ticket;
  try {
    ticket = (await api("POST", `/v1/sessions/${session.session_id}/ws-ticket`)).ticket;
  } catch (err) {
    if (err.status === 401 || err.status === 404) { setConn(false); return; }  // expired, gone
    retry();
    return;
  }
  if (state.session !== session || state.ws) return;
  const proto = location.protocol === "https:" ? "wss" : "ws";
  let url = `${proto}://${location.host}/v1/sessions/${session.session_id}/stream?ticket=${encodeURIComponent(ticket)}`;
  if (state.cursor) url += `&after=${encodeURIComponent(state.cursor)}`;
  const ws = new WebSocket(url);
  state.ws = ws;
  ws.onopen = () => { state.retry = 0; setConn(true); };
  ws.onmessage = (msg) => onFrame(JSON.parse(msg.data));
  ws.onclose = () => {
    if (state.ws !== ws) return;
    state.ws = null;
    retry();
  };
}

function setConn(on) {
  $("conn").className = `dot ${on ? "on" : "off"}`;
  $("conn-label").textContent = on ? "live" : "reconnecting…";
}

function onFrame(frame) {
  if (frame.type === "hello") {
    if (frame.snapshot) renderSnapshot(frame.snapshot);
    if (!state.cursor) state.cursor = frame.cursor;
    return;
  }
  if (frame.type === "snapshot") {
    renderSnapshot(frame.snapshot);
    state.cursor = frame.cursor;
    return;
  }
  const event = frame.event;
  state.cursor = frame.cursor;
  if (state.seenEvents.has(event.event_id)) return;
  state.seenEvents.add(event.event_id);
  if (frame.type === "message") addMessage(frame.message);
  // A successful attempt is recorded in its commit; every other one in operation.attempted.
  const tried = event.type === "operation.attempted" ? event.data
    : event.type === "operation.committed" && event.data && event.data.attempt
      ? { ...event.data.attempt, outcome: "success" } : null;
  if (tried) {
    const list = state.attempts.get(event.operation_id) || [];
    list.push(tried);
    state.attempts.set(event.operation_id, list);
  }
  addTimeline(event);
}

// ---------------------------------------------------------------- chat

function addMessage(message) {
  document.querySelectorAll(".msg.pending").forEach((n) => n.remove());
  const item = el("li", `msg ${message.role}`);
  if (message.delivery_id) {
    item.classList.add("closing");
    item.dataset.deliveryId = message.delivery_id;
    item.appendChild(el("span", "badge", "Update"));
  }
  item.appendChild(document.createTextNode(message.text));
  $("messages").appendChild(item);
  item.scrollIntoView({ block: "end", behavior: "smooth" });
}

async function send(text) {
  text = text.trim();
  if (!text) return;
  setTyping(false, true);
  $("input").value = "";
  $("send").disabled = true;
  const pending = el("li", "msg assistant pending", "…");
  try {
    const turn = api("POST", `/v1/sessions/${state.session.session_id}/turns`, {
      text, client_turn_id: `ui-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`,
    });
    setTimeout(() => { if (!pending.isConnected && $("send").disabled) $("messages").appendChild(pending); }, 150);
    await turn;
  } catch (err) {
    addMessage({ role: "assistant", text: `⚠ ${err.message}` });
  } finally {
    pending.remove();
    $("send").disabled = false;
    $("input").focus();
  }
}

// Typing is chat's "the user is speaking": the policy holds follow-ups until it stops.
function setTyping(typing, silent) {
  clearTimeout(state.typingTimer);
  if (typing) state.typingTimer = setTimeout(() => setTyping(false), 1500);
  $("typing-state").textContent = typing ? "You are typing — follow-ups wait for a quiet moment." : "";
  if (state.typing === typing) return;
  state.typing = typing;
  if (!silent) api("POST", `/v1/sessions/${state.session.session_id}/activity`, { typing }).catch(() => {});
}

// ---------------------------------------------------------------- panels

function renderSnapshot(snap) {
  state.snapshot = snap;
  const sync = $("sync-mode");
  sync.textContent = human(snap.sync_mode);
  sync.className = `pill sync-${snap.sync_mode}`;
  $("agent-select").value = snap.agent;
  renderOperations(snap.operations);
  renderBatches(snap.batches);
  renderDeliveries(snap.deliveries);
}

function attemptChip(a) {
  const kind = a.outcome === "success" || a.outcome === "accepted_async" ? "ok"
    : a.outcome === "timeout_after_send" || a.outcome === "unknown" ? "unknown"
    : a.outcome === "business_error" ? "fail" : "retry";
  const code = a.http_status ? ` ${a.http_status}` : "";
  const chip = el("span", `attempt ${kind}`, `#${a.attempt}${code} ${human(a.outcome)}`);
  chip.title = a.detail || "";
  return chip;
}

function renderOperations(ops) {
  const box = $("operations");
  if (!ops.length) { box.replaceChildren(el("p", "empty", "No operations yet. Ask for some accesses.")); return; }
  box.replaceChildren(...ops.map((op) => {
    const card = el("div", `op b-${op.status}`);
    card.dataset.operationId = op.operation_id;
    card.dataset.status = op.status;
    const head = el("div", "op-head");
    head.append(el("span", "label", op.label), el("span", `status s-${op.status}`, human(op.status)));
    card.append(head, el("div", "tool", `${op.tool} · ${op.attempts} attempt${op.attempts === 1 ? "" : "s"}`));
    if (op.failure && op.status !== "committed") card.append(el("div", "failure", op.failure));
    const attempts = el("div", "attempts");
    (state.attempts.get(op.operation_id) || []).forEach((a) => attempts.appendChild(attemptChip(a)));
    card.append(attempts);
    return card;
  }));
}

function renderBatches(batches) {
  const box = $("batches");
  if (!batches.length) { box.replaceChildren(el("p", "empty", "—")); return; }
  box.replaceChildren(...batches.slice().reverse().map((b) => {
    const settled = Object.keys(b.settled).length;
    const row = el("div", "row");
    const head = el("div", "row-head");
    const status = b.closed ? "closed" : b.drained ? "drained" : "aggregating";
    head.append(el("code", null, b.batch_id.slice(0, 18)), el("span", `status s-${b.closed ? "closed" : "running"}`, status));
    const bar = el("div", "progress");
    const fill = el("span");
    fill.style.width = `${(100 * settled) / Math.max(1, b.operation_ids.length)}%`;
    bar.appendChild(fill);
    row.append(head, el("div", "sub", `${settled} of ${b.operation_ids.length} settled · agent ${b.agent || "—"}`), bar);
    return row;
  }));
}

function renderDeliveries(deliveries) {
  const box = $("deliveries");
  if (!deliveries.length) { box.replaceChildren(el("p", "empty", "—")); return; }
  box.replaceChildren(...deliveries.slice().reverse().map((d) => {
    const row = el("div", "row");
    row.dataset.deliveryId = d.delivery_id;
    row.dataset.status = d.status;
    const head = el("div", "row-head");
    head.append(el("span", null, `${d.kind}${d.mode ? " · " + human(d.mode) : ""}`), el("span", `status s-${d.status}`, human(d.status)));
    row.append(head, el("div", "sub", d.reason ? `${d.decision ? human(d.decision) + " — " : ""}${d.reason}` : "awaiting the policy"));
    return row;
  }));
}

function addTimeline(event) {
  const list = $("timeline");
  const item = el("li");
  const time = new Date(event.occurred_at).toLocaleTimeString([], { hour12: false }) + "." + String(new Date(event.occurred_at).getMilliseconds()).padStart(3, "0");
  const ids = ["turn_id", "operation_id", "batch_id", "delivery_id", "agent"]
    .filter((k) => event[k]).map((k) => `${k.replace("_id", "")}=${event[k]}`).join("  ");
  item.append(el("span", "t", time), el("span", `ty ${event.stream}`, event.type), el("span", "ids", ids));
  item.title = JSON.stringify(event, null, 2);
  list.appendChild(item);
  list.scrollTop = list.scrollHeight;
}

// ---------------------------------------------------------------- faults

async function toggleFault(name, on) {
  const match = $("fault-match").value.trim() || "*";
  if (on) {
    const created = await api("POST", "/v1/demo/faults", { match, ...FAULTS[name] });
    state.faults.set(name, created.fault_id);
  } else if (state.faults.has(name)) {
    await api("DELETE", `/v1/demo/faults/${state.faults.get(name)}`).catch(() => {});
    state.faults.delete(name);
  }
}

// ---------------------------------------------------------------- wiring

$("composer").addEventListener("submit", (e) => { e.preventDefault(); send($("input").value); });
$("input").addEventListener("input", () => setTyping($("input").value.length > 0));
$("suggestions").addEventListener("click", (e) => {
  if (e.target.classList.contains("chip")) send(e.target.textContent);
});
$("handoff").addEventListener("click", async () => {
  const agent = $("agent-select").value;
  await api("POST", `/v1/sessions/${state.session.session_id}/handoff`, { agent }).catch((err) => addMessage({ role: "assistant", text: `⚠ ${err.message}` }));
});
$("new-session").addEventListener("click", () => startSession(true));
document.querySelectorAll("[data-fault]").forEach((box) => {
  box.addEventListener("change", () => toggleFault(box.dataset.fault, box.checked).catch((err) => {
    box.checked = !box.checked;
    addMessage({ role: "assistant", text: `⚠ fault injection: ${err.message}` });
  }));
});
// Faults left from an earlier visit would surprise the visitor: start clean. The fault
// panel is the demo's (served in demo mode only): without it, its card is hidden.
api("DELETE", "/v1/demo/faults").catch((err) => {
  if (err.status === 404) $("fault-card").hidden = true;
});
startSession(false);
