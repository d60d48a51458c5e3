"""What several test modules share: the tiny config, run dirs built on it, and the fixture runs and readers more than
one module uses. A test module imports them from here (`from tests.helpers import tiny_cfg`), never from another test
module; the pytest fixtures are in tests/conftest.py. Nothing here imports TensorFlow or Keras at module level: a
helper that needs them imports them when called."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wm.core.atomic import atomic_savez
from wm.core.bounded import read_jsonl
from wm.core.config import Config, defaults, load, update
from wm.core.rundir import RunDir

# ---------------------------------------------------------------- the tiny config and a run dir bound to it


def tiny_cfg(*sets: str, env: str = "doom_takecover") -> Config:
    """The tiny recipe on `env` (`--configs <env> tiny`) with `sets` ("key=value" strings, as `--set` takes them)."""
    return load([env, "tiny"], list(sets))


def tiny_run_at(path: Path, *sets: str) -> RunDir:
    """A new run dir at `path` holding tiny_cfg(*sets) as its config.yaml, no stage started."""
    run = RunDir(path)
    run.bind_config(tiny_cfg(*sets))
    return run


def write_initial_z(run: RunDir, z: int, rng: np.random.Generator) -> None:
    """encode's initial_z.npz: 5 random starting z's (dreams start from one)."""
    atomic_savez(
        run.stage_dir("encode") / "initial_z.npz",
        mu=rng.standard_normal((5, z)).astype(np.float32),
        logvar=np.full((5, z), -2.0, np.float32),
    )


# ---------------------------------------------------------------- the train-controller stage, serially, toy fitness

TIMING = {"es/elapsed", "es/evals_per_s", "time"}  # a metrics record's figures of time, which two runs never share


def toy_cfg(**sets: object) -> Config:
    """The tiny config training C on the toy fitness: 4 generations, a check every 2; `sets` by dotted key."""
    base = {"es.fitness": "toy", "es.generations": 4, "es.eval_every": 2}
    base.update(sets)
    return tiny_cfg(*(f"{k}={v}" for k, v in base.items()))


def stage_run(verb: str, cfg: Config, run: RunDir, **opts: object) -> object:
    """Stage `verb` run in this process on `run` under the whole config `cfg`, its inputs resolved as the CLI does
    (`wm.stages.contract.stage_input`); `opts`: its Options."""
    from wm.core.registry import load_stage
    from wm.stages.contract import stage_input

    mod = load_stage(verb)
    return mod.run(stage_input(cfg, verb), run, mod.Options(**opts))


def train_vae(cfg: Config, run: RunDir, **kw: object) -> dict:
    """train-vae's training loop in this process (`kw`: `force`, `stop_at_step`), its log quiet."""
    from wm.core.metrics import make_logger
    from wm.stages.contract import stage_input
    from wm.stages.train_vae import train

    with make_logger(run, "train-vae", console=False) as log:
        return train(stage_input(cfg, "train-vae"), run, log, **kw)


def stage(cfg: Config, path, **kw: object) -> RunDir:
    """train-controller run in this process on the run dir at `path` (bound to `cfg`); `kw`: its Options."""
    run = RunDir(path)
    cfg = run.bind_config(cfg, "train-controller")
    stage_run("train-controller", cfg, run, **kw)
    return run


def history(run: RunDir) -> list[dict]:
    """train-controller's metrics records without their TIMING figures."""
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_jsonl(run.metrics_path("train-controller"))]


# ---------------------------------------------------------------- runs with random-weight models (no training)

WORLD_P, WORLD_K = 8, 2  # tiny_world's population (es.popsize) and trials per member (es.trials)
WORLD_SETS = [
    "vae.z_dim=6",
    "mdnrnn.hidden=12",
    "mdnrnn.num_mixtures=3",
    "dream.max_steps=60",
    f"es.popsize={WORLD_P}",
    f"es.trials={WORLD_K}",
    "es.generations=1",
    "es.eval_every=1",
    "es.eval_episodes=4",
]


