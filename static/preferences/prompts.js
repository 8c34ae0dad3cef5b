// The prompt library in the composer: "/" at the start of the message box opens a list of the user's
// saved prompts and the shared ones, filtered by what follows the "/". An ARIA combobox: focus stays in
// the box, ↑/↓ move the active option (aria-activedescendant), Enter or Tab inserts it, Esc closes the list;
// a click inserts too. Loaded by templates/chat/page.html; the list comes from data-library-url.
(function () {
  "use strict";
  const input = document.getElementById("composer-input");
  const form = document.getElementById("composer");
  if (!input || !form) { return; }
  const script = document.currentScript;
  const libraryUrl = (script && script.dataset.libraryUrl) || "/prompts/library.json";
  const manageUrl = (script && script.dataset.manageUrl) || "/settings/#prompts";
  const SHOWN = 50;  // options rendered at once; typing narrows the rest
  const FRESH_MS = 15000;  // a list fetched this recently is reused when the "/" list opens again

  let prompts = null;  // null: not loaded yet
  let fetchedAt = 0;
  let loadError = "";
  let matches = [];
  let active = -1;
  let open = false;
  let dismissed = false;  // Esc closed the list: it stays closed until the "/" is gone

  const popup = document.createElement("div");
  popup.className = "prompt-popup";
  popup.id = "prompt-popup";
  popup.hidden = true;
  const listbox = document.createElement("ul");
  listbox.className = "prompt-listbox";
  listbox.id = "prompt-listbox";
  listbox.setAttribute("role", "listbox");
  listbox.setAttribute("aria-label", "Saved prompts");
  const note = document.createElement("p");
  note.className = "prompt-popup-note";
  const foot = document.createElement("p");
  foot.className = "prompt-popup-foot";
  const hint = document.createElement("span");
  hint.textContent = "↑↓ choose · Enter or Tab insert · Esc close";
  const manage = document.createElement("a");
  manage.href = manageUrl;
  manage.textContent = "Manage prompts";
  manage.tabIndex = -1;  // reachable from the settings link; Tab here inserts the prompt
  foot.append(hint, manage);
  const status = document.createElement("span");
  status.className = "prefs-sr-only";
  status.setAttribute("role", "status");
  popup.append(listbox, note, foot, status);
  form.insertBefore(popup, form.firstChild);

  input.setAttribute("role", "combobox");
  input.setAttribute("aria-autocomplete", "list");
  input.setAttribute("aria-haspopup", "listbox");
  input.setAttribute("aria-controls", listbox.id);
  input.setAttribute("aria-expanded", "false");

  // The filter text: what follows a "/" that starts the box, up to the caret, on its first line.
  function query() {
    const before = input.value.slice(0, input.selectionStart);
    const m = /^\/([^\n]*)$/.exec(before);
    return m ? m[1] : null;
  }

  function load() {
    if (prompts !== null && Date.now() - fetchedAt < FRESH_MS) { return; }
    fetch(libraryUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(function (data) { prompts = data.prompts; fetchedAt = Date.now(); loadError = ""; refresh(); })
      .catch(function () {
        loadError = "Could not load your prompts; try again in a moment.";
        refresh();
      });
  }

  function rank(prompt, q) {
    if (!q) { return 0; }
    const title = prompt.title.toLowerCase();
    if (title.startsWith(q)) { return 0; }
    if (title.includes(q)) { return 1; }
    if (prompt.body.toLowerCase().includes(q)) { return 2; }
    return -1;
  }

  function option(prompt, index) {
    const li = document.createElement("li");
    li.className = "prompt-option";
    li.id = "prompt-option-" + index;
    li.setAttribute("role", "option");
    li.setAttribute("aria-selected", "false");
    li.dataset.index = String(index);
    const title = document.createElement("span");
    title.className = "prompt-option-title";
    title.textContent = prompt.title;
    const badge = document.createElement("span");
    badge.className = "prompt-option-badge";
    badge.textContent = prompt.shared ? "shared" : "";
    const body = document.createElement("span");
    body.className = "prompt-option-body";
    body.textContent = prompt.body.slice(0, 200);
    li.append(title, badge, body);
    return li;
  }

  function setActive(index) {
    const options = listbox.children;
    if (active >= 0 && options[active]) { options[active].setAttribute("aria-selected", "false"); }
    active = index;
    if (active >= 0 && options[active]) {
      options[active].setAttribute("aria-selected", "true");
      input.setAttribute("aria-activedescendant", options[active].id);
      options[active].scrollIntoView({ block: "nearest" });
    } else {
      input.removeAttribute("aria-activedescendant");
    }
  }

  function refresh() {
    if (!open) { return; }
    const q = (query() || "").trim().toLowerCase();
    listbox.replaceChildren();
    matches = [];
    if (prompts !== null) {
      const ranked = [];
      prompts.forEach(function (p, i) { const r = rank(p, q); if (r >= 0) { ranked.push([r, i, p]); } });
      ranked.sort(function (a, b) { return a[0] - b[0] || a[1] - b[1]; });
      matches = ranked.slice(0, SHOWN).map(function (x) { return x[2]; });
      matches.forEach(function (p, i) { listbox.appendChild(option(p, i)); });
    }
    listbox.hidden = matches.length === 0;
    if (loadError) {
      note.textContent = loadError;
    } else if (prompts === null) {
      note.textContent = "Loading your prompts…";
    } else if (!prompts.length) {
      note.textContent = "No saved prompts yet: add some under Manage prompts.";
    } else if (!matches.length) {
      note.textContent = "No prompt matches “" + q + "”.";
    } else {
      note.textContent = "";
    }
    note.hidden = !note.textContent;
    status.textContent = prompts === null ? "" :
      matches.length + (matches.length === 1 ? " prompt" : " prompts") + " available";
    setActive(matches.length ? 0 : -1);
  }

  function show() {
    if (!open) {
      open = true;
      popup.hidden = false;
      input.setAttribute("aria-expanded", "true");
      load();
    }
    refresh();
  }

  function close() {
    if (!open) { return; }
    open = false;
    popup.hidden = true;
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
    active = -1;
  }

  function insert(prompt) {
    // The prompt replaces the "/filter" typed so far; text after the caret stays after it.
    const after = input.value.slice(input.selectionStart);
    input.value = prompt.body + after;
    const caret = prompt.body.length;
    input.setSelectionRange(caret, caret);
    close();
    dismissed = input.value.startsWith("/");  // a prompt that itself starts with "/" does not reopen the list
    input.focus();
    input.dispatchEvent(new Event("input", { bubbles: true }));  // the composer grows to fit
  }

  function update() {
    const q = query();
    if (q === null) { dismissed = false; close(); return; }
    if (!dismissed) { show(); }
  }

  input.addEventListener("input", update);
  input.addEventListener("click", update);
  input.addEventListener("blur", close);
  input.addEventListener("keyup", function (e) {
    if (e.key === "ArrowLeft" || e.key === "ArrowRight" || e.key === "Home" || e.key === "End") { update(); }
  });

  // Capture phase on document: runs before the composer's own Enter (send) and the page's Esc (stop).
  document.addEventListener("keydown", function (e) {
    if (!open || e.target !== input || e.isComposing) { return; }
    const count = matches.length;
    if (e.key === "ArrowDown" && count) {
      setActive((active + 1) % count);
    } else if (e.key === "ArrowUp" && count) {
      setActive((active - 1 + count) % count);
    } else if ((e.key === "Enter" || e.key === "Tab") && !e.shiftKey && active >= 0) {
      insert(matches[active]);
    } else if (e.key === "Escape") {
      dismissed = true;
      close();
    } else {
      return;
    }
    e.preventDefault();
    e.stopPropagation();
  }, true);

  // The mouse: pressing in the list keeps focus in the box (no blur, so it stays open); a click inserts,
  // and "Manage prompts" still follows its link.
  popup.addEventListener("mousedown", function (e) { e.preventDefault(); });
  listbox.addEventListener("click", function (e) {
    const li = e.target.closest(".prompt-option");
    if (li) { insert(matches[Number(li.dataset.index)]); }
  });
  listbox.addEventListener("mousemove", function (e) {
    const li = e.target.closest(".prompt-option");
    if (li && Number(li.dataset.index) !== active) { setActive(Number(li.dataset.index)); }
  });
})();
