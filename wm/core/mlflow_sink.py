"""MLflow as an optional metrics sink (`metrics.sinks: [..., mlflow]`), beside the JSONL, TensorBoard and the console.

One MLflow run per run directory, created by the first stage that logs and resumed by every later one (its id is
kept in `<run>/mlflow_run.json`), so a whole pipeline — and its rounds, which are run directories of their own —
reads as one run per directory in the MLflow UI:

* params: the flattened config when the MLflow run is created (MLflow params cannot change; a later `--set` shows
  up in config.yaml and in the stage's tags);
* metrics: every `Logger.scalars` call, with its step (keys are already namespaced: `vae/loss`, `es/best`, …);
* artifacts: when a stage's logger closes, the pictures and GIFs under its folder (`vae/reconstructions.png`,
  `mdnrnn/dream_preview.gif`, `eval/<tag>/episode_*.gif`, …), under the folder's name.

The tracking store is `$MLFLOW_TRACKING_URI` (the user's environment), else a file store in `<run>/mlruns`: a remote
server never comes from a run directory's own files, so a copied run cannot make a command contact an address
(docs/guide/run-directory.md). `mlflow_run.json`'s run is resumed only in the store this command would use.
(MLflow 3 keeps file stores in maintenance mode and refuses them unless `MLFLOW_ALLOW_FILE_STORE` is set: this sink
sets it for its own file store.) A sink that fails (no server, no permission) logs one warning and turns itself off:
a training run never stops because of its metrics copy.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from wm.core.config import flatten

RUN_FILE = "mlflow_run.json"
MEDIA = (".png", ".gif")
MAX_PARAM = 500  # MLflow's limit on a param value's length


def _own_store(uri: str, run: Path) -> bool:
    """Whether `uri` is a file store inside the run directory `run`."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return False
    top, where = run.resolve(), Path(unquote(parsed.path)).resolve()
    return top in where.parents


class MlflowSink:
    """The MLflow side of one stage's `Logger`; `warn` gets one line if the sink gives up."""

    def __init__(self, run, cfg, verb: str, folder: Path, warn):
        self.run, self.verb, self.folder, self.warn = run, verb, Path(folder), warn
        self.client = self.run_id = None
        try:
            from mlflow.tracking import MlflowClient

            from wm.core.bounded import read_json_or

            env_uri = os.environ.get("MLFLOW_TRACKING_URI", "")
            uri = env_uri or (Path(run.path).resolve() / "mlruns").as_uri()
            path = Path(run.path) / RUN_FILE
            stored = read_json_or(path, {}) if path.exists() else {}
            stored = stored if isinstance(stored, dict) else {}
            made_in = str(stored.get("tracking_uri", ""))
            # the run's MLflow run lives in the store that created it, when that is the run's own file store or the
            # environment's server; a server named only by the run's file is never contacted (a new run here)
            if made_in and (made_in == env_uri or _own_store(made_in, Path(run.path))):
                uri = made_in
            else:
                stored = {}
            if uri.startswith("file:"):
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            self.client = MlflowClient(tracking_uri=uri)
            self.run_id = str(stored["run_id"]) if stored else self._new_run(cfg, path)
            self.client.set_tag(self.run_id, f"stage.{verb}", time.strftime("%Y-%m-%d %H:%M:%S"))
        except Exception as e:  # noqa: BLE001 — any failure of the optional sink: say so once, carry on
            self._give_up(e)

    def _new_run(self, cfg, path: Path) -> str:
        """Create the directory's MLflow run with the config as params; its id (and store) go to `path`."""
        name = cfg.metrics.mlflow_experiment or "world-models"
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
        made = self.client.create_run(exp_id, run_name=Path(self.run.path).name, tags={"run_dir": str(self.run.path)})
        rid = made.info.run_id
        from mlflow.entities import Param

        params = [Param(k, str(v)[:MAX_PARAM]) for k, v in sorted(flatten(cfg.to_dict()).items())]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(rid, params=params[i : i + 100])
        from wm.core.atomic import atomic_write_json

        atomic_write_json(path, {"run_id": rid, "tracking_uri": self.client.tracking_uri, "experiment": name})
        return rid

    def _give_up(self, e: BaseException) -> None:
        self.warn("MLflow sink off: %s: %s", type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        self.client = None

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if self.client is None:
            return
        try:
            from mlflow.entities import Metric

            ts = int(time.time() * 1000)
            metrics = [Metric(k, v, ts, int(step)) for k, v in values.items() if v == v and abs(v) != float("inf")]
            if metrics:
                self.client.log_batch(self.run_id, metrics=metrics)
        except Exception as e:  # noqa: BLE001
            self._give_up(e)

    def close(self) -> None:
        """Log the stage folder's pictures and GIFs as artifacts (`<folder name>/...`)."""
        if self.client is None or not self.folder.is_dir():
            return
        try:
            for p in sorted(self.folder.rglob("*")):
                if p.suffix in MEDIA and p.is_file() and not p.name.startswith(".tmp"):
                    rel = p.parent.relative_to(self.folder.parent)
                    self.client.log_artifact(self.run_id, str(p), artifact_path=rel.as_posix())
        except Exception as e:  # noqa: BLE001
            self._give_up(e)
