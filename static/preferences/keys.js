// Settings › API keys: the Copy button beside a new key's secret (shown once, so copying matters).
(function () {
  "use strict";
  document.addEventListener("click", function (e) {
    const button = e.target.closest("[data-copy-secret]");
    if (!button) { return; }
    const source = document.getElementById(button.getAttribute("data-copy-secret"));
    if (!source) { return; }
    window.copyText(source.textContent.trim(), button);  // js/clipboard.js
  });
})();
