// dclr web page: compare sentences (cosine heat map) and search the loaded index.
// Plain JS, no build step; every text from the user or the server goes in with textContent.
"use strict";

const $ = (id) => document.getElementById(id);

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

// The API key (when the server has one) lives in this tab's sessionStorage only: never in the
// page's URL, never in localStorage, gone when the tab closes.
const KEY_STORE = "dclr-api-key";

function authHeaders() {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { ...(options.headers || {}), ...authHeaders() },
  });
  if (response.status === 401) {
    $("api-key-form").hidden = false;
  }
  return response;
}

async function postJSON(path, body) {
  const response = await api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (data.error && data.error.message) || `HTTP ${response.status}`;
    throw new Error(message);
  }
  return data;
}

// Cosine -> colour on a white-to-navy scale (cosines below 0 get the lightest colour).
function cellColour(score) {
  const t = Math.max(0, Math.min(1, score));
  const from = [247, 251, 255];
  const to = [8, 48, 107];
  const rgb = from.map((c, i) => Math.round(c + (to[i] - c) * t));
  return { background: `rgb(${rgb.join(",")})`, ink: t > 0.55 ? "#fff" : "#1d2330" };
}

function renderHeatmap(sentences, matrix) {
  const table = document.createElement("table");
  const head = table.createTHead().insertRow();
  head.appendChild(document.createElement("th"));
  head.appendChild(document.createElement("th"));
  sentences.forEach((_, j) => {
    const th = document.createElement("th");
    th.textContent = String(j + 1);
    head.appendChild(th);
  });
  const body = table.createTBody();
  sentences.forEach((sentence, i) => {
    const row = body.insertRow();
    const number = document.createElement("th");
    number.textContent = String(i + 1);
    row.appendChild(number);
    const label = document.createElement("th");
    label.className = "label";
    label.textContent = sentence;
    label.title = sentence;
    row.appendChild(label);
    matrix[i].forEach((score, j) => {
      const cell = row.insertCell();
      const colour = cellColour(score);
      cell.className = "cell";
      cell.dataset.i = String(i);
      cell.dataset.j = String(j);
      cell.dataset.score = String(score);
      cell.style.background = colour.background;
      cell.style.color = colour.ink;
      cell.textContent = score.toFixed(2);
      cell.title = `cosine(${i + 1}, ${j + 1}) = ${score.toFixed(4)}`;
    });
  });
  const legend = document.createElement("div");
  legend.className = "legend";
  const low = document.createElement("span");
  low.textContent = "≤ 0";
  const bar = document.createElement("span");
  bar.className = "bar";
  const high = document.createElement("span");
  high.textContent = "1 (cosine)";
  legend.append(low, bar, high);
  const holder = $("heatmap");
  holder.replaceChildren(table, legend);
}

async function compare() {
  showError("");
  const sentences = $("sentences").value.split("\n").map((s) => s.trim()).filter((s) => s);
  if (sentences.length < 2) {
    showError("Enter at least two sentences, one per line.");
    return;
  }
  $("compare-button").disabled = true;
  $("compare-status").textContent = "encoding…";
  try {
    const data = await postJSON("/similarity", { sentences });
    const score = data.matrix[0][1];
    const line = $("pair-score");
    line.replaceChildren("cosine(1, 2) = ");
    const strong = document.createElement("strong");
    strong.id = "pair-score-value";
    strong.textContent = score.toFixed(4);
    line.appendChild(strong);
    line.hidden = false;
    renderHeatmap(sentences, data.matrix);
    $("compare-status").textContent = `${sentences.length} sentences`;
  } catch (err) {
    showError(err.message);
    $("compare-status").textContent = "";
  } finally {
    $("compare-button").disabled = false;
    // a counter of finished comparisons, for scripts (and tests) waiting on a fresh result
    document.body.dataset.compares = String(Number(document.body.dataset.compares || 0) + 1);
  }
}

async function search(event) {
  event.preventDefault();
  showError("");
  const query = $("query").value.trim();
  if (!query) return;
  const k = Number($("k").value) || 5;
  $("search-status").textContent = "searching…";
  try {
    const data = await postJSON("/search", { query, k });
    const list = $("results");
    list.replaceChildren();
    for (const hit of data.results) {
      const item = document.createElement("li");
      const score = document.createElement("span");
      score.className = "hit-score";
      score.textContent = hit.score.toFixed(3);
      item.append(score);
      if (hit.doc_id !== null && hit.doc_id !== undefined) {
        // the row's own id (`dclr index build --id-column`), shown as text
        const id = document.createElement("span");
        id.className = "hit-id";
        id.textContent = hit.doc_id;
        item.append(id);
      }
      item.append(hit.text);
      list.appendChild(item);
    }
    $("search-status").textContent = `${data.results.length} results`;
  } catch (err) {
    showError(err.message);
    $("search-status").textContent = "";
  } finally {
    document.body.dataset.searches = String(Number(document.body.dataset.searches || 0) + 1);
  }
}

async function init() {
  $("compare-button").addEventListener("click", compare);
  $("search-form").addEventListener("submit", search);
  $("api-key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) {
      sessionStorage.setItem(KEY_STORE, key);
    } else {
      sessionStorage.removeItem(KEY_STORE);
    }
    $("api-key").value = "";
    $("api-key-form").hidden = true;
    showError("");
    init();
  });
  try {
    const response = await api("/health");
    const health = await response.json();
    if (!response.ok) {
      throw new Error((health.error && health.error.message) || `HTTP ${response.status}`);
    }
    $("model-info").textContent =
      `model ${health.model} · ${health.dim}-d · fingerprint ${health.fingerprint}`;
    if (!health.index) {
      $("search-button").disabled = true;
      $("query").disabled = true;
      $("search-status").textContent = "No index loaded (start the server with --index DIR).";
    } else {
      $("search-status").textContent = `${health.index.count} texts, ${health.index.kind} index`;
      $("k").max = String(health.limits.max_k);
    }
    document.body.dataset.ready = "true";
  } catch (err) {
    showError(`Cannot reach the server: ${err.message}`);
  }
}

init();
