# Two commands for users: `make lab` and `make test`. Everything runs in ./.venv.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Same environment for the executor, nbval and the tests: reproducible hashing.
export PYTHONHASHSEED := 0

.PHONY: lab test site lint unit nbval notebooks install doctor bench lock screenshots errors-doc gpu-check clean \
	test-wheel test-bootstrap test-versions workshop-check release-check check-links

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,jax,lab,site]'
	touch $(STAMP)

install: $(STAMP)

# Loopback only, with Jupyter's random token. --allow-root only when run as root (containers, CI boxes).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

# No news pop-up or update check (tools/lab-overrides.json, this venv's JupyterLab only); opens on notebook 00.
lab: $(STAMP)
	install -D -m 644 tools/lab-overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=notebooks $(ROOT_FLAG) \
		--LabApp.news_url=None --LabApp.default_url=/lab/tree/00_start_here.ipynb

# Unit tests first, then strict nbval over every notebook. Stored outputs are the simulated-device
# run, so notebooks are executed and compared with GPUs hidden, on any machine. The unit tests keep both cores
# busy and a notebook run about one, so strict nbval with the Eigen kernels (TF_ENABLE_ONEDNN_OPTS=0) runs beside
# the unit tests' parallel part (its memory limits kept, its times not measured: they share the cores); then
# the oneDNN run, alone, with every limit of the performance budget.
test: lint
	@status=0; \
	$(MAKE) --no-print-directory unit NBVAL_BESIDE=0 || status=$$?; \
	$(MAKE) --no-print-directory nbval NBVAL_FAMILIES=1 || status=$$?; \
	exit $$status

# The course as a static website from the stored outputs (nothing runs): build/site, MkDocs + mkdocs-jupyter.
# tests/project/test_site.py builds it once and opens every page in Chromium (part of `make unit`).
site: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) tools/build_site.py

# ruff (pyflakes, pycodestyle's errors, bugbear) on the kit, the tests and the tools; mypy on the kit's types.
lint: $(STAMP)
	$(VENV)/bin/ruff check gputrain_kit tests tools
	$(VENV)/bin/mypy

# Independent test files run on $(UNIT_WORKERS) processes (pytest-xdist; a file's tests stay together, sharing
# their module's fixtures), the slowest files first (tests/file_seconds.json: no worker ends on a long file alone);
# then the tests marked `timing` (a widget's update time, shares of busy time) run alone, where nothing else
# competes for the cores. Both parts always run; either failing fails `make unit`. One worker per core, 2 to 4 (a
# third worker on 2 cores measured no faster: the tests keep both cores busy). Beside them, in a process of its own,
# tests/project/test_install.py, which mostly waits on PyPI (pip's dry runs): it would hold a worker idle.
UNIT_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); if [ $$n -lt 2 ]; then n=2; elif [ $$n -gt 4 ]; then n=4; fi; echo $$n)
UNIT_IDLE := tests/project/test_install.py
# The files that mark tests `timing` (collecting all of tests/ again would take about 25 s).
UNIT_TIMING = $(shell grep -rlE 'mark\.timing' tests --include='test_*.py' | sort)
# NBVAL_BESIDE=0 (`make test`): strict nbval with that kernel family runs beside the workers too, times unmeasured.
NBVAL_BESIDE ?=
unit: $(STAMP)
	@status=0; log=$$(mktemp); nblog=$$(mktemp); nb=""; \
	$(PY) -m pytest $(UNIT_IDLE) -p no:xdist -p no:cacheprovider -m "not timing and not wheel and not platform" \
	  > $$log 2>&1 & idle=$$!; \
	if [ -n "$(NBVAL_BESIDE)" ]; then \
	  $(MAKE) --no-print-directory nbval NBVAL_FAMILIES="$(NBVAL_BESIDE)" GPUTRAIN_BUDGET_TIME=off > $$nblog 2>&1 & nb=$$!; \
	fi; \
	$(PY) -m pytest tests -n $(UNIT_WORKERS) --dist loadfile --no-loadscope-reorder --ignore=$(UNIT_IDLE) \
	  -m "not timing and not wheel and not platform" $(UNIT_ARGS) || status=$$?; \
	wait $$idle || status=$$?; echo "== $(UNIT_IDLE) (beside the workers) =="; tail -n 30 $$log; rm -f $$log; \
	if [ -n "$$nb" ]; then \
	  echo "== strict nbval, TF_ENABLE_ONEDNN_OPTS=$(NBVAL_BESIDE) (beside the workers) =="; \
	  if wait $$nb; then tail -n 40 $$nblog; else status=1; cat $$nblog; fi; \
	fi; rm -f $$nblog; \
	$(PY) -m pytest $(UNIT_TIMING) -p no:xdist -m timing $(UNIT_ARGS) || status=$$?; \
	exit $$status

