// Flash messages (base.html's #toasts) float over the page; each one closes with its ✕ button, and Esc
// closes the newest. Esc that a page already used (closing the chat list, stopping a reply) is left alone:
// this listens on window, which hears keydown after document's handlers, and skips defaultPrevented.
(function () {
  "use strict";

  function region() { return document.getElementById("toasts"); }

  function dismiss(item) {
    var list = item.parentElement;
    var next = item.nextElementSibling || item.previousElementSibling;
    var hadFocus = item.contains(document.activeElement);
    item.remove();
    if (list && !list.children.length) { list.remove(); }
    // Focus stays in the region while toasts remain, else goes to the page rather than to <body>'s limbo.
    if (hadFocus) {
      var target = next && next.isConnected ? next.querySelector(".message-close") : document.getElementById("main");
      if (target === document.getElementById("main")) { target.setAttribute("tabindex", "-1"); }
      if (target) { target.focus({ preventScroll: true }); }
    }
  }

  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest(".message-close");
    if (button) { dismiss(button.closest(".message")); }
  });

  window.addEventListener("keydown", function (e) {
    if (e.key !== "Escape" || e.defaultPrevented) { return; }
    var list = region();
    if (!list || !list.lastElementChild) { return; }
    e.preventDefault();
    dismiss(list.lastElementChild);
  });
})();