def firing_m(cfg: Config, seed: int = 0, rng: np.random.Generator | None = None):
    """A random-weight Doom M (keras seed `seed`) whose done logit fires now and then (its column drawn from `rng`),
    so dream episodes end at different steps."""
    import keras

    from wm.models.mdnrnn import MDNRNN

    keras.utils.set_random_seed(seed)
    z, hidden = int(cfg.vae.z_dim), int(cfg.mdnrnn.hidden)
    m = MDNRNN(z, 1, hidden, int(cfg.mdnrnn.num_mixtures), True)
    m.step(np.zeros((1, z), np.float32), np.zeros((1, 1), np.float32), m.initial_state(1), np.ones(1, np.float32))
    b, w = m.out_bias.numpy(), m.out_kernel.numpy()
    b[0], w[:, 0] = -2.0, (rng or np.random.default_rng(0)).normal(0, 3.0, hidden)
    m.out_bias.assign(b)
    m.out_kernel.assign(w)
    return m


def tiny_world(path, sets: list[str] = (), seed: int = 0) -> tuple[Config, RunDir]:
    """A run dir holding a random-weight Doom M (a done logit that fires now and then; `seed` picks M's weights) and
    initial z's."""
    cfg = tiny_cfg(*WORLD_SETS, *sets)
    run = RunDir(path)
    run.bind_config(cfg, None)
    from wm.core import tf_setup

    tf_setup.setup(gpu=False)
    from wm.models.mdnrnn import save_config
    from wm.models.training import save_weights

    z, rng = int(cfg.vae.z_dim), np.random.default_rng(0)
    m = firing_m(cfg, seed, rng)
    save_weights(m, run.stage_dir("train-mdnrnn") / "mdnrnn.weights.h5")
    save_config(m, run.stage_dir("train-mdnrnn") / "model.json")
    write_initial_z(run, z, rng)
    run.mark_done("train-mdnrnn", {})
    return cfg, run


EVALUATE_SETS = [
    "env.max_steps=24",
    "dream.max_steps=24",
    "evaluate.episodes=3",
    "evaluate.workers=1",
    "evaluate.gif_stride=2",
    "evaluate.seed=500",
    "es.real_envs_per_worker=2",
    "evaluate.temperatures=[0.5, 1.15]",
]


def evaluate_run(tmp_path, with_models: bool = True) -> tuple[Config, RunDir]:
    """A run dir with random-weight V, M, initial_z and C written by the real modules (no training)."""
    cfg = tiny_cfg(*EVALUATE_SETS)
    run = RunDir(tmp_path / "run")
    run.bind_config(cfg, None)
    if not with_models:
        return cfg, run
    from wm.core import tf_setup

    tf_setup.setup(gpu=False)
    from wm.envs.setup import setup
    from wm.models.mdnrnn import MDNRNN, save_config
    from wm.models.training import save_weights
    from wm.models.vae import ConvVAE

    z, hidden = cfg.vae.z_dim, cfg.mdnrnn.hidden
    save_weights(ConvVAE(z), run.stage_dir("train-vae") / "vae.weights.h5")
    m = MDNRNN(z, 1, hidden, cfg.mdnrnn.num_mixtures, True)
    m.step(np.zeros((1, z), np.float32), np.zeros((1, 1), np.float32), m.initial_state(1), np.ones(1, np.float32))
    save_weights(m, run.stage_dir("train-mdnrnn") / "mdnrnn.weights.h5")
    save_config(m, run.stage_dir("train-mdnrnn") / "model.json")
    rng = np.random.default_rng(0)
    write_initial_z(run, z, rng)
    n = setup(cfg).n_params
    atomic_savez(
        run.stage_dir("train-controller") / "best.npz",
        params=rng.standard_normal(n).astype(np.float32) * 0.1,
        score=np.float64(1.0),
        generation=np.int64(1),
    )
    return cfg, run


# ---------------------------------------------------------------- M's series and the train-mdnrnn stage


