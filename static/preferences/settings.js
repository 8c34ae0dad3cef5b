// Settings page: forms with data-confirm ask first (deleting a prompt, forgetting the defaults). A
// listener in a static file, as the Content-Security-Policy runs no inline scripts or on* attributes.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) { return; }
    const message = form.dataset.confirm;
    if (message && !window.confirm(message)) { event.preventDefault(); }
  });
  // A rejected form comes back with its first wrong field focused, so keyboard users land on the problem.
  const invalid = document.querySelector(".prefs [aria-invalid=true]");
  if (invalid) { invalid.focus(); }
})();
