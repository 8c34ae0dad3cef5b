// Uploads a GGUF from the console's models page in pieces (webapp.console.uploads): asks the server how
// many bytes of this file it already has (so picking the same file after a reload continues there), sends
// the rest a chunk at a time with its offset, then asks the server to check the file and register it.
// A static file: the Content-Security-Policy runs no inline scripts.
"use strict";
(() => {
  const form = document.getElementById("model-upload");
  if (!form) return;
  const input = document.getElementById("model-upload-file");
  const button = document.getElementById("model-upload-button");
  const stop = document.getElementById("model-upload-cancel");
  const wrap = document.getElementById("model-upload-progress-wrap");
  const bar = document.getElementById("model-upload-progress");
  const status = document.getElementById("model-upload-status");
  const error = document.getElementById("model-upload-error");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  const startUrl = form.dataset.startUrl;
  let stopping = false;

  const mib = (bytes) => `${(bytes / 1048576).toFixed(1)} MiB`;
  const setState = (state) => { form.dataset.state = state; };

  // The server answers JSON, {"error": ...} when it refuses; anything else (a proxy's page) is said plainly.
  const answer = async (response) => {
    try {
      return await response.json();
    } catch {
      return { error: `The server answered ${response.status} ${response.statusText}.` };
    }
  };

  const send = (url, method, body, type) => {
    const headers = { "X-CSRFToken": csrf };
    if (type) headers["Content-Type"] = type;
    return fetch(url, { method, body, headers, credentials: "same-origin" });
  };

  const show = (done, total) => {
    bar.max = total;
    bar.value = done;
    const percent = total ? Math.floor((100 * done) / total) : 100;
    status.textContent = `${mib(done)} of ${mib(total)} (${percent}%)`;
    form.dataset.uploaded = String(done);
  };

  const fail = (message) => {
    error.textContent = message || "The upload failed.";
    error.hidden = false;
    setState("failed");
  };

  const upload = async (file) => {
    const start = new FormData();
    start.append("name", file.name);
    start.append("size", String(file.size));
    let response = await send(startUrl, "POST", start);
    let body = await answer(response);
    if (!response.ok) return fail(body.error);
    const base = `${startUrl}${encodeURIComponent(body.name)}/`;
    const chunk = body.chunk_bytes;
    let offset = body.offset;
    show(offset, file.size);
    while (offset < file.size) {
      if (stopping) {
        status.textContent = `Stopped at ${mib(offset)}: pick the same file again to continue.`;
        return setState("stopped");
      }
      const piece = file.slice(offset, Math.min(offset + chunk, file.size));
      response = await send(`${base}?offset=${offset}`, "PUT", piece, "application/octet-stream");
      body = await answer(response);
      if (response.status === 409 && Number.isInteger(body.offset)) {
        offset = body.offset; // another tab or a retried request moved it: continue from the server's count
        continue;
      }
      if (!response.ok) return fail(body.error);
      offset = body.offset;
      show(offset, file.size);
    }
    setState("checking");
    status.textContent = `${mib(file.size)} of ${mib(file.size)} (100%): checking the file…`;
    response = await send(`${base}finish/`, "POST", new FormData());
    body = await answer(response);
    if (!response.ok) return fail(body.error);
    setState("done");
    status.textContent = body.notice;
    // The page again: the table shows the new model (the notice comes back as a message).
    window.location.assign(form.dataset.doneUrl);
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const file = input.files[0];
    if (!file) return fail("Choose a .gguf file to upload.");
    error.hidden = true;
    stopping = false;
    button.disabled = true;
    stop.hidden = false;
    wrap.hidden = false;
    setState("uploading");
    try {
      await upload(file);
    } catch (exc) {
      fail(`The upload stopped (${exc.message}). Pick the same file again to continue where it stopped.`);
    } finally {
      button.disabled = false;
      stop.hidden = true;
    }
  });

  stop.addEventListener("click", () => {
    stopping = true;
  });
})();
