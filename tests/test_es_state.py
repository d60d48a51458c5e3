"""The optimiser's checkpoint (`controller/es_state.npz`, wm/es/state.py) is arrays and plain values: a resume through
the file is bit-identical for every algorithm, the file reads with `allow_pickle=False`, a tampered file is refused
without running anything, and an older version's pickled `es_state.pkl` is refused in one line, never unpickled (a
planted one whose `__reduce__` would create a file creates nothing), the run dir left byte for byte as it was."""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import history, stage, toy_cfg
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.es import state as es_state
from wm.es.cmaes import CMAES
from wm.es.others import PEPG, OpenES, SimpleGA, es_from_state

MAKERS = {
    "cma": lambda: CMAES(12, popsize=10, sigma0=0.3, weight_decay=0.01, seed=5),
    "openes": lambda: OpenES(12, 10, 0.3, 0.01, 5, True, None, lr=0.05),
    "pepg": lambda: PEPG(12, 10, 0.3, 0.01, 5, True, None, lr=0.05),
    "ga": lambda: SimpleGA(12, 10, 0.3, 0.01, 5, True, None, elite_ratio=0.2),
}


def sphere(x: np.ndarray) -> np.ndarray:
    return -np.sum((x - 0.3) ** 2, axis=1)


def flat(tree):
    """A state's plain values as JSON and its arrays as bytes with dtype and shape: equal means identical."""
    arrays = []

    def walk(x):
        if isinstance(x, np.ndarray):
            arrays.append((x.dtype.str, x.shape, np.ascontiguousarray(x).tobytes()))
            return "<array>"
        if isinstance(x, np.generic):
            return [type(x).__name__, x.item()]
        if isinstance(x, dict):
            return [[walk(k), walk(v)] for k, v in x.items()]
        if isinstance(x, (list, tuple)):
            return [type(x).__name__, [walk(v) for v in x]]
        return x

    return json.dumps(walk(tree)), arrays


@pytest.mark.parametrize("algo", list(MAKERS))
def test_resume_through_the_file_is_bit_identical(tmp_path, algo):
    """40 generations straight vs 17, the state saved to a file and read back into a new process's worth of
    objects, then 23 more: every population and seed asked, the mean, σ and the whole state, bit for bit."""
    N, k = 40, 17
    straight = MAKERS[algo]()
    asked, seeds = [], []
    for _ in range(N):
        x = straight.ask()
        asked.append(x)
        seeds.append(straight.seeds(3))
        straight.tell(sphere(x))
    es = MAKERS[algo]()
    for _ in range(k):
        es.tell(sphere(es.ask()))
    es_state.save(tmp_path / "s.npz", {"es": es.state_dict()})
    del es
    np.random.seed(99)  # a stray user of the global RNG must not matter
    es = es_from_state(es_state.load(tmp_path / "s.npz")["es"])
    for g in range(k, N):
        x = es.ask()
        assert x.tobytes() == asked[g].tobytes(), g
        np.testing.assert_array_equal(es.seeds(3), seeds[g])
        es.tell(sphere(x))
    assert es.mean.tobytes() == straight.mean.tobytes() and es.sigma == straight.sigma
    assert flat(es.state_dict()) == flat(straight.state_dict())  # all of it, not only what the mean shows


def test_a_state_is_taken_after_a_tell_and_a_mismatched_one_is_refused(tmp_path):
    es = CMAES(4, popsize=6, seed=1)
    es.ask()
    with pytest.raises(RuntimeError, match="between ask"):
        es.state_dict()
    es.tell(np.zeros(6))
    st = es.state_dict()
    with pytest.raises(es_state.StateError, match=r"separable CMA-ES's \(es.cma_diagonal, retired.*f7ffdf8"):
        CMAES.from_state({**st, "diagonal": True})  # a checkpoint of the retired lever
    assert CMAES.from_state({**st, "diagonal": False}).n == 4  # older full-covariance checkpoints name it as false
    with pytest.raises(es_state.StateError, match="options differ"):
        CMAES.from_state({**st, "options": {**st["options"], "CMA_active": False}})
    sm = st["es"]["attrs"]["sm"]
    sm["object"] = "cma.sampler.GaussStandardConstant"  # another sampler class than the one built
    with pytest.raises(es_state.StateError, match="GaussStandardConstant, this pycma builds cma.sampler.GaussFullSampler"):
        CMAES.from_state(st)
    with pytest.raises(es_state.StateError, match="'nes'"):
        es_from_state({**st, "algorithm": "nes"})


# ---------------------------------------------------------------- the stage's file


