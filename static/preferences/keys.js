// Settings › API keys: the Copy button beside a new key's secret (shown once, so copying matters).
(function () {
  "use strict";
  document.addEventListener("click", function (e) {
    const button = e.target.closest("[data-copy-secret]");
    if (!button) { return; }
    const source = document.getElementById(button.getAttribute("data-copy-secret"));
    if (!source) { return; }
    const text = source.textContent.trim();
    const done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
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
  });
})();
