(function () {
  "use strict";
  function cellValue(td) {
    var v = td.getAttribute("data-v");
    if (v !== null && v !== "") { return parseFloat(v); }
    return td.textContent.trim().toLowerCase();
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var desc = !th.classList.contains("sorted-desc");
    rows.sort(function (a, b) {
      var x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
      var r = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
      return desc ? -r : r;
    });
    Array.prototype.forEach.call(th.parentNode.children, function (h) {
      h.classList.remove("sorted-asc", "sorted-desc");
    });
    th.classList.add(desc ? "sorted-desc" : "sorted-asc");
    rows.forEach(function (r) { body.appendChild(r); });
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener("click", function () { sortBy(table, col, th); });
    });
  });
  // Zoom and pan on every plot: the wheel zooms around the pointer, a drag pans, a double
  // click shows the whole plot again. The view never leaves the plot.
  function zoomable(svg) {
    var vb = svg.viewBox && svg.viewBox.baseVal;
    if (!vb || !vb.width || !vb.height) { return null; }
    var home = { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
    // Labels keep their size: each is scaled about its anchor by the inverse of the zoom
    // (before its own transform, such as a rotation about the same anchor).
    var labels = Array.prototype.map.call(svg.querySelectorAll("text"), function (t) {
      return { el: t, x: parseFloat(t.getAttribute("x")) || 0,
               y: parseFloat(t.getAttribute("y")) || 0, own: t.getAttribute("transform") || "" };
    });
    function keepLabels(k) {
      labels.forEach(function (l) {
        var t = k === 1 ? l.own : "translate(" + l.x + " " + l.y + ") scale(" + k + ") translate(" +
                (-l.x) + " " + (-l.y) + ") " + l.own;
        if (t) { l.el.setAttribute("transform", t); } else { l.el.removeAttribute("transform"); }
      });
    }
    function show(x, y, w, h) {
      w = Math.min(home.w, w); h = Math.min(home.h, h);
      x = Math.max(home.x, Math.min(home.x + home.w - w, x));
      y = Math.max(home.y, Math.min(home.y + home.h - h, y));
      svg.setAttribute("viewBox", x + " " + y + " " + w + " " + h);
      // The page scale of the viewBox (preserveAspectRatio meet) against the whole plot's.
      keepLabels(Math.max(w / home.w, h / home.h));
    }
    function at(e) {
      var r = svg.getBoundingClientRect();
      return { x: vb.x + (e.clientX - r.left) / r.width * vb.width,
               y: vb.y + (e.clientY - r.top) / r.height * vb.height };
    }
    svg.addEventListener("wheel", function (e) {
      e.preventDefault();
      var p = at(e), k = e.deltaY < 0 ? 0.8 : 1.25;
      var w = Math.min(home.w, vb.width * k), h = Math.min(home.h, vb.height * k);
      show(p.x - (p.x - vb.x) * w / vb.width, p.y - (p.y - vb.y) * h / vb.height, w, h);
    }, { passive: false });
    var drag = null;
    svg.addEventListener("pointerdown", function (e) {
      drag = { x: e.clientX, y: e.clientY, vx: vb.x, vy: vb.y };
      if (svg.setPointerCapture && e.pointerId !== undefined) {
        try { svg.setPointerCapture(e.pointerId); } catch (err) { /* synthetic event */ }
      }
    });
    svg.addEventListener("pointermove", function (e) {
      if (!drag) { return; }
      var r = svg.getBoundingClientRect();
      show(drag.vx - (e.clientX - drag.x) / r.width * vb.width,
           drag.vy - (e.clientY - drag.y) / r.height * vb.height, vb.width, vb.height);
    });
    svg.addEventListener("pointerup", function () { drag = null; });
    svg.addEventListener("pointercancel", function () { drag = null; });
    svg.addEventListener("dblclick", function () { show(home.x, home.y, home.w, home.h); });
    svg.classList.add("zoomable");
    return home;
  }
  var problems = [];
  var expected = parseInt(document.documentElement.getAttribute("data-plots"), 10);
  var plots = document.querySelectorAll("figure.plot svg");
  var width = document.documentElement.clientWidth;
  if (plots.length !== expected) { problems.push(plots.length + " plots of " + expected); }
  Array.prototype.forEach.call(plots, function (svg, i) {
    if (svg.childElementCount === 0) { problems.push("plot " + (i + 1) + " is empty"); }
    var box = svg.getBoundingClientRect();
    if (box.width < 100 || box.height < 20) { problems.push("plot " + (i + 1) + " is not laid out"); }
    if (box.right > width + 0.5) { problems.push("plot " + (i + 1) + " is clipped at " + width + " px"); }
    var home = zoomable(svg);
    if (!home) { problems.push("plot " + (i + 1) + " has no viewBox to zoom"); return; }
    // The zoom works: a wheel step in the middle narrows the view, a double click restores it;
    // a label is as tall on the page zoomed as not.
    var mid = { clientX: box.left + box.width / 2, clientY: box.top + box.height / 2,
                deltaY: -100, bubbles: true, cancelable: true };
    var label = svg.querySelector("text");
    var before = label ? label.getBoundingClientRect().height : 0;
    svg.dispatchEvent(new WheelEvent("wheel", mid));
    var zoomed = svg.viewBox.baseVal.width;
    var during = label ? label.getBoundingClientRect().height : 0;
    svg.dispatchEvent(new MouseEvent("dblclick", mid));
    if (!(zoomed < home.w) || svg.viewBox.baseVal.width !== home.w) {
      problems.push("plot " + (i + 1) + " does not zoom");
    }
    if (label && Math.abs(during - before) > 0.5) {
      problems.push("plot " + (i + 1) + "'s labels scale with the zoom (" + before.toFixed(1) +
                    " px tall, " + during.toFixed(1) + " px zoomed)");
    }
  });
  if (tables.length === 0) { problems.push("no table"); }
  // Nothing clipped: every table fits its column without a scroll bar, and the page fits the
  // window.
  Array.prototype.forEach.call(document.querySelectorAll(".scroll"), function (div, i) {
    if (div.scrollWidth > div.clientWidth + 1) {
      problems.push("table " + (i + 1) + " is clipped at " + width + " px (" + div.scrollWidth +
                    " px wide in " + div.clientWidth + ")");
    }
  });
  if (document.documentElement.scrollWidth > width + 1) {
    problems.push("the page is " + document.documentElement.scrollWidth + " px wide in a " + width + " px window");
  }
  if (problems.length === 0) {
    document.documentElement.setAttribute("data-pinwise-check", "ok");
    console.log("pinwise-report: ok (" + plots.length + " plots, " + tables.length + " tables, " +
                width + " px, nothing clipped, plots zoom, labels keep their size)");
  } else {
    document.documentElement.setAttribute("data-pinwise-check", "failed: " + problems.join("; "));
    console.error("pinwise-report: " + problems.join("; "));
  }
})();
