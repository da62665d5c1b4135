# make book  : build the HTML book into _build/html (warnings are errors; notebooks are rendered from
#              their committed outputs, not re-executed)
# make test  : unit/property tests, notebook-convention tests, then nbval over every notebook in _toc.yml
# make execute [NB=notebooks/01_permutation_problem.ipynb] : re-execute notebooks in place, commit the outputs
# make clean : remove the build (keeps .venv)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: book test unit notebooks execute clean venv

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --keep-going --path-output .
	@echo "Book built: _build/html/index.html"

test: unit notebooks

unit: $(STAMP)
	$(BIN)/python -m pytest tests -q

notebooks: $(STAMP)
	$(BIN)/python -m pytest --nbval -q --nbval-sanitize-with tests/nbval_sanitize.cfg $$($(BIN)/python tests/notebook_tools.py list)

execute: $(STAMP)
	$(BIN)/python tests/notebook_tools.py execute $(NB)

clean:
	rm -rf _build