def write_series(folder, lengths, z_dim=4, a_dim=1, seed=0):
    """Synthetic series: z follows z_{t+1} = 0.9·roll(z_t) + 0.5·a_t (learnable), tiny logvar."""
    from wm.data.episodes import episode_name, write_episode

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(lengths):
        a = rng.uniform(-1, 1, (n, a_dim)).astype(np.float32)
        z = np.zeros((n, z_dim), np.float32)
        z[0] = rng.normal(size=z_dim)
        for t in range(n - 1):
            z[t + 1] = 0.9 * np.roll(z[t], 1) + 0.5 * a[t, 0]
        done = np.zeros(n, bool)
        done[-1] = True
        write_episode(
            folder / episode_name(i),
            mu=z.astype(np.float16),
            logvar=np.full((n, z_dim), -8, np.float16),
            action=a,
            reward=2.0 * a[:, 0],  # a function of the step's action: a reward head can learn it
            done=done,
        )
    atomic_savez(folder / "initial_z.npz", mu=np.zeros((2, z_dim), np.float32), logvar=np.zeros((2, z_dim), np.float32))


def mdnrnn_run(tmp_path, batching, **over):
    """A run dir for train-mdnrnn: a small M on Doom (`over`: more mdnrnn keys) and write_series' series as encode's."""
    cfg = update(
        defaults(),
        {
            "env": {"name": "doom_takecover"},
            "vae": {"z_dim": 4},
            "mdnrnn": {
                "hidden": 8,
                "num_mixtures": 2,
                "batching": batching,
                "seq_len": 6,
                "batch_size": 2,
                "epochs": 2,
                "steps": 4,
                "checkpoint_every": 2,
                "preview_episodes": 0,
                "predict_done": True,
                **over,
            },
        },
    )
    run = RunDir(tmp_path / "run")
    run.bind_config(cfg)
    write_series(run.stage_dir("encode"), [13, 9, 17, 11])
    return cfg, run


# ---------------------------------------------------------------- evaluations, rounds and τ sweeps on fake run dirs


def seeded_run(tmp_path: Path, name: str, seed: int = 0) -> RunDir:
    """A tiny run dir `name` under `tmp_path` with `run.seed` `seed`."""
    return tiny_run_at(tmp_path / name, f"run.seed={seed}")


def write_eval(run: RunDir, returns, tag: str = "real", seeds: list[int] | None = None) -> None:
    """An evaluation `tag` with these returns (seeds 1000, 1001, … unless given), as `evaluate` writes one."""
    from wm.rollouts.evaluation import write_results

    returns = np.asarray(returns, float)
    seeds = list(range(1000, 1000 + returns.size)) if seeds is None else seeds
    write_results(run, tag, seeds, returns, np.full(returns.size, 100), {"mode": tag})


def rounds_run(tmp_path) -> RunDir:
    """rounds.json as round control writes it: three passes, round1 the result, the random policy's check 210."""
    from wm.rounds.iterate import PassCheck
    from wm.rounds.record import write_rounds

    run = RunDir(tmp_path / "r")
    cfg = tiny_cfg()
    run.bind_config(cfg, None)
    passes = [
        PassCheck("first pass", str(run.path), real=310.0, dream=520.0),
        PassCheck("round1", str(run.path / "round1"), real=640.0, dream=900.0, final=610.0, final_episodes=100),
        PassCheck("round2", str(run.path / "round2"), real=450.0, dream=1800.0),
    ]
    write_rounds(run, cfg, passes, stopped="the rounds ran out", random=210.0)
    return run


def tau_sweep_rows() -> list[dict]:
    """eval/temperature_sweep.json's rows as `evaluate --sweep` writes them."""
    rows = []
    for tau, dream, real in ((1.3, 700.0, 650.0), (0.5, 1900.0, 300.0), (1.0, 1200.0, 800.0), (1.15, 950.0, 900.0)):
        s = {"episodes": 20, "mean": dream, "std": 300.0, "min": 1.0, "median": dream, "max": 2100.0, "len_mean": dream}
        rows.append({"temperature": tau, "episodes": 20, "dream": s, "real": {**s, "mean": real, "std": 400.0}})
    return rows


# ---------------------------------------------------------------- TensorBoard event files, read without TensorFlow


def events(folder) -> list:
    """Every Event of the event files directly in `folder`."""
    import struct

    from tensorboardX.proto import event_pb2

    out = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            (n,) = struct.unpack_from("<Q", data, pos)
            out.append(event_pb2.Event.FromString(data[pos + 12 : pos + 12 + n]))
            pos += 12 + n + 4
    return out


def tb_values(folder) -> list:
    """(step, Summary.Value) of every summary value in `folder`'s event files."""
    return [(e.step, v) for e in events(folder) for v in e.summary.value]
