// /docs and /redoc: starts Swagger UI or ReDoc from a file, as the pages' CSP allows no
// inline script (board/apidocs.py). The viewers' own files ship in the fastapi-offline
// package; nothing is loaded from another origin.
(function () {
  "use strict";
  var swagger = document.getElementById("swagger-ui");
  if (swagger && window.SwaggerUIBundle) {
    window.SwaggerUIBundle({
      url: swagger.dataset.spec,
      dom_id: "#swagger-ui",
      presets: [window.SwaggerUIBundle.presets.apis, window.SwaggerUIBundle.SwaggerUIStandalonePreset],
      layout: "BaseLayout",
      deepLinking: true,
      showExtensions: true,
      // The default sends the description to a third party's validator.
      validatorUrl: null,
    });
  }
  var redoc = document.getElementById("redoc");
  if (redoc && window.Redoc) {
    window.Redoc.init(redoc.dataset.spec, {}, redoc);
  }
})();
