// The Chat page's script (templates/admin_panel/chat.html): Enter sends, the log follows the answer.
(function () {
  const form = document.getElementById("chat-form");
  let stick = true;  // follow the answer while the reader is at the bottom of the conversation
  form.addEventListener("keydown", function (e) {
    if (e.target.id === "chat-message" && e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  document.body.addEventListener("htmx:wsBeforeMessage", function () {
    const log = document.getElementById("chat-log");
    stick = !log || log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  });
  document.body.addEventListener("htmx:wsAfterMessage", function () {
    const log = document.getElementById("chat-log");
    if (log && stick) log.scrollTop = log.scrollHeight;
  });
  document.body.addEventListener("htmx:oobAfterSwap", function (e) {
    if (e.detail && e.detail.target && e.detail.target.id === "chat-message") e.detail.target.focus();
  });
})();
