// Copy buttons (a chat's code blocks and replies, a new API key's secret): window.copyText(text, button)
// writes text to the clipboard and says "Copied" on the button for a moment.
(function () {
  "use strict";
  window.copyText = function (text, button) {
    // Its own label, kept from the first click: a second click while it says "Copied" changes nothing.
    const label = button.dataset.copyLabel || (button.dataset.copyLabel = button.textContent);
    const done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1200);
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
  };
})();
