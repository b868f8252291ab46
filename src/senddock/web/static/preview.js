// The campaign form's live preview: a moment after the last keystroke, the form's fields go
// to /campaigns/preview through its Preview button, into the sandboxed frame (no script of
// the message runs there; without this file the button does the same by hand).
(function () {
  "use strict";
  var form = document.querySelector("form[data-preview]");
  if (!form) return;
  var button = form.querySelector("[data-preview-button]");
  var timer = null;
  var saving = false;
  function refresh() {
    timer = null;
    if (saving) return;
    if (form.requestSubmit) form.requestSubmit(button);
    else button.click();
  }
  function soon() {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(refresh, 400);
  }
  form.addEventListener("input", soon);
  form.addEventListener("change", soon);
  // The form is being saved: no preview may follow, or its submission would replace the save's
  // (a form has one planned navigation; the textarea's change event fires on that very click).
  form.addEventListener("submit", function (event) {
    if (event.submitter === button) return;
    saving = true;
    if (timer !== null) clearTimeout(timer);
  });
  refresh();
})();
