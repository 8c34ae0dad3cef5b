// Documents in a chat: the attach button and drag-and-drop upload files to the chat; each upload becomes
// a chip that htmx keeps polling until the server has read the file (ready) or says why it could not.
(function () {
  "use strict";
  const input = document.getElementById("doc-file");
  const button = document.getElementById("doc-attach-btn");
  const tray = document.getElementById("doc-tray");
  const overlay = document.getElementById("doc-drop");
  const pane = document.querySelector(".chat-pane") || document.body;
  if (!input || !tray) { return; }
  const url = input.dataset.uploadUrl;

  function csrfToken() {
    try { return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || ""; }
    catch (e) { return ""; }
  }
  function chips() {
    return document.getElementById("doc-chips") || tray;
  }
  function fromHtml(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }
  function errorChip(name, text) {
    const chip = document.createElement("div");
    chip.className = "doc-chip doc-failed doc-upload-error";
    chip.setAttribute("role", "alert");
    if (name) {
      const label = document.createElement("span");
      label.className = "doc-name";
      label.textContent = name;
      chip.appendChild(label);
    }
    const state = document.createElement("span");
    state.className = "doc-state";
    state.textContent = text;
    chip.appendChild(state);
    const close = document.createElement("button");
    close.type = "button";
    close.className = "icon-button doc-dismiss";
    close.setAttribute("aria-label", "Dismiss");
    close.textContent = "✕";
    chip.appendChild(close);
    return chip;
  }
  function placeholder(name) {
    const chip = document.createElement("div");
    chip.className = "doc-chip doc-uploading";
    const label = document.createElement("span");
    label.className = "doc-name";
    label.textContent = name;
    const state = document.createElement("span");
    state.className = "doc-state";
    state.setAttribute("role", "status");
    state.textContent = "Uploading…";
    chip.append(label, state);
    return chip;
  }

  async function upload(file) {
    const temp = placeholder(file.name);
    chips().appendChild(temp);
    const body = new FormData();
    body.append("file", file, file.name);
    let node;
    try {
      const response = await fetch(url, {
        method: "POST", body: body, credentials: "same-origin",
        headers: { "X-CSRFToken": csrfToken(), "HX-Request": "true" },
      });
      const text = await response.text();
      const isHtml = (response.headers.get("Content-Type") || "").indexOf("text/html") === 0;
      node = isHtml ? fromHtml(text) : null;
      if (!node) {
        node = errorChip(file.name, response.ok ? "Unexpected answer from the server." : text.trim() || ("Upload failed (" + response.status + ")."));
      }
    } catch (e) {
      node = errorChip(file.name, "Upload failed: the server could not be reached.");
    }
    temp.replaceWith(node);
    if (window.htmx) { window.htmx.process(node); }
  }

  function uploadAll(files) {
    // One at a time: the chips appear in the order chosen and the server is not flooded.
    let chain = Promise.resolve();
    Array.prototype.forEach.call(files, function (file) { chain = chain.then(function () { return upload(file); }); });
    return chain;
  }

  if (button) { button.addEventListener("click", function () { input.click(); }); }
  input.addEventListener("change", function () {
    const files = Array.prototype.slice.call(input.files || []);
    input.value = "";
    uploadAll(files);
  });
  tray.addEventListener("click", function (ev) {
    const close = ev.target.closest(".doc-dismiss");
    if (close) { close.closest(".doc-chip").remove(); }
  });

  function hasFiles(ev) {
    return ev.dataTransfer && Array.prototype.indexOf.call(ev.dataTransfer.types || [], "Files") !== -1;
  }
  let depth = 0;
  function show(on) { if (overlay) { overlay.hidden = !on; } pane.classList.toggle("doc-dragging", on); }
  pane.addEventListener("dragenter", function (ev) { if (hasFiles(ev)) { ev.preventDefault(); depth += 1; show(true); } });
  pane.addEventListener("dragover", function (ev) { if (hasFiles(ev)) { ev.preventDefault(); ev.dataTransfer.dropEffect = "copy"; } });
  pane.addEventListener("dragleave", function (ev) { if (hasFiles(ev)) { depth = Math.max(0, depth - 1); if (!depth) { show(false); } } });
  pane.addEventListener("drop", function (ev) {
    if (!hasFiles(ev)) { return; }
    ev.preventDefault();
    depth = 0;
    show(false);
    uploadAll(ev.dataTransfer.files);
  });
})();
