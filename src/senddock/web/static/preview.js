// The campaign form's live preview: a moment after the last keystroke, a copy of the form's
// fields goes to /campaigns/preview through a form of its own, into the preview frame. The
// campaign form itself is only ever submitted by Save draft: a form has one planned
// navigation, and a preview sent through it could replace the save's (issue 35). Without
// this file the Preview button posts the campaign form into the frame by hand.
(function () {
  "use strict";
  var form = document.querySelector("form[data-preview]");
  var carrier = document.querySelector("form[data-preview-form]");
  if (!form || !carrier) return;
  var button = form.querySelector("[data-preview-button]");
  var timer = null;
  var saving = false;

  function refresh() {
    timer = null;
    if (saving) return;
    var fields = [];
    new FormData(form).forEach(function (value, name) {
      if (typeof value !== "string") return;
      var input = document.createElement("input");
      input.type = "hidden";
      input.name = name;
      input.value = value;
      fields.push(input);
    });
    carrier.replaceChildren.apply(carrier, fields);
    carrier.submit(); // no submit event, no validation: a preview of a half-written form
    carrier.replaceChildren(); // its fields were read by submit(): no second copy in the page
  }
  function soon() {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(refresh, 400);
  }
  form.addEventListener("input", soon);
  form.addEventListener("change", soon);
  if (button) {
    button.addEventListener("click", function (event) {
      event.preventDefault();
      refresh();
    });
  }
  // Save draft: the one submission this form makes. A second click (a double click, or one
  // while the answer is on its way) sends nothing more, so one click stores one draft.
  form.addEventListener("submit", function (event) {
    if (saving) {
      event.preventDefault();
      return;
    }
    saving = true;
    if (timer !== null) clearTimeout(timer);
  });
  // Back from the saved draft (the page restored from the back/forward cache): usable again.
  window.addEventListener("pageshow", function (event) {
    if (event.persisted) saving = false;
  });
  refresh();
})();
