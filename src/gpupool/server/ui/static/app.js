// gpupool dashboard: live updates over server-sent events (no framework, no build step).
// Each stream ends with an "end" event; the script then closes it so the browser does not
// reconnect and replay it.
"use strict";

function follow(url, handlers) {
  const source = new EventSource(url);
  for (const [kind, handle] of Object.entries(handlers)) {
    source.addEventListener(kind, (e) => handle(e.data));
  }
  source.addEventListener("end", () => {
    source.close();
    if (handlers.end) handlers.end();
  });
  // A stream that breaks before its end is not reopened: it would start again from the
  // beginning and repeat what the page already shows.
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) return;
    source.close();
    if (handlers.lost) handlers.lost();
  });
  return source;
}

function followLog(pre) {
  const state = document.getElementById("log-state");
  follow(pre.dataset.logStream, {
    log: (line) => {
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(line + "\n");
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    },
    end: () => {
      if (state) state.textContent = "(complete)";
      pre.dataset.complete = "true";
    },
    lost: () => {
      if (state) state.textContent = "(connection lost: reload the page to follow again)";
    },
  });
}

function followStatus(badge) {
  follow(badge.dataset.statusStream, {
    status: (status) => {
      badge.textContent = status;
      badge.className = "badge st-" + status;
    },
    end: () => {
      const form = document.getElementById("cancel-form");
      if (form) form.remove();
    },
  });
}

function followOverview(grid) {
  const source = new EventSource(grid.dataset.live);
  source.addEventListener("counts", (e) => {
    const counts = JSON.parse(e.data);
    for (const cell of grid.querySelectorAll("[data-key]")) {
      const value = counts[cell.dataset.key];
      if (value === undefined) continue;
      const target = cell.querySelector("a") || cell;
      target.textContent = String(value);
    }
  });
  window.addEventListener("pagehide", () => source.close());
}

document.addEventListener("DOMContentLoaded", () => {
  const pre = document.querySelector("pre[data-log-stream]");
  if (pre) followLog(pre);
  const badge = document.querySelector("[data-status-stream]");
  if (badge) followStatus(badge);
  const grid = document.querySelector("[data-live]");
  if (grid) followOverview(grid);
});