def controller(run: RunDir) -> Path:
    return run.path / "controller"


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder under `root` (a refused command must leave it exactly so)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def test_the_checkpoint_is_arrays_and_json_read_without_pickle(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        stage(toy_cfg(), tmp_path / "r", stop_after=2)
    path = controller(RunDir(tmp_path / "r")) / "es_state.npz"
    assert not (controller(RunDir(tmp_path / "r")) / "es_state.pkl").exists()
    with zipfile.ZipFile(path) as z:
        assert all(n.endswith(".npy") for n in z.namelist())
    with np.load(path, allow_pickle=False) as f:
        entries = {k: f[k] for k in f.files}  # every entry loads without unpickling
    assert all(not a.dtype.hasobject for a in entries.values())
    body = json.loads(str(entries["state"][()]))
    assert (body["format"], body["version"]) == ("wm-es-state", 1)
    st = es_state.load(path)
    assert (st["version"], st["generation"], st["es"]["algorithm"], st["n_params"]) == (2, 2, "cma", 192)
    assert st["es"]["es"]["object"] == "cma.evolution_strategy.CMAEvolutionStrategy"


def test_a_damaged_or_tampered_checkpoint_is_refused_in_one_line_and_runs_nothing(tmp_path):
    cfg = toy_cfg()
    with pytest.raises(KeyboardInterrupt):
        stage(cfg, tmp_path / "r", stop_after=2)
    run = RunDir(tmp_path / "r")
    path = controller(run) / "es_state.npz"
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # torn
    with pytest.raises(WMError, match=r"es_state\.npz: unreadable checkpoint .*--force"):
        stage(cfg, run.path)
    # a tree that names another class: compared, never imported or called
    path.write_bytes(good)
    st = es_state.load(path)
    st["es"]["es"]["object"] = "posix.system"
    es_state.save(path, st)
    with pytest.raises(WMError, match=r"unreadable checkpoint \(.*posix\.system"):
        stage(cfg, run.path)
    # an object array (a pickle inside the .npz) planted next to the state: refused, not unpickled
    marker = tmp_path / "ran"
    path.write_bytes(good)
    with np.load(path, allow_pickle=False) as f:
        entries = {k: f[k] for k in f.files}
    np.savez(path, **entries, planted=np.array([Plant(marker)], dtype=object))  # np.savez pickles it
    with pytest.raises(WMError, match="unreadable checkpoint"):
        stage(cfg, run.path)
    assert not marker.exists()


class Plant:
    """A pickle whose loading creates `marker` (what a planted checkpoint could do with os.system)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant_pickle(run: RunDir, marker: Path) -> Path:
    legacy = controller(run) / "es_state.pkl"
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_bytes(pickle.dumps({"version": 1, "generation": 3, "es": Plant(marker)}))
    return legacy


CLI = ["train-controller", "--configs", "doom_takecover", "tiny"]
SETS = ["--set", "es.fitness=toy", "es.generations=4", "es.eval_every=2"]


def test_an_older_pickled_checkpoint_is_refused_in_one_line_and_changes_nothing(tmp_path, capsys):
    """The CLI (a resume and an --extend) and the stage itself refuse an es_state.pkl in one line that says what it
    is and how to go on (--force, or the last commit that reads it), without unpickling it (the marker its
    __reduce__ would create does not exist) and without changing a byte of the run dir."""
    from wm.cli import main
    from wm.es.checkpoint import LAST_PICKLE_READER

    run = RunDir(tmp_path / "r")
    run.bind_config(toy_cfg())
    marker = tmp_path / "ran"
    legacy = plant_pickle(run, marker)
    before = snapshot(run.path)
    for extra in ([], ["--extend"]):
        assert main([*CLI, "--run", str(run.path), *extra, *SETS]) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(legacy) in err, err
        assert "pickle format of an older version" in err and "--force" in err and LAST_PICKLE_READER in err, err
        assert not marker.exists() and snapshot(run.path) == before
    with pytest.raises(WMError, match=f"pickle format of an older version.*--force.*{LAST_PICKLE_READER}"):
        stage(toy_cfg(), run.path)
    assert not marker.exists() and snapshot(run.path) == before


def test_force_starts_afresh_without_reading_an_older_pickle(tmp_path):
    run = RunDir(tmp_path / "r")
    run.bind_config(toy_cfg())
    marker = tmp_path / "ran"
    legacy = plant_pickle(run, marker)
    stage(toy_cfg(), run.path, force=True)
    assert not marker.exists() and not legacy.exists() and (controller(run) / "es_state.npz").exists()
    assert [r["es/generation"] for r in history(run)] == [1, 2, 3, 4]


def test_two_cma_runs_of_one_seed_checkpoint_the_same_state():
    """pycma's global-RNG state starts from the seed, not from the process's entropy, so two unbroken runs (or a run and
    its kill-and-rerun) write the same es_state (before: numpy's entropy-seeded state differed between processes)."""

    def run(noise: int) -> dict:
        np.random.seed(noise)  # whatever the process drew before
        es = CMAES(6, 8, 0.1, seed=3)
        for _ in range(2):
            pop = es.ask()
            es.tell(-np.sum(pop**2, axis=1))
        return es.state_dict()

    a, b = run(1), run(2)
    assert a["np_state"][0] == b["np_state"][0] and np.array_equal(a["np_state"][1], b["np_state"][1])
    assert a["np_state"][2:] == b["np_state"][2:]
