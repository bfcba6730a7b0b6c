// The course's additions to sphinx-book-theme (issue 20).
// 1. Display equations fit the column. MathJax 3 does not break lines, so an equation wider than the
//    column (on a phone) is scaled down until it fits, rather than cut off at the screen's edge; it is
//    measured again when the window changes.
// 2. Tables fit the column: one wider than it (maths in its cells does not wrap) is shown stacked, each
//    row a block and each cell labelled with its column's header.
// 3. Search results: their excerpts are the pages' text before MathJax ran (the search page runs none),
//    so formulas would show as raw TeX; they are left out of the excerpts ("…").
(function () {
  "use strict";

  var MATHS = /<span class="math[^"]*">[\s\S]*?<\/span>|<div class="math[^"]*"[^>]*>[\s\S]*?<\/div>/g;
  // searchtools.js declares `const Search`: a global binding, not a property of window
  if (typeof Search !== "undefined" && typeof Search.htmlToText === "function") {
    var htmlToText = Search.htmlToText;
    Search.htmlToText = function (htmlString, anchor) {
      return htmlToText(htmlString.replace(MATHS, "<span>…</span>"), anchor);
    };
  }

  function fitEquations() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (m) {
      if (m.dataset.fontSize === undefined) m.dataset.fontSize = m.style.fontSize || "";
      m.style.fontSize = m.dataset.fontSize;
      var room = m.clientWidth, need = m.scrollWidth;
      if (room > 0 && need > room + 1) {
        var base = parseFloat(m.dataset.fontSize) || 100;
        m.style.fontSize = (base * 0.98 * room / need).toFixed(1) + "%";
      }
    });
  }

  function stackWideTables() {
    document.querySelectorAll("article table").forEach(function (table) {
      table.classList.remove("table-stacked");
      var room = table.parentElement.clientWidth;
      if (table.getBoundingClientRect().width <= room + 1 && table.scrollWidth <= room + 1) return;
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent.replace(/\s+/g, " ").trim();
      });
      table.querySelectorAll("tbody tr").forEach(function (row) {
        Array.prototype.forEach.call(row.children, function (cell, i) {
          if (heads[i]) cell.setAttribute("data-label", heads[i]);
        });
      });
      table.classList.add("table-stacked");
    });
  }

  function fitAll() {
    fitEquations();
    stackWideTables();
  }

  function whenTypeset(callback) {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(callback);
    else callback();
  }

  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(fitAll, 150);
  });
  whenTypeset(fitAll);
})();