# Strict nbval once per CPU kernel family (TensorFlow's oneDNN kernels, then its portable Eigen kernels: notebook
# 00), forced with TF_ENABLE_ONEDNN_OPTS, so a stored output that changes with the kernels fails on any machine,
# whichever family this CPU runs by default. NBVAL_FAMILIES="0" runs one family only.
NBVAL_FAMILIES ?= 1 0
GPUTRAIN_BUDGET_TIME ?= on
NBVAL_NOTEBOOKS ?= notebooks
nbval: $(STAMP)
	@status=0; for family in $(NBVAL_FAMILIES); do \
	  echo "== strict nbval with TF_ENABLE_ONEDNN_OPTS=$$family =="; \
	  TF_ENABLE_ONEDNN_OPTS=$$family CUDA_VISIBLE_DEVICES= PYTHONPATH=tests GPUTRAIN_BUDGET_TIME=$(GPUTRAIN_BUDGET_TIME) \
	    $(PY) -m pytest --nbval --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider -p nbval_budget $(NBVAL_NOTEBOOKS) $(NBVAL_ARGS) \
	    || status=$$?; \
	done; exit $$status

notebooks: $(STAMP)
	CUDA_VISIBLE_DEVICES= $(PY) tools/build_notebooks.py $(NB)

# Every notebook against the floor, the slowest cells, every widget, the unit-test files: docs/performance.md
# (BENCH_ARGS=--no-unit skips the unit tests).
bench: $(STAMP)
	CUDA_VISIBLE_DEVICES= $(PY) tools/bench.py $(BENCH_ARGS) $(NB)

# Re-pin constraints.txt for every supported Python after changing pyproject.toml (tools/lock.sh).
lock:
	bash tools/lock.sh

# Every notebook run in real JupyterLab + Chromium, a screenshot of each in artifacts/browser/ (minutes).
screenshots: $(STAMP)
	CUDA_VISIBLE_DEVICES= GPUTRAIN_SCREENSHOTS=1 $(PY) -m pytest tests/project/test_browser.py -k every_notebook

# docs/errors.md: every public function's error cases, from tests/error_cases.py (checked by the tests).
errors-doc: $(STAMP)
	CUDA_VISIBLE_DEVICES= $(PY) tests/error_cases.py --write docs/errors.md

# The wheel without a clone: build it, install it in a clean venv, copy the notebooks out, run notebook 00
# (minutes: not part of `make test`).
test-wheel: $(STAMP)
	$(PY) -m pytest tests/project/test_wheel.py -m wheel -p no:cacheprovider

# Once the course is published: every badge, the first cell's repository, each notebook's page answer (needs the
# internet; a maintainer runs it after publishing or after changing gputrain_kit.course.REPOSITORY).
check-links: $(STAMP)
	$(PY) tools/check_links.py

# The release steps of .github/workflows/release.yml, here: sdist and wheel (python -m build), what each carries,
# then the wheel in a clean venv runs notebook 00 (minutes: not part of `make test`).
release-check: $(STAMP)
	CUDA_VISIBLE_DEVICES= $(PY) tools/release_check.py

# Colab/Kaggle simulated: a clean venv with another TensorFlow and Keras preinstalled runs a notebook's first cell,
# which must install the kit without replacing them (minutes: not part of `make test`).
test-bootstrap: $(STAMP)
	$(PY) -m pytest tests/project/test_bootstrap.py -m platform -p no:cacheprovider

doctor: $(STAMP)
	$(PY) -m gputrain_kit doctor

# The claim tests on the oldest supported TensorFlow/Keras, in .venv-versions/ without constraints.txt (minutes:
# not part of `make test`); `make test-versions TF=2.19 KERAS=3.10.0` tries another point (docs/versions.md).
test-versions:
	$(PYTHON) tools/test_versions.py $(if $(TF),--tf $(TF)) $(if $(KERAS),--keras $(KERAS)) $(VERSIONS_ARGS)

# On a machine with NVIDIA GPUs: TensorFlow's CUDA wheels, then the whole course with real GPUs (doctor, the
# GPU-only claims, every notebook, the unit tests), recorded in artifacts/gpu/report.json (docs/gpu.md).
GPU_STAMP := $(VENV)/.installed-gpu
$(GPU_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[gpu,test,jax,lab,site]'
	touch $(GPU_STAMP)

gpu-check: $(GPU_STAMP)
	$(PY) tools/gpu_check.py $(GPU_CHECK_ARGS)

# JupyterHub with workshop/jupyterhub_config.py on 127.0.0.1, ATTENDEES attendees running notebook 00 at once in
# their own servers: time, memory, GPU per attendee (.venv-hub/, minutes the first time; docs/instructors.md).
ATTENDEES ?= 4
workshop-check: $(STAMP)
	$(PY) tools/workshop_check.py --attendees $(ATTENDEES) $(WORKSHOP_CHECK_ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
