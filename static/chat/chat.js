// Chat page: one WebSocket per open chat. The server renders every message; this file only places
// fragments, keeps the composer in sync, and sends the user's actions.
(function () {
  "use strict";
  const root = document.getElementById("chat");
  if (!root) { return; }
  const list = document.getElementById("messages");
  const scroller = document.getElementById("messages-scroll");
  const form = document.getElementById("composer");
  const input = document.getElementById("composer-input");
  const sendBtn = document.getElementById("send-btn");
  const stopBtn = document.getElementById("stop-btn");
  const errorBox = document.getElementById("chat-error");
  const pending = {};  // nonce -> what to do when the server confirms our message was saved
  let socket = null;
  let retries = 0;
  let running = false;

  function nearBottom() { return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120; }
  function toBottom() { scroller.scrollTop = scroller.scrollHeight; }
  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }
  function showError(text) { errorBox.textContent = text; errorBox.hidden = !text; }
  function autosize() { input.style.height = "auto"; input.style.height = Math.min(input.scrollHeight, 220) + "px"; }
  function nonce() { return Math.random().toString(36).slice(2, 12); }

  // Exactly one of Send and Stop shows (mooncake.css makes [hidden] beat button.primary's display).
  function setRunning(on) {
    running = on;
    root.dataset.running = on ? "true" : "false";
    const hadFocus = document.activeElement === stopBtn || document.activeElement === sendBtn;
    stopBtn.hidden = !on;
    sendBtn.hidden = on;
    if (hadFocus) { (on ? stopBtn : input).focus(); }  // A hidden button would drop focus to the page.
  }

  function handle(ev) {
    if (ev.type === "upsert") {
      const stick = nearBottom();
      const node = fragment(ev.html);
      const old = document.getElementById("msg-" + ev.id);
      if (old) {
        old.replaceWith(node);
      } else {
        // Something now follows the older messages, so none of them can be continued any more.
        list.querySelectorAll(".continue-btn").forEach(function (b) { b.remove(); });
        list.appendChild(node);
      }
      if (ev.nonce && pending[ev.nonce]) { pending[ev.nonce](); delete pending[ev.nonce]; }
      if (stick) { toBottom(); }
    } else if (ev.type === "thread") {
      // Another version was picked or written (here or in another tab): the server sends the whole thread.
      const top = scroller.scrollTop;
      list.innerHTML = ev.html;
      if (ev.nonce !== undefined) { toBottom(); } else { scroller.scrollTop = top; }
      if (ev.nonce && pending[ev.nonce]) { pending[ev.nonce](); delete pending[ev.nonce]; }
    } else if (ev.type === "model") {
      const picker = document.getElementById("model-picker");
      if (picker && !picker.contains(document.activeElement)) {
        const node = fragment(ev.html);
        picker.replaceWith(node);
        if (window.htmx) { window.htmx.process(node); }
      }
      const setting = document.getElementById("set-model");
      if (setting) { setting.value = ev.model; }  // Saving the settings then keeps the picked model.
    } else if (ev.type === "remove") {
      ev.ids.forEach(function (id) { const n = document.getElementById("msg-" + id); if (n) { n.remove(); } });
    } else if (ev.type === "state") {
      setRunning(ev.running);
    } else if (ev.type === "error") {
      showError(ev.message);  // The typed text was never cleared, so it is still there to resend.
    } else if (ev.type === "conversation") {
      const sidebar = document.getElementById("conv-list");
      const existing = document.getElementById("conv-" + ev.id);
      if (existing) { existing.remove(); }
      sidebar.querySelectorAll(".conv-empty").forEach(function (n) { n.remove(); });
      const item = fragment(ev.html);
      sidebar.prepend(item);
      if (window.htmx) { window.htmx.process(item); }  // Its delete button is an htmx element.
      setTitle(item.querySelector(".conv-title").textContent);
    } else if (ev.type === "title") {
      setTitle(ev.title);
    } else if (ev.type === "loading") {
      showLoading(ev.done ? "" : ev.model);
    }
  }

  // While the chat's model loads for the reply asked for, the conversation says so; the typed text stays in
  // the composer until the server saves it, once the model is ready (webapp.chat.model_loading).
  function showLoading(model) {
    let note = document.getElementById("model-loading");
    root.dataset.loading = model ? "true" : "false";
    if (!model) { if (note) { note.remove(); } return; }
    if (!note) {
      note = document.createElement("div");
      note.id = "model-loading";
      note.className = "model-loading";
      note.setAttribute("role", "status");
      list.appendChild(note);
    }
    note.textContent = "Loading " + model + "\u2026 The reply starts once it is ready.";
    toBottom();
  }

  function setTitle(text) {
    const field = document.getElementById("title-input");
    if (field) {
      field.dataset.saved = text;
      if (document.activeElement !== field) { field.value = text; }  // Never under the user's typing.
    }
    const item = document.getElementById("conv-" + root.dataset.conversationId);
    // Not while the entry is a rename field (organize's list rename): its answer brings the entry back.
    if (item && item.querySelector(".conv-title")) {
      item.querySelector(".conv-title").textContent = text;
      const del = item.querySelector(".conv-delete");
      del.setAttribute("aria-label", "Delete " + text);
      del.setAttribute("hx-confirm", "Delete \u201c" + text + "\u201d? This cannot be undone.");
    }
    document.title = text + " · Mooncake";
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + root.dataset.wsPath);
    socket.onopen = function () { retries = 0; root.dataset.connected = "true"; showError(""); };
    socket.onmessage = function (e) { handle(JSON.parse(e.data)); };
    socket.onclose = function () {
      root.dataset.connected = "false";
      retries = Math.min(retries + 1, 6);
      if (retries >= 3) { showError("Connection lost; reconnecting…"); }
      setTimeout(connect, 400 * retries);
    };
  }

  // The picker saves a pick with its own request; an action sent before that request ends would be
  // answered by the previous model, so actions wait for it (Stop never waits).
  const pickerRequests = new Set();
  let afterPick = [];
  document.addEventListener("htmx:beforeRequest", function (e) {
    if (!e.detail.elt || e.detail.elt.id !== "model-picker") { return; }
    // Followed on the request itself: the picker may be swapped out (a socket's "model" event) before it ends.
    const xhr = e.detail.xhr;
    pickerRequests.add(xhr);
    xhr.addEventListener("loadend", function () {
      pickerRequests.delete(xhr);
      if (pickerRequests.size === 0) { const waiting = afterPick; afterPick = []; waiting.forEach(function (f) { f(); }); }
    });
  });

  function sendNow(payload) {
    if (!socket || socket.readyState !== WebSocket.OPEN) { showError("Not connected; reconnecting…"); return false; }
    socket.send(JSON.stringify(payload));
    return true;
  }
  function send(payload) {
    if (payload.type === "stop" || pickerRequests.size === 0) { return sendNow(payload); }
    afterPick.push(function () { sendNow(payload); });
    return true;
  }

  function copy(text, button) {
    const done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1200);
    };
    const fallback = function () {  // Plain-http deployments have no Clipboard API.
      const area = document.createElement("textarea");
      area.value = text; document.body.appendChild(area); area.select();
      document.execCommand("copy"); area.remove(); done();
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, fallback);
    } else {
      fallback();
    }
  }

  function startEdit(article) {
    if (article.querySelector(".edit-box")) { return; }
    const body = article.querySelector(".user-text");
    const box = fragment('<div class="edit-box"><textarea rows="3" aria-label="Edit message"></textarea>' +
      '<p class="edit-note">Saving adds a new version of this message with a new reply; the current one stays, a click on \u2039 \u203a away.</p>' +
      '<div class="edit-actions"><button type="button" class="primary edit-send">Save &amp; send</button> ' +
      '<button type="button" class="link-button edit-cancel">Cancel</button></div></div>');
    box.querySelector("textarea").value = body.textContent;
    body.hidden = true;
    article.insertBefore(box, body.nextSibling);
    box.querySelector("textarea").focus();
  }

  list.addEventListener("click", function (e) {
    const target = e.target.closest("button");
    if (!target) { return; }
    const article = target.closest(".msg");
    if (target.classList.contains("copy-btn")) {
      copy(target.closest(".code-block").querySelector("pre").textContent, target);
    } else if (target.classList.contains("copy-msg")) {
      copy(article.querySelector(".msg-raw").value, target);
    } else if (target.classList.contains("regen-btn")) {
      if (!running) { showError(""); send({ type: "regenerate", message_id: Number(article.dataset.id) }); }
    } else if (target.classList.contains("continue-btn")) {
      if (!running) { showError(""); send({ type: "continue", message_id: Number(article.dataset.id) }); }
    } else if (target.classList.contains("branch-btn")) {
      if (!running && target.dataset.target) { showError(""); send({ type: "switch", message_id: Number(target.dataset.target) }); }
    } else if (target.classList.contains("edit-btn")) {
      if (!running) { startEdit(article); }
    } else if (target.classList.contains("edit-cancel")) {
      article.querySelector(".edit-box").remove();
      article.querySelector(".user-text").hidden = false;
    } else if (target.classList.contains("edit-send")) {
      const text = article.querySelector(".edit-box textarea").value;
      if (text.trim()) { showError(""); send({ type: "edit", message_id: Number(article.dataset.id), content: text, nonce: nonce() }); }
    }
  });

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    const text = input.value;
    if (!text.trim() || running || root.dataset.loading === "true") { return; }
    showError("");
    const id = nonce();
    pending[id] = function () { input.value = ""; autosize(); };
    send({ type: "send", content: text, nonce: id });
  });
  input.addEventListener("keydown", function (e) {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
  });
  input.addEventListener("input", autosize);
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") { return; }
    if (sidebarShown()) { e.preventDefault(); setSidebar(false); return; }  // The open list first.
    if (running) { e.preventDefault(); send({ type: "stop" }); }
  });
  stopBtn.addEventListener("click", function () { send({ type: "stop" }); });

  function toggler(buttonId, onToggle) {
    const button = document.getElementById(buttonId);
    button.addEventListener("click", function () {
      const open = button.getAttribute("aria-expanded") !== "true";
      button.setAttribute("aria-expanded", open ? "true" : "false");
      onToggle(open);
    });
  }
  toggler("settings-toggle", function (open) { document.getElementById("settings-panel").hidden = !open; });

  // The chat list: a column on wide screens; on a phone an overlay opened by ☰ and closed by its ✕,
  // Esc, or a tap on the backdrop, after which focus goes back to ☰.
  const sidebarToggle = document.getElementById("sidebar-toggle");
  function sidebarShown() {
    // offsetParent is null while ☰ is not displayed: wide screens always show the list.
    return root.classList.contains("sidebar-open") && sidebarToggle.offsetParent !== null;
  }
  function setSidebar(open) {
    root.classList.toggle("sidebar-open", open);
    sidebarToggle.setAttribute("aria-expanded", open ? "true" : "false");
    sidebarToggle.setAttribute("aria-label", open ? "Hide chats" : "Show chats");
    (open ? document.getElementById("sidebar-close") : sidebarToggle).focus();
  }
  sidebarToggle.addEventListener("click", function () { setSidebar(!root.classList.contains("sidebar-open")); });
  document.getElementById("sidebar-close").addEventListener("click", function () { setSidebar(false); });
  document.getElementById("sidebar-backdrop").addEventListener("click", function () { setSidebar(false); });

  // Renaming: Enter or leaving the field sends the title once, in place. The form's own submit would
  // load a new page, so it never runs; htmx posts on the "rename" event instead.
  const titleBox = document.getElementById("chat-title");
  function rename() {
    const titleForm = titleBox.querySelector(".title-form");
    const field = titleForm && titleForm.querySelector(".title-input");
    if (!field || field.value === field.dataset.saved) { return; }  // Enter, then blur: one request.
    field.dataset.saved = field.value;
    if (window.htmx) { window.htmx.trigger(titleForm, "rename"); }
  }
  titleBox.addEventListener("submit", function (e) { e.preventDefault(); rename(); });
  titleBox.addEventListener("change", rename);

  // htmx leaves 4xx responses unswapped; a chat form's 400 is the form again with its errors by the fields.
  document.body.addEventListener("htmx:beforeSwap", function (e) {
    if (e.detail.xhr.status === 400 && root.contains(e.detail.elt)) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });
  document.body.addEventListener("htmx:afterSwap", function (e) {
    const invalid = e.detail.target.querySelector("[aria-invalid=true]");
    if (invalid && root.contains(e.detail.target)) { invalid.focus(); }
  });

  // Mermaid fences become diagrams in diagrams.js, beside this file (it loads mermaid only when needed).
  const diagrams = document.createElement("script");
  diagrams.src = new URL("diagrams.js", document.currentScript.src).href;
  document.head.appendChild(diagrams);

  setRunning(false);
  toBottom();
  connect();
  input.focus();
})();
