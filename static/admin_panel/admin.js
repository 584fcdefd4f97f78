// The console's own script (every page). htmx swaps only 2xx answers by default; the console's actions answer 4xx/5xx with the page
// fragment that shows the error message (400 bad value, 404, 409 busy, 507 would not fit), so swap
// those too, marked as handled.
document.body.addEventListener("htmx:beforeSwap", function (evt) {
  var xhr = evt.detail.xhr;
  if (xhr.status >= 400 && xhr.getResponseHeader("X-Omlx-Fragment") === "1") {
    evt.detail.shouldSwap = true;
    evt.detail.isError = false;
  }
});

// The Settings page's Restart button answers with #restart-state[data-restarting=<health URL>]:
// wait until the server has gone (its health check fails or says it is stopping), then until it
// answers 200 again, and reload the page.
document.body.addEventListener("htmx:afterSwap", function () {
  var box = document.querySelector("[data-restarting]");
  if (!box || box.dataset.polling) return;
  box.dataset.polling = "1";
  var wentDown = false;
  function poll() {
    fetch(box.dataset.restarting, {cache: "no-store"}).then(function (resp) {
      if (resp.status !== 200) wentDown = true;
      else if (wentDown) { window.location.reload(); return; }
      setTimeout(poll, 500);
    }, function () { wentDown = true; setTimeout(poll, 500); });
  }
  setTimeout(poll, 300);
});
