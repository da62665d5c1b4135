"""Small fixes to the HTML the Jupyter Book 1 stack produces, found by tests/test_browser.py.

- Some extensions (sphinx-thebe, sphinx-togglebutton) register their inline scripts twice; the second
  ``const THEBE_JS_URL`` is a JavaScript error in every page's console. Each page keeps one copy.
- pydata-sphinx-theme reports "invalid theme mode" when no default mode is set; set it to "auto", the
  theme's own default (follow the reader's system setting).
"""


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (getattr(script, "filename", str(script)) or "",  # None and "" both mean an inline script
               tuple(sorted((k, str(v)) for k, v in getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _default_mode(app, config):
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}


def setup(app):
    app.connect("config-inited", _default_mode)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)  # after the others
    return {"parallel_read_safe": True, "parallel_write_safe": True}
