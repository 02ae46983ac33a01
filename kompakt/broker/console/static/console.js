// kompakt console: "compact now" with live progress and the dry-run preview.
// Plain JavaScript, no library: the pages are rendered by the server.
(function () {
  "use strict";

  async function getJson(url, options) {
    const resp = await fetch(url, Object.assign({ headers: { Accept: "application/json" } }, options || {}));
    let body;
    try { body = await resp.json(); } catch (e) { body = { error: "HTTP " + resp.status }; }
    if (!resp.ok) { throw new Error(body.error || ("HTTP " + resp.status)); }
    return body;
  }

  // re-render the parts of this page marked data-live from a fresh copy of it
  async function refreshLive() {
    const resp = await fetch(location.href, { headers: { Accept: "text/html" } });
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    document.querySelectorAll("[data-live][id]").forEach(function (el) {
      const fresh = doc.getElementById(el.id);
      if (fresh) { el.replaceWith(fresh); }
    });
  }

  function setupCompact() {
    const box = document.getElementById("compact-controls");
    if (!box) { return; }
    const topic = box.dataset.topic;
    const partition = Number(box.dataset.partition);
    const query = "topic=" + encodeURIComponent(topic) + "&partition=" + partition;
    const result = document.getElementById("compact-result");
    const panel = document.getElementById("compact-progress");
    const bar = document.getElementById("compact-bar");
    const status = document.getElementById("compact-status");
    const buttons = box.querySelectorAll("button");
    const compactBtn = document.getElementById("compact-now");
    const canCompact = !compactBtn.disabled;

    function busy(on) {
      buttons.forEach(function (b) { b.disabled = on || (b === compactBtn && !canCompact); });
      box.dataset.busy = on ? "1" : "";
    }

    async function poll() {
      try {
        const state = await getJson("/console/progress?" + query);
        const mine = state.running.find(function (r) { return r.topic === topic && r.partition === partition; });
        if (mine) {
          bar.max = mine.total || 1;
          bar.value = mine.done;
          status.textContent = (mine.dry_run ? "dry run" : "cleaning") + " with " + mine.engine +
            (mine.total ? ": " + mine.done + "/" + mine.total : "…");
        }
      } catch (e) { /* the next poll tries again */ }
    }

    async function run(label, request) {
      busy(true);
      result.textContent = "";
      result.className = "";
      panel.hidden = false;
      bar.removeAttribute("value");
      status.textContent = label + "…";
      const timer = setInterval(poll, 250);
      try {
        const doc = await request();
        clearInterval(timer);
        bar.max = 1; bar.value = 1;
        status.textContent = "done";
        await refreshLive();
        result.textContent = doc.summary;
        result.className = "done";
      } catch (e) {
        clearInterval(timer);
        status.textContent = "failed";
        result.textContent = e.message;
        result.className = "error";
      } finally {
        busy(false);
      }
    }

    document.getElementById("dry-run").addEventListener("click", function () {
      run("dry run", function () { return getJson("/console/dry-run?" + query); });
    });
    compactBtn.addEventListener("click", function () {
      run("cleaning", function () {
        return getJson("/console/compact", {
          method: "POST",
          headers: { "Content-Type": "application/json", Accept: "application/json" },
          body: JSON.stringify({ topic: topic, partition: partition, dry_run: false }),
        });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", setupCompact);
})();
