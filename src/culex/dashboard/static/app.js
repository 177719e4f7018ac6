// The culex dashboard's only script: live refresh, confirmations, "tick all", "show all"
// and the throughput chart. Nothing from a task is ever inserted as HTML: refreshed parts
// come from the server's own (escaped) page, and long text is set with textContent.
(function () {
  "use strict";
  const INTERVAL_MS = 3000;
  let timer = null;
  let chart = null;
  let charting = false;
  let refreshes = 0;
  let loads = 0; // the newest chart load wins: an older answer that comes late is dropped

  function liveOn() {
    const button = document.getElementById("live-toggle");
    return button !== null && button.dataset.state === "on";
  }

  function anyTicked(element) {
    return element.querySelector("input[type=checkbox]:checked") !== null;
  }

  async function refresh() {
    const mine = ++refreshes;
    const response = await fetch(window.location.href, {
      credentials: "same-origin",
      headers: { "X-Culex-Live": "1" },
    });
    if (!response.ok || !liveOn() || mine !== refreshes) return;
    const text = await response.text();
    if (mine !== refreshes) return; // a newer refresh started meanwhile: it wins
    // Nothing is swapped while a question is asked: its form must stay the one answered.
    const asking = document.getElementById("confirm-dialog");
    if (asking !== null && asking.open) return;
    const fresh = new DOMParser().parseFromString(text, "text/html");
    document.querySelectorAll("[data-live][id]").forEach(function (old) {
      // Keep a list whose tasks the user is ticking.
      if (old.hasAttribute("data-keep-when-selected") && anyTicked(old)) return;
      const replacement = fresh.getElementById(old.id);
      if (replacement === null) return;
      // Keep each <details> (a task's errors) open or closed as the user left it.
      old.querySelectorAll("details[id]").forEach(function (shown) {
        const same = replacement.querySelector("#" + CSS.escape(shown.id));
        if (same !== null) same.open = shown.open;
      });
      old.replaceWith(document.adoptNode(replacement));
    });
    if (charting) await loadChart();
    document.body.dataset.refreshed = String(Date.now());
  }

  function schedule() {
    stop();
    if (liveOn() && document.visibilityState === "visible") {
      timer = window.setInterval(function () { refresh().catch(function () {}); }, INTERVAL_MS);
    }
  }

  function stop() {
    if (timer !== null) window.clearInterval(timer);
    timer = null;
  }

  function setupLive() {
    const button = document.getElementById("live-toggle");
    if (button === null) return;
    button.addEventListener("click", function () {
      const on = button.dataset.state !== "on";
      button.dataset.state = on ? "on" : "off";
      button.setAttribute("aria-pressed", on ? "true" : "false");
      button.textContent = on ? "Live" : "Paused";
      schedule();
    });
    document.addEventListener("visibilitychange", schedule);
    schedule();
  }

  // Forms and buttons with data-confirm ask first (bulk actions, retry, cancel). A bulk
  // action asks with its chosen action's own words and count (data-confirm-ticked, where
  // {n} is how many are ticked, or data-confirm-filter).
  function question(form, submitter) {
    const action = form.querySelector("select[name=action]");
    if (submitter && submitter.name === "scope" && action !== null) {
      const option = action.options[action.selectedIndex];
      const words = submitter.value === "filter" ? option.dataset.confirmFilter : option.dataset.confirmTicked;
      if (words) {
        const ticked = form.querySelectorAll("input[name=id]:checked").length;
        return words.replace("{n}", ticked.toLocaleString("en-US"));
      }
    }
    return (submitter && submitter.dataset.confirm) || form.dataset.confirm;
  }

  // The question is asked in a dialog of the page whose default button is Cancel (it has
  // the focus: Enter or Escape cancels); the other button names the action.
  function confirmDialog() {
    let dialog = document.getElementById("confirm-dialog");
    if (dialog !== null) return dialog;
    dialog = document.createElement("dialog");
    dialog.id = "confirm-dialog";
    dialog.setAttribute("aria-labelledby", "confirm-question");
    const text = document.createElement("p");
    text.id = "confirm-question";
    const buttons = document.createElement("form");
    buttons.method = "dialog";
    buttons.className = "buttons";
    const no = document.createElement("button");
    no.value = "cancel";
    no.textContent = "Cancel";
    no.autofocus = true;
    no.dataset.confirmNo = "";
    const yes = document.createElement("button");
    yes.value = "yes";
    yes.className = "warn";
    yes.dataset.confirmYes = "";
    buttons.append(no, yes);
    dialog.append(text, buttons);
    document.body.append(dialog);
    return dialog;
  }

  function ask(words, label, then) {
    const dialog = confirmDialog();
    dialog.querySelector("#confirm-question").textContent = words; // text, never HTML
    dialog.querySelector("[data-confirm-yes]").textContent = label;
    dialog.returnValue = "";
    dialog.addEventListener("close", function () {
      if (dialog.returnValue === "yes") then();
    }, { once: true });
    dialog.showModal();
    dialog.querySelector("[data-confirm-no]").focus();
  }

  function setupConfirm() {
    document.addEventListener("submit", function (event) {
      const form = event.target;
      const submitter = event.submitter;
      if (form.method === "dialog") return;
      if (form.dataset.confirmed === "1") {
        delete form.dataset.confirmed;
        return;
      }
      const asked = question(form, submitter);
      if (!asked) return;
      event.preventDefault();
      // (the action's button says what it does: the verb the question starts with)
      let label = asked.split(" ")[0].replace(/\W+$/, "") || "OK";
      if (label === "Cancel") label = "Yes, cancel";
      ask(asked, label, function () {
        form.dataset.confirmed = "1";
        form.requestSubmit(submitter || undefined);
      });
    });
  }

  function setupClicks() {
    document.addEventListener("click", function (event) {
      const target = event.target;
      if (target.matches("[data-select-all]")) {
        const form = target.closest("form");
        form.querySelectorAll("input[name=id]").forEach(function (box) {
          box.checked = target.checked;
        });
      }
      if (target.matches("[data-text-url]")) showAll(target);
    });
    document.addEventListener("change", function (event) {
      if (event.target.matches("[data-autosubmit]")) event.target.form.submit();
    });
  }

  async function showAll(button) {
    const response = await fetch(button.dataset.textUrl, { credentials: "same-origin" });
    if (!response.ok) return;
    const pre = button.parentElement.querySelector("pre");
    pre.textContent = await response.text(); // text, never HTML
    pre.classList.remove("cut");
    button.remove();
  }

  const COLORS = { processed: "#2f6fde", failed: "#e0a100", dead: "#d23f3f" };

  // The chart tells time in UTC, as every date on the pages does (not in the browser's
  // zone beside them): 24-hour times, and the date at midnight.
  let FULL = null;
  let HOUR = null;
  let DAY = null;
  function utc(ts) { return window.uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); }
  function utcTicks(u, splits) {
    return splits.map(function (ts) {
      const at = utc(ts);
      return at.getHours() === 0 && at.getMinutes() === 0 ? DAY(at) : HOUR(at);
    });
  }

  // The width inside the chart's box (its padding left out), so the plot never spills out.
  function plotWidth(box) {
    const style = window.getComputedStyle(box);
    const inner = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return Math.max(Math.floor(inner), 200);
  }

  async function loadChart() {
    if (FULL === null) {
      FULL = window.uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}");
      HOUR = window.uPlot.fmtDate("{HH}:{mm}");
      DAY = window.uPlot.fmtDate("{MM}-{DD}");
    }
    const mine = ++loads;
    const box = document.getElementById("chart");
    const picked = document.querySelector("#chart-range [aria-pressed=true]");
    const range = picked ? picked.dataset.range : "hour";
    const address = new URL(box.dataset.seriesUrl, window.location.href); // (may hold ?after=)
    address.searchParams.set("range", range);
    const response = await fetch(address.toString(), {
      credentials: "same-origin",
    });
    if (!response.ok || mine !== loads) return;
    const series = await response.json();
    if (mine !== loads) return;
    // The last step is still counting (series.partial): drawn, it would dip towards 0 at
    // every refresh, so the lines end at the last whole step (its counts are in the data).
    const whole = series.partial ? series.t.length - 1 : series.t.length;
    const data = [series.t, series.processed, series.failed, series.dead].map(function (column) {
      return column.slice(0, whole);
    });
    // What the chart shows, for a reader of the page (and its tests).
    box.dataset.points = String(series.t.length);
    box.dataset.drawn = String(whole);
    box.dataset.step = series.step;
    box.dataset.processed = String(series.processed.reduce(function (a, b) { return a + b; }, 0));
    if (chart !== null && chart.__range === range) {
      chart.setData(data);
      return;
    }
    if (chart !== null) chart.destroy();
    chart = new window.uPlot(
      {
        width: plotWidth(box),
        height: 240,
        series: [
          { label: "UTC", value: function (u, ts) { return ts == null ? "--" : FULL(utc(ts)); } },
          { label: "processed", stroke: COLORS.processed, width: 2, fill: "rgba(47,111,222,0.08)", points: { show: false } },
          { label: "failed", stroke: COLORS.failed, width: 2, points: { show: false } },
          { label: "dead", stroke: COLORS.dead, width: 2, points: { show: false } },
        ],
        axes: [{ values: utcTicks }, { size: 50 }],
        scales: { x: { time: true } },
        tzDate: utc,
      },
      data,
      box,
    );
    chart.__range = range;
  }

  function setupChart() {
    const box = document.getElementById("chart");
    if (box === null || typeof window.uPlot === "undefined") return;
    charting = true;
    document.querySelectorAll("#chart-range button").forEach(function (button) {
      button.addEventListener("click", function () {
        document.querySelectorAll("#chart-range button").forEach(function (other) {
          other.setAttribute("aria-pressed", other === button ? "true" : "false");
        });
        loadChart();
      });
    });
    loadChart().then(function () {}, function () {});
    window.addEventListener("resize", function () {
      if (chart !== null) chart.setSize({ width: plotWidth(box), height: 240 });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupLive();
    setupConfirm();
    setupClicks();
    setupChart();
  });
})();
