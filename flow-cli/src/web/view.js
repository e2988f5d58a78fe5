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
  let status = (document.getElementById("status") || {}).textContent;
  let finished = live.dataset.finished === "true";
  let actions = document.getElementById("actions");
  // The folded values a reader opened or closed stay so across updates (the page's parts
  // come back in the same order).
  const folds = function () {
    return Array.from(live.querySelectorAll("details")).map(function (d) { return d.open; });
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
          const open = folds();
          live.innerHTML = state.html;
          live.querySelectorAll("details").forEach(function (d, i) {
            if (i < open.length) { d.open = open[i]; }
          });
          // The forms follow the run's status (a failed run gets its redrive button), and
          // only then: a form being filled in stays as it is.
          if (actions && state.status !== status) {
            actions.outerHTML = state.actions;
            actions = document.getElementById("actions");
          }
          status = state.status;
          next = String(state.next);
          key = state.key;
          live.dataset.next = next;
          live.dataset.key = key;
        }
        finished = state.finished;
        live.dataset.finished = String(finished);
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
