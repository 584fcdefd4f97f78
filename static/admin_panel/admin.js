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
