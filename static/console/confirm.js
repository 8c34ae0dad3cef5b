// Asks before a console form with data-confirm posts (revoke a key, reset a password). A listener in a
// static file, as the Content-Security-Policy runs no inline scripts or on* attributes; htmx buttons
// use hx-confirm instead.
"use strict";
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement)) return;
  const message = form.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});
