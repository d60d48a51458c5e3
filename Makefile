# `make demo` and `make test` create .venv on first use and reinstall only when a requirements file changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PATH := $(abspath $(VENV))/bin:$(PATH)
export TF_CPP_MIN_LOG_LEVEL := 2
# Python's bytecode cache stays on for the suite's few hundred processes (each stage, rank and worker imports wm's
# modules afresh): a shell's PYTHONDONTWRITEBYTECODE=1 made every one of them compile them again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast lint bench clean-venv

$(STAMP): requirements.txt requirements-dev.txt
	@test -x $(PY) || { echo "== creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "== installing requirements (once; again only when requirements*.txt change)"
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt
	@touch $(STAMP)

## demo: the tiny DoomTakeCover pipeline end to end with 2 MPI workers, then the result table
demo: $(STAMP)
	@echo "== tiny DoomTakeCover pipeline in runs/demo: collect -> train-vae -> encode -> train-mdnrnn ->"
	@echo "   train-controller (CMA-ES in M's dream, mpirun -n 3: 1 master + 2 workers) -> evaluate (real game),"
	@echo "   then the random baseline and the dream scores, the report and the result table"
	$(PY) -m wm pipeline --configs doom_takecover tiny --run runs/demo --mpi 3 --demo
	@echo "== the tiny preset cannot learn; a trained agent ships with the suite: wm/agents/doom_small_s2 (the small"
	@echo "   preset on seed 2, 830.4 +- 477.1 over 100 real episodes as shipped; see its AGENT.md). 10 real episodes"
	@echo "   of it, then the random policy on the same seeds:"
	rm -rf runs/demo-agent && $(PY) -m wm agents copy doom_small_s2 runs/demo-agent
	$(PY) -m wm evaluate --run runs/demo-agent --episodes 10 --gifs 1 --force
	$(PY) -m wm evaluate --run runs/demo-agent --random --episodes 10 --gifs 0
	$(PY) -m wm results --runs runs/demo-agent --out runs/demo-agent/results --resamples 2000
	@echo "== watch it: runs/demo-agent/eval/real/episode_000.gif. Play in its dream: python -m wm play --run"
	@echo "   runs/demo-agent (a pygame window; <- -> dodge, r restart), or python -m wm tui runs/demo-agent and press p"
	@echo "== a CarRacing agent ships too: wm/agents/carracing_small_s0 (the small preset on seed 0; its AGENT.md). Drive"
	@echo "   in its dream: python -m wm play --run wm/agents/carracing_small_s0 (<- -> steer, up gas, down brake)"

# pytest-xdist workers: one per core this process may use, plus one. The tests wait part of the time on the
# stages, ranks and TUIs they start: on 2 idle cores one worker a core kept 1.80–1.84 cores busy (8 min 11 s –
# 8 min 25 s), a third worker 1.92 (7 min 37 s – 7 min 52 s) (docs/results/timings.md, "The test suite").
# TEST_WORKERS=N overrides it.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(len(getattr(os, 'sched_getaffinity', lambda _: range(os.cpu_count() or 1))(0)) + 1)")

## test: the whole suite (slow end-to-end tests included) on every core (pytest-xdist, work stealing; the slow tier
## starts first); `make test-fast` skips those marked slow. One process: `.venv/bin/python -m pytest -q`
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not slow"

## lint: ruff's lint and format checks (CI runs them before the tests)
lint: $(STAMP)
	$(PY) -m ruff check wm tui mpi tests bench
	$(PY) -m ruff format --check wm tui mpi tests bench

## bench: every benchmark under bench/, each printing one JSON object (docs/results/timings.md has the figures)
bench: $(STAMP)
	@for b in $(wildcard bench/*.py); do echo "== $$b"; $(PY) $$b; done

clean-venv:
	rm -rf $(VENV)
