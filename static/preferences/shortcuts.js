// Keyboard shortcuts for the chat (and the settings page): "?" lists them in a dialog. Keys without
// Ctrl/⌘/Alt fire only while no field has focus, so they never eat typing; the rest fire anywhere.
// Loaded by templates/chat/page.html and the settings page; needs nothing from chat.js but its element
// ids (#new-chat, #composer-input, #stop-btn, #conv-list, .chat-search, #messages).
(function () {
  "use strict";
  const script = document.currentScript;
  const settingsUrl = (script && script.dataset.settingsUrl) || "/settings/";
  const newChatUrl = (script && script.dataset.newChatUrl) || "/chat/new/";
  const mac = /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent);
  const MOD = mac ? "⌘" : "Ctrl";

  const SHORTCUTS = [
    { keys: ["?"], label: "Show keyboard shortcuts" },
    { keys: [MOD, "Shift", "O"], label: "New chat" },
    { keys: ["Shift", "Esc"], label: "Focus the message box" },
    { keys: [MOD, "K"], label: "Search chats" },
    { keys: ["Alt", "↑"], label: "Previous chat in the list" },
    { keys: ["Alt", "↓"], label: "Next chat in the list" },
    { keys: ["Esc"], label: "Stop the reply being written" },
    { keys: [MOD, "Shift", "C"], label: "Copy the last reply" },
    { keys: ["Enter"], label: "Send the message" },
    { keys: ["Shift", "Enter"], label: "New line in the message" },
    { keys: ["/"], label: "At the start of the message: insert a saved prompt" },
    { keys: ["Tab"], label: "Move to the next control (Shift+Tab: back)" },
  ];

  function keysCell(keys) {
    const td = document.createElement("td");
    keys.forEach(function (key, i) {
      if (i) { td.append(" + "); }
      const kbd = document.createElement("kbd");
      kbd.textContent = key;
      td.appendChild(kbd);
    });
    return td;
  }

  function table() {
    const t = document.createElement("table");
    t.className = "shortcut-table";
    const body = document.createElement("tbody");
    SHORTCUTS.forEach(function (s) {
      const tr = document.createElement("tr");
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = s.label;
      tr.append(th, keysCell(s.keys));
      body.appendChild(tr);
    });
    t.appendChild(body);
    return t;
  }

  // The settings page shows the same table in place.
  document.querySelectorAll("[data-shortcut-table]").forEach(function (slot) { slot.replaceChildren(table()); });

  // ---- the dialog: built on first use; Esc or ✕ closes it and focus goes back where it was
  let dialog = null;
  let opener = null;
  function buildDialog() {
    dialog = document.createElement("dialog");
    dialog.className = "shortcuts-dialog";
    dialog.id = "shortcuts-dialog";
    dialog.setAttribute("aria-labelledby", "shortcuts-title");
    const head = document.createElement("div");
    head.className = "shortcuts-head";
    const title = document.createElement("h2");
    title.id = "shortcuts-title";
    title.textContent = "Keyboard shortcuts";
    const closeBtn = document.createElement("button");
    closeBtn.type = "button";
    closeBtn.className = "icon-button";
    closeBtn.setAttribute("aria-label", "Close");
    closeBtn.textContent = "✕";
    closeBtn.addEventListener("click", function () { dialog.close(); });
    head.append(title, closeBtn);
    const foot = document.createElement("p");
    foot.className = "shortcuts-note";
    const link = document.createElement("a");
    link.href = settingsUrl;
    link.textContent = "Settings";
    foot.append("Keys without " + MOD + " or Alt work while you are not typing. Defaults and saved prompts: ", link, ".");
    dialog.append(head, table(), foot);
    // Esc here closes the dialog only: the page's own Esc (stop the reply) must not see it.
    dialog.addEventListener("keydown", function (e) { if (e.key === "Escape") { e.stopPropagation(); } });
    dialog.addEventListener("click", function (e) { if (e.target === dialog) { dialog.close(); } });  // the backdrop
    dialog.addEventListener("close", function () {
      // "close" fires a task after the dialog shut: focus placed since then (a click, a test) stays put.
      const unplaced = !document.activeElement || document.activeElement === document.body;
      if (opener && document.contains(opener) && unplaced) { opener.focus(); }
      opener = null;
    });
    document.body.appendChild(dialog);
  }
  function toggleDialog() {
    if (!dialog) { buildDialog(); }
    if (dialog.open) { dialog.close(); return; }
    opener = document.activeElement;
    dialog.showModal();
  }

  // ---- a short spoken and shown confirmation ("Copied the last reply")
  let statusBox = null;
  let statusTimer = 0;
  function announce(text) {
    if (!statusBox) {
      statusBox = document.createElement("div");
      statusBox.className = "kbd-status";
      statusBox.setAttribute("role", "status");
      document.body.appendChild(statusBox);
    }
    statusBox.textContent = text;
    clearTimeout(statusTimer);
    statusTimer = setTimeout(function () { statusBox.textContent = ""; }, 2200);
  }

  // ---- the actions
  function newChat() {
    const button = document.getElementById("new-chat");
    if (button) { button.click(); return; }
    // Pages without the chat's sidebar post the same form themselves.
    const headers = JSON.parse(document.body.getAttribute("hx-headers") || "{}");
    const f = document.createElement("form");
    f.method = "post";
    f.action = newChatUrl;
    const token = document.createElement("input");
    token.type = "hidden";
    token.name = "csrfmiddlewaretoken";
    token.value = headers["X-CSRFToken"] || "";
    f.appendChild(token);
    document.body.appendChild(f);
    f.submit();
  }

  function focusComposer() {
    const input = document.getElementById("composer-input");
    if (!input) { return false; }
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
    return true;
  }

  function stopReply() {
    const stop = document.getElementById("stop-btn");
    if (!stop || stop.hidden || stop.offsetParent === null) { return false; }
    stop.click();
    return true;
  }

  function writeClipboard(text) {
    const fallback = function () {  // plain-http deployments have no Clipboard API
      const area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("aria-hidden", "true");
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    };
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).catch(fallback);
    }
    fallback();
    return Promise.resolve();
  }

  function copyLastReply() {
    const replies = document.querySelectorAll("#messages .msg-assistant");
    const last = replies[replies.length - 1];
    if (!last) { announce("There is no reply to copy yet."); return; }
    const raw = last.querySelector(".msg-raw");
    const body = last.querySelector(".msg-body");
    const text = raw ? raw.value : (body ? body.innerText : "");
    if (!text.trim()) { announce("The last reply is empty."); return; }
    writeClipboard(text).then(function () { announce("Copied the last reply."); });
  }

  function moveChat(step) {
    const links = Array.from(document.querySelectorAll("#conv-list .conv-link"));
    if (!links.length) { announce("There are no other chats yet."); return; }
    const current = links.findIndex(function (a) {
      return a.getAttribute("aria-current") === "page" || a.closest(".conv-item.current") !== null;
    });
    // A new, empty chat is not in the list: both keys go to the newest chat.
    const next = current < 0 ? 0 : current + step;
    if (next < 0) { announce("This is the newest chat."); return; }
    if (next >= links.length) { announce("This is the last chat in the list."); return; }
    window.location.assign(links[next].href);
  }

  function typing(target) {
    if (!(target instanceof Element)) { return false; }
    return target.closest("input, textarea, select, [contenteditable=''], [contenteditable=true]") !== null;
  }

  // Shift+Esc in the capture phase: the page's own Esc (stop the reply) never sees it.
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape" || !e.shiftKey || e.ctrlKey || e.metaKey || e.altKey || (dialog && dialog.open)) { return; }
    if (focusComposer()) { e.preventDefault(); e.stopPropagation(); }
  }, true);

  document.addEventListener("keydown", function (e) {
    if (e.isComposing || (e.repeat && e.key !== "ArrowUp" && e.key !== "ArrowDown")) { return; }
    const mod = mac ? e.metaKey : e.ctrlKey;
    const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    const modal = dialog && dialog.open;
    let handled = true;
    if (key === "?" && !e.ctrlKey && !e.metaKey && !e.altKey && !typing(e.target)) {
      toggleDialog();
    } else if (modal) {
      return;  // the dialog is modal: the page's shortcuts wait until it closes
    } else if (mod && e.shiftKey && !e.altKey && key === "o") {
      newChat();
    } else if (mod && e.shiftKey && !e.altKey && key === "c") {
      copyLastReply();
    } else if (mod && !e.shiftKey && !e.altKey && key === "k" && document.querySelector(".chat-search")) {
      document.querySelector(".chat-search").focus();
    } else if (e.altKey && !e.ctrlKey && !e.metaKey && !e.shiftKey && (key === "ArrowUp" || key === "ArrowDown")) {
      moveChat(key === "ArrowUp" ? -1 : 1);
    } else if (key === "Escape" && !e.shiftKey && !e.defaultPrevented) {
      // The chat's own script stops a reply on Esc (and says so by preventDefault); this covers the rest.
      handled = stopReply();
    } else {
      handled = false;
    }
    if (handled) { e.preventDefault(); }
  });
})();
