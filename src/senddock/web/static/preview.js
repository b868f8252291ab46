// The campaign form's live preview: a moment after the last keystroke, the form's fields go
// to /campaigns/preview through its Preview button, into the sandboxed frame (no script of
// the message runs there; without this file the button does the same by hand).
(function () {
  "use strict";
  var form = document.querySelector("form[data-preview]");
  if (!form) return;
  var button = form.querySelector("[data-preview-button]");
  var timer = null;
  function refresh() {
    timer = null;
    if (form.requestSubmit) form.requestSubmit(button);
    else button.click();
  }
  function soon() {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(refresh, 400);
  }
  form.addEventListener("input", soon);
  form.addEventListener("change", soon);
  refresh();
})();
