// The Logs page's script (templates/admin_panel/logs.html).
(function () {
  // Follow the end of the log while the reader is there; keep at most the asked number of lines.
  let stick = true;
  document.body.addEventListener("htmx:wsBeforeMessage", function () {
    const box = document.getElementById("log-scroll");
    stick = !box || box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  });
  function settle() {
    const rows = document.getElementById("log-rows");
    const box = document.getElementById("log-scroll");
    if (!rows || !box) return;
    const max = parseInt(rows.dataset.max || "0", 10);
    const lines = rows.querySelectorAll("tr.line");
    for (let i = 0; max > 0 && i < lines.length - max; i++) lines[i].remove();
    if (stick) box.scrollTop = box.scrollHeight;
  }
  document.body.addEventListener("htmx:wsAfterMessage", settle);
  document.body.addEventListener("htmx:afterSettle", function () { stick = true; settle(); });
  settle();
})();
