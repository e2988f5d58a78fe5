// Keeps a live run's page up to date without a reload: every second it asks the view for the
// run's state since the last event it showed, and replaces the changing part of the page
// (escaped HTML made by the server) when the run has moved. Stops when the run has ended.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live) {
    return;
  }
  const url = live.dataset.run;
  let next = live.dataset.next;
  let key = live.dataset.key;
  let finished = live.dataset.finished === "true";
  const actions = document.getElementById("actions");
  const keepOpen = function () {
    // The details a reader opened stay open across updates.
    return Array.from(live.querySelectorAll("details[open]")).map(function (d) {
      return d.closest("section") ? d.closest("section").id : "";
    });
  };
  const poll = function () {
    if (finished) {
      return;
    }
    const query = "?since=" + encodeURIComponent(next) + "&key=" + encodeURIComponent(key);
    fetch(url + query, { headers: { Accept: "application/json" } })
      .then(function (response) {
        // A request the view refuses (the run deleted, say) will be refused again: stop.
        if (response.status >= 400 && response.status < 500) {
          finished = true;
        }
        return response.json();
      })
      .then(function (state) {
        if (state.error) {
          live.dataset.error = state.error;
          return;
        }
        if (!state.unchanged) {
          const open = keepOpen();
          live.innerHTML = state.html;
          open.forEach(function (id) {
            const section = id && document.getElementById(id);
            const details = section && section.querySelector("details");
            if (details) { details.open = true; }
          });
          next = String(state.next);
          key = state.key;
          live.dataset.next = next;
          live.dataset.key = key;
        }
        finished = state.finished;
        live.dataset.finished = String(finished);
        if (finished && actions) {
          actions.querySelectorAll("form.signal, form.cancel").forEach(function (f) { f.hidden = true; });
        }
      })
      .catch(function () { /* the view is away for a moment: try again at the next tick */ })
      .finally(function () {
        if (!finished) {
          window.setTimeout(poll, 1000);
        }
      });
  };
  window.setTimeout(poll, 1000);
})();
