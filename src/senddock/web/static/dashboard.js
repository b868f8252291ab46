// SendDock dashboard: live numbers over Server-Sent Events, and confirm() on risky buttons.
// Plain JS, no build step. Values go into the page with textContent, never as HTML, except
// the chart's SVG, which the server draws.
"use strict";

(function () {
  function setBar(el, percent) {
    el.setAttribute("aria-valuenow", String(percent));
    var inner = el.firstElementChild;
    if (inner) inner.style.width = percent + "%";
  }

  // Bars are drawn here, not in a style attribute: the page's CSP allows no inline style.
  document.querySelectorAll("[role=progressbar][aria-valuenow]").forEach(function (el) {
    setBar(el, el.getAttribute("aria-valuenow"));
  });

  // Put data[field] into every [data-field] under scope; show the forms meant for the status.
  function fill(scope, data) {
    scope.querySelectorAll("[data-field]").forEach(function (el) {
      var key = el.getAttribute("data-field");
      if (!(key in data)) return;
      var value = data[key];
      if (el.getAttribute("role") === "progressbar") {
        setBar(el, value);
        return;
      }
      el.textContent = value === null || value === undefined ? "" : String(value);
      if (key === "status" || key === "state") el.setAttribute("data-status", String(value));
      if (el.hasAttribute("data-hide-empty")) el.hidden = !value;
    });
    if ("status" in data) {
      scope.querySelectorAll("[role=progressbar][data-status]").forEach(function (el) {
        el.setAttribute("data-status", String(data.status));
      });
      scope.querySelectorAll("[data-when]").forEach(function (el) {
        var needs = el.getAttribute("data-needs");
        el.hidden = el.getAttribute("data-when").split(" ").indexOf(data.status) < 0 ||
          (needs !== null && !data[needs]);
      });
    }
  }

  function cell(text, className) {
    var td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  var handlers = {
    campaigns: function (data) {
      data.campaigns.forEach(function (c) {
        var row = document.querySelector('[data-campaign="' + c.id + '"]');
        if (row) fill(row, c);
      });
    },
    campaign: function (data, root) {
      fill(root, data);
      // Blocks that appear once something happens: a worker died, jobs turned unconfirmed.
      [["[data-worker-deaths]", "worker_deaths"], ["[data-unconfirmed]", "unconfirmed"],
        ["[data-no-worker]", "no_live_worker"]]
        .forEach(function (pair) {
          var block = root.querySelector(pair[0]);
          if (block && pair[1] in data) block.hidden = !data[pair[1]];
        });
      var held = root.querySelector("[data-unconfirmed-jobs]");
      if (held && data.unconfirmed_jobs) {
        held.replaceChildren.apply(held, data.unconfirmed_jobs.map(function (u) {
          var tr = document.createElement("tr");
          [
            cell(u.id, "num"), cell(u.email),
            cell(u.dot_at ? String(u.dot_at).slice(0, 19).replace("T", " ") : ""),
            cell(u.relay || ""), cell(u.worker_id || ""), cell(u.message_id),
            cell((u.said || []).map(function (w) { return w.source + ": " + w.said; })
              .join("; ") || "not asked yet"),
          ].forEach(function (td) { tr.appendChild(td); });
          return tr;
        }));
      }
      // The one action's count follows what the page shows (issue 41): the server refuses it
      // if more went unconfirmed since, so nobody is resent unseen.
      root.querySelectorAll("input[data-value]").forEach(function (el) {
        var key = el.getAttribute("data-value");
        if (key in data) el.value = String(data[key]);
      });
      var box = root.querySelector("[data-chart]");
      if (box && data.chart) box.innerHTML = data.chart;
      recipients(data);
    },
    import: function (data, root, source) {
      fill(root, data);
      var list = root.querySelector("[data-errors]");
      if (list && data.errors) {
        list.replaceChildren.apply(list, data.errors.map(function (e) {
          var li = document.createElement("li");
          li.textContent = "line " + e.line + ": " + e.reason;
          return li;
        }));
      }
      if (data.status === "done" || data.status === "failed") {
        var bar = root.querySelector("[data-running]");
        if (bar) setBar(bar, 100);
        source.close();
      }
    },
    workers: function (data, root) {
      var body = root.querySelector("[data-workers]");
      if (!body) return;
      if (!data.workers.length) return; // keep the "no worker" hint
      body.replaceChildren.apply(body, data.workers.map(function (w) {
        var tr = document.createElement("tr");
        var health = document.createElement("span");
        health.className = "badge";
        health.setAttribute("data-status", w.health);
        health.textContent = w.health;
        var healthCell = cell("");
        healthCell.appendChild(health);
        [
          cell(w.id), cell(w.host), cell(w.pid, "num"), cell(w.concurrency, "num"),
          cell(String(w.started_at).slice(0, 16).replace("T", " ")),
          cell(w.heartbeat_age + " s ago", "num"), healthCell, cell(w.holding, "num"),
        ].forEach(function (td) { tr.appendChild(td); });
        return tr;
      }));
    },
  };

  // The campaign page's recipients table follows the queue too (issue 39): when the counts
  // move, the page as the server draws it now is fetched (its filter and page kept, at most
  // every 2 s) and its rows replace the table's. Nothing runs from that page: it is only read.
  var shownAt = null;
  var fetching = false;
  var lastFetch = 0;
  function recipients(data) {
    var body = document.querySelector("#recipients tbody");
    if (!body || !window.fetch || !window.DOMParser) return;
    var mark = ["done", "sent", "failed", "retry", "sending", "unconfirmed", "cancelled"]
      .map(function (k) { return data[k]; }).join();
    if (shownAt === null) shownAt = mark; // the page was drawn with these counts
    if (mark === shownAt || fetching || Date.now() - lastFetch < 2000) return;
    fetching = true;
    lastFetch = Date.now();
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var page = new DOMParser().parseFromString(html, "text/html");
        var fresh = page.querySelector("#recipients tbody");
        var now = document.querySelector("#recipients tbody");
        if (fresh && now) {
          now.replaceWith(document.importNode(fresh, true));
          shownAt = mark;
        }
      })
      .catch(function () {})
      .then(function () { fetching = false; });
  }

  // Each live block keeps its stream: the page says when it is lost ([data-stream]) and opens
  // it again, at once after a normal end and then every 1 s doubling to 30 s while the server
  // cannot be reached (EventSource retries by itself only while it is CONNECTING).
  document.querySelectorAll("[data-sse]").forEach(function (root) {
    var name = root.getAttribute("data-event");
    var handle = handlers[name];
    if (!handle || !window.EventSource) return;
    var shown = root.querySelector("[data-stream]") || document.querySelector("[data-stream]");
    var delay = 1000;
    var done = false;
    function say(state, text) {
      if (!shown) return;
      shown.setAttribute("data-state", state);
      shown.textContent = text;
    }
    function connect() {
      var source = new EventSource(root.getAttribute("data-sse"));
      var closer = {
        close: function () {
          done = true;
          source.close();
          say("ended", "Live updates: ended");
        },
      };
      source.addEventListener("open", function () {
        delay = 1000;
        say("live", "Live updates: on");
      });
      source.addEventListener(name, function (event) {
        say("live", "Live updates: on");
        handle(JSON.parse(event.data), root, closer);
      });
      source.addEventListener("error", function () {
        if (done) return;
        say("lost", "Live updates: connection lost, reconnecting…");
        if (source.readyState === EventSource.CLOSED) {
          window.setTimeout(connect, delay);
          delay = Math.min(delay * 2, 30000);
        }
      });
    }
    connect();
  });

  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  });

  // The campaign form's audience count (segments): who would receive it now, asked of
  // /api/v1/segments/count as the lists, segment or filter change; the latest answer wins.
  var audience = document.getElementById("audience");
  if (audience && window.fetch && window.URLSearchParams) {
    var form = audience.closest("form");
    var out = document.getElementById("audience-count");
    var asked = 0;
    var timer = null;
    var countNow = function () {
      var params = new URLSearchParams();
      form.querySelectorAll('input[name="lists"]:checked').forEach(function (box) {
        params.append("list", box.value);
      });
      var select = form.querySelector('select[name="segment"]');
      var chosen = select.options[select.selectedIndex];
      var own = form.querySelector('input[name="filter"]').value.trim();
      var text = own || (chosen && chosen.getAttribute("data-filter")) || "";
      if (text) params.set("filter", text);
      if (!params.has("list")) {
        out.textContent = "Choose a list to see how many will receive it.";
        return;
      }
      var mine = ++asked;
      fetch(audience.getAttribute("data-count-url") + "?" + params.toString(), {
        credentials: "same-origin", headers: { Accept: "application/json" },
      }).then(function (r) {
        return r.json().then(function (body) { return { ok: r.ok, body: body }; });
      }).then(function (answer) {
        if (mine !== asked) return;
        var n = answer.body.count;
        out.textContent = answer.ok
          ? n + (n === 1 ? " subscriber" : " subscribers") + " would receive it now."
          : answer.body.error.message;
        out.setAttribute("data-state", answer.ok ? "ok" : "error");
      }).catch(function () {
        if (mine === asked) out.textContent = "Could not count the audience.";
      });
    };
    var later = function () { clearTimeout(timer); timer = setTimeout(countNow, 250); };
    form.addEventListener("input", later);
    form.addEventListener("change", later);
    countNow();
  }
})();
