// Organised chat list (pinned, folders, archive), the item menus, reply feedback, and share links.
// The list itself is server-rendered; this keeps it tidy between renders and makes the menus keyboard-friendly.
(function () {
  "use strict";

  var list = document.getElementById("conv-list");
  var COLLAPSED_KEY = "mooncake.collapsedFolders";

  // ---- folders remember being collapsed, across re-renders and reloads ----
  function collapsed() {
    try { return JSON.parse(localStorage.getItem(COLLAPSED_KEY) || "[]"); } catch (e) { return []; }
  }
  function applyCollapsed(root) {
    var ids = collapsed();
    root.querySelectorAll(".org-folder-details").forEach(function (d) {
      if (ids.indexOf(d.dataset.folder) >= 0) { d.open = false; }
    });
  }
  // toggle does not bubble: listen in the capture phase.
  document.addEventListener("toggle", function (e) {
    var d = e.target;
    if (!d.classList) { return; }
    if (d.classList.contains("org-folder-details")) {
      var ids = collapsed().filter(function (id) { return id !== d.dataset.folder; });
      if (!d.open) { ids.push(d.dataset.folder); }
      try { localStorage.setItem(COLLAPSED_KEY, JSON.stringify(ids)); } catch (err) { /* private mode */ }
    } else if (d.classList.contains("conv-menu") && d.open) {
      // One menu open at a time.
      document.querySelectorAll(".conv-menu[open]").forEach(function (other) { if (other !== d) { other.open = false; } });
    }
  }, true);

  // ---- a chat the socket re-adds at the top goes back to its own section ----
  if (list) {
    applyCollapsed(list);
    new MutationObserver(function (records) {
      var previous = {};
      records.forEach(function (r) {
        r.removedNodes.forEach(function (n) {
          if (n.nodeType === 1 && n.classList.contains("conv-item") && n.id) { previous[n.id] = n.dataset.section; }
        });
      });
      records.forEach(function (r) {
        r.addedNodes.forEach(function (n) {
          if (n.nodeType !== 1 || !n.classList.contains("conv-item")) { return; }
          var home = n.parentElement && n.parentElement.id;
          if (!n.dataset.section && home && home.indexOf("org-section-") === 0) {
            // Swapped in place (a rename): it stays, and remembers where it is.
            n.dataset.section = home.slice("org-section-".length);
          }
          if (n.parentElement !== list) { return; }
          if (n.classList.contains("search-hit")) { return; }
          var section = n.dataset.section || previous[n.id] || "recent";
          var target = document.getElementById("org-section-" + section) || document.getElementById("org-section-recent");
          if (!target) { return; }  // A search is on screen: the chat stays where the socket put it.
          n.dataset.section = section;
          target.querySelectorAll(".org-folder-empty").forEach(function (x) { x.remove(); });
          target.prepend(n);
        });
      });
    }).observe(list, { childList: true, subtree: true });
  }

  // ---- replies the socket adds carry the feedback form: htmx must wire it up as it does page content ----
  var messages = document.getElementById("messages");
  if (messages) {
    new MutationObserver(function (records) {
      if (!window.htmx) { return; }
      records.forEach(function (r) {
        r.addedNodes.forEach(function (n) {
          if (n.nodeType === 1 && n.querySelector && n.querySelector(".fb")) { window.htmx.process(n); }
        });
      });
    }).observe(messages, { childList: true });
  }

  // ---- menus: Esc or a click elsewhere closes them; focus survives the list's re-render ----
  document.addEventListener("click", function (e) {
    document.querySelectorAll(".conv-menu[open]").forEach(function (menu) {
      if (!menu.contains(e.target)) { menu.open = false; }
    });
  });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") { return; }
    var menu = e.target.closest && e.target.closest(".conv-menu[open]");
    if (menu) {
      menu.open = false;
      menu.querySelector("summary").focus();
      e.preventDefault();  // Not also "stop the reply" or "close the sidebar".
      e.stopPropagation();
    }
  }, true);

  // ---- renaming in the list: the field arrives focused (autofocus) with its text selected; Esc cancels ----
  document.body.addEventListener("htmx:load", function (e) {
    var field = e.detail.elt.querySelector && e.detail.elt.querySelector(".conv-rename-input");
    if (field && !field.hasAttribute("aria-invalid")) { field.select(); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape" || !e.target.classList || !e.target.classList.contains("conv-rename-input")) { return; }
    var cancel = e.target.form.querySelector(".conv-rename-cancel");
    if (cancel) { cancel.click(); }
    e.preventDefault();  // Not also "stop the reply" or "close the sidebar".
    e.stopPropagation();
  }, true);

  var lastItem = null;
  document.body.addEventListener("htmx:beforeRequest", function (e) {
    var item = e.detail.elt.closest && e.detail.elt.closest(".conv-item, .org-folder");
    lastItem = item ? item.id : null;
  });
  document.body.addEventListener("htmx:beforeSwap", function (e) {
    // A 400 from these forms is the form again with its error beside the field.
    var elt = e.detail.elt;
    if (e.detail.xhr.status === 400 && elt.closest && elt.closest("#conv-list, .fb")) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });
  document.body.addEventListener("htmx:afterSwap", function (e) {
    if (!list || e.detail.target !== list) { return; }
    applyCollapsed(list);
    if (list.querySelector("[aria-invalid=true]")) { return; }  // chat.js focuses the field with the error.
    var again = lastItem && document.getElementById(lastItem);
    var focus = again && again.querySelector(".conv-menu-button, summary");
    if (focus) { focus.focus(); }
    lastItem = null;
  });

  // ---- share page: copy the new link; confirm before revoking ----
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("[data-copy]");
    if (!button) { return; }
    var field = document.querySelector(button.dataset.copy);
    if (!field) { return; }
    field.select();
    var done = function () { button.textContent = "Copied"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(field.value).then(done, function () { document.execCommand("copy"); done(); });
    } else {
      document.execCommand("copy");
      done();
    }
  });
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) { e.preventDefault(); }
  });
})();
