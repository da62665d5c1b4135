// Print in the light theme: a page printed in dark mode would put light text on white paper.
// (book/_static/custom.css holds the print layout; this only switches the colours while printing.)
(function () {
  const html = document.documentElement;
  let screenTheme = null;
  window.addEventListener("beforeprint", function () {
    screenTheme = html.dataset.theme;
    html.dataset.theme = "light";
  });
  window.addEventListener("afterprint", function () {
    if (screenTheme !== null) {
      html.dataset.theme = screenTheme;
      screenTheme = null;
    }
  });
})();
