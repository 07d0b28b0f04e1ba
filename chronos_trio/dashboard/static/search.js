// chronos_trio dashboard: the search page's "select every row" box, and a
// bulk action's progress page that goes on by itself (its form is posted
// again after a short pause; "Stop" leaves the page between two steps).
(function () {
  "use strict";
  var all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      var boxes = document.querySelectorAll("input.pick");
      for (var i = 0; i < boxes.length; i++) { boxes[i].checked = all.checked; }
    });
  }
  var next = document.querySelector("form[data-autosubmit]");
  if (next) { window.setTimeout(function () { next.submit(); }, 300); }
})();
