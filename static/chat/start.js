// /chat/ only reads, so the chat it opens is made by this POST. fetch + replace rather than submit():
// Back from the chat then skips this page instead of landing on it and being sent forward again.
(function () {
  "use strict";
  const form = document.getElementById("start-chat");
  fetch(form.action, { method: "POST", body: new FormData(form), credentials: "same-origin" })
    .then(function (response) {
      if (response.ok && response.redirected) { location.replace(response.url); } else { form.submit(); }
    })
    .catch(function () { form.submit(); });
})();
