// Reservations: picking a host in the booking form (or the timeline filter) reloads the
// page for that host, so its GPUs can be ticked. Without script, "Show" does the same.
"use strict";

(function () {
  function onReady(fn) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fn);
    else fn();
  }

  onReady(function () {
    document.querySelectorAll("select[data-resv-host]").forEach(function (select) {
      select.addEventListener("change", function () {
        const url = new URL(window.location.href);
        url.searchParams.set("host", select.value);
        url.searchParams.delete("notice");
        url.hash = select.closest("#book") ? "book" : "timeline";
        window.location.assign(url.toString());
      });
    });
  });
})();
